"""Algorithm: a run stepped by its user, on the same loop as train_ppo and train_dqn; train, evaluate,
save, restore, from_checkpoint, get_policy and stop with RLlib's names."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from learner.algorithm import Algorithm
from learner.checkpoint import CheckpointError, load_checkpoint
from learner.train import PPOTrainingConfig, train_ppo
from learner.train_dqn import DQNTrainingConfig
from ray_sampler.errors import ConfigError
from ray_sampler.policy import Policy
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.evaluation import EvaluationConfig


def ppo(**kwargs: object) -> PPOTrainingConfig:
    runner = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=64, seed=0)
    group = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    return PPOTrainingConfig(env_runner=runner, env_runner_group=group, target_return=None, **kwargs)  # type: ignore[arg-type]


def _live_actors() -> int:
    """Live named actors (every runner, replay and evaluation runner has a name)."""
    import ray

    return len(ray.util.list_named_actors())


def test_a_config_of_another_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'config' must be a PPOTrainingConfig or a DQNTrainingConfig \(got dict\)"):
        Algorithm({"env": "CartPole-v1"})  # type: ignore[arg-type]


@pytest.mark.usefixtures("ray_session")
def test_train_steps_the_same_loop_as_train_ppo_and_save_restore_carry_it_on(tmp_path: Path) -> None:
    cfg = ppo(max_iterations=4)
    whole = []
    train_ppo(cfg, on_iteration=whole.append)
    with Algorithm(cfg, policy_dir=tmp_path / "final") as algo:
        stepped = [algo.train() for _ in range(2)]
        assert algo.iteration == 2 and not algo.is_done
        checkpoint = algo.save(tmp_path)
        policy = algo.get_policy()
        evaluation = algo.evaluate()  # evaluation off in the config: runners of its own start now
        assert evaluation.num_episodes == 10 and evaluation.summary()["episode_return_mean"] > 0
        stepped += [algo.train() for _ in range(2)]
        assert algo.is_done
        with pytest.raises(ConfigError, match=r"the run is done at iteration 4 \(stopped by its 'max_iterations'\)"):
            algo.train()
    # One loop: the same seeds give the same env steps, episodes and returns step by step as run whole.
    assert [(r.iteration, r.env_steps, r.episodes) for r in stepped] == [
        (r.iteration, r.env_steps, r.episodes) for r in whole
    ]
    np.testing.assert_allclose([r.return_mean for r in stepped], [r.return_mean for r in whole], rtol=1e-9)
    assert checkpoint == tmp_path / "ckpt-0000002"
    assert Policy.from_checkpoint(tmp_path / "final").info["iteration"] == 4  # the run's end kept its policy
    saved = Policy.from_checkpoint(checkpoint)  # the checkpoint's policy is the one the runners had then
    assert all(np.array_equal(saved.module.get_state()[k], v) for k, v in policy.module.get_state().items())
    resumed = Algorithm.from_checkpoint(checkpoint, cfg)
    try:
        assert resumed.iteration == 2
        assert [(r.iteration, r.env_steps) for r in (resumed.train(), resumed.train())] == [(3, 1536), (4, 2048)]
        resumed.restore(checkpoint)  # back to iteration 2, its actors started anew
        assert resumed.iteration == 2 and resumed.train().iteration == 3
    finally:
        resumed.stop()
    with pytest.raises(ConfigError, match=r"Algorithm.get_policy: the run is stopped \(its actors are freed\)"):
        resumed.get_policy()
    other = dataclasses.replace(cfg, env_runner=dataclasses.replace(cfg.env_runner, env="Acrobot-v1"))
    with pytest.raises(CheckpointError, match=r"is of ppo on CartPole-v1 .*this run is ppo on Acrobot-v1"):
        Algorithm.from_checkpoint(checkpoint, other)


@pytest.mark.usefixtures("ray_session")
def test_stop_frees_every_actor_of_a_dqn_run_with_evaluation_runners(tmp_path: Path) -> None:
    before = _live_actors()
    cfg = dataclasses.replace(
        DQNTrainingConfig(), max_env_steps=2000, target_return=None,
        evaluation=EvaluationConfig(evaluation_interval=1, evaluation_duration=2, evaluation_num_env_runners=1),
    )  # fmt: skip
    algo = Algorithm(cfg, log_every_s=0.0)
    record = algo.train()
    assert record.iteration == 1 and record.evaluation["num_episodes"] == 2
    assert _live_actors() >= before + 4  # 2 runners, the replay, 1 evaluation runner
    saved = algo.save(tmp_path)
    assert load_checkpoint(saved, algo="dqn", env="CartPole-v1", observation_space=repr(_cartpole_space())).replay_path
    algo.stop()
    deadline = time.monotonic() + 30
    while _live_actors() > before and time.monotonic() < deadline:  # ray.kill returns before the process is gone
        time.sleep(0.2)
    assert _live_actors() == before
    with pytest.raises(ConfigError, match=r"Algorithm.save: the run is stopped"):
        algo.save(tmp_path)


def _cartpole_space() -> object:
    import gymnasium as gym

    return gym.make("CartPole-v1").observation_space


@pytest.mark.usefixtures("ray_session")
def test_the_asynchronous_loops_step_save_and_carry_on_too(tmp_path: Path) -> None:
    cfg = ppo(max_iterations=4, optimizer="async_gradients")
    with Algorithm(cfg) as algo:
        assert [algo.train().iteration for _ in range(2)] == [1, 2]
        checkpoint = algo.save(tmp_path)
    with Algorithm.from_checkpoint(checkpoint, cfg) as algo:
        assert algo.iteration == 2 and [algo.train().iteration for _ in range(2)] == [3, 4] and algo.is_done
