"""EnvRunnerGroup's answer order: runner order with a seed, so a seeded PPO run repeats exactly
whichever runner answers first; arrival order without one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray

from learner.learner import PPOConfig
from learner.metrics import IterationRecord
from learner.train import PPOTrainingConfig, train_ppo
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_creator import EnvContext, register_env, unregister_env
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from replay.actor import ReplayActor, ReplayConfig
from tests.helpers import stamp_creator

pytestmark = pytest.mark.usefixtures("ray_session")

SLOW_CARTPOLE = "RaySamplerSlowCartPole-v1"
"""CartPole-v1 whose runner ``env_config["slow_worker"]`` sleeps 5 ms a step: it answers last."""


class _Sleepy(gym.Wrapper):
    """Sleeps ``sleep_s`` before each step; the dynamics are the wrapped env's."""

    def __init__(self, env: gym.Env, sleep_s: float) -> None:
        super().__init__(env)
        self.sleep_s = sleep_s

    def step(self, action: Any) -> Any:
        time.sleep(self.sleep_s)
        return self.env.step(action)


def slow_cartpole(ctx: EnvContext) -> gym.Env:
    return _Sleepy(gym.make("CartPole-v1"), 0.005 if ctx.get("slow_worker") == ctx.worker_index else 0.0)


@pytest.fixture
def slow_cartpole_env() -> Iterator[str]:
    """SLOW_CARTPOLE: a gymnasium id (the loop probes its spaces with gymnasium.make) that runners
    build through ``slow_cartpole`` (a registered name wins over the gymnasium id)."""
    if SLOW_CARTPOLE not in gym.registry:
        gym.register(SLOW_CARTPOLE, entry_point="gymnasium.envs.classic_control:CartPoleEnv", max_episode_steps=500)
    register_env(SLOW_CARTPOLE, slow_cartpole)
    yield SLOW_CARTPOLE
    unregister_env(SLOW_CARTPOLE)


def stamp_group(*, seed: int | None, slow_worker: int = 1, **group: Any) -> EnvRunnerGroup:
    config = EnvRunnerConfig(
        env=stamp_creator,
        env_config={"slow_worker": slow_worker, "sleep_s": 0.05},
        num_envs_per_env_runner=2,
        rollout_fragment_length=4,
        seed=seed,
    )
    return EnvRunnerGroup(
        config, EnvRunnerGroupConfig(num_env_runners=3, num_cpus_per_env_runner=0.5, sample_timeout_s=60, **group)
    )


def test_seeded_answers_come_in_runner_order_though_runner_1_answers_last() -> None:
    with stamp_group(seed=0) as group:
        answers = group.sample_columnar()
        assert [m.worker_index for _, m in answers] == [1, 2, 3]
        assert group.metrics.episode_returns == [r for _, m in answers for r in m.episode_returns]
        assert list(group.metrics.weights_versions) == [1, 2, 3]


def test_seeded_answers_with_keep_sampling_come_in_runner_order() -> None:
    with stamp_group(seed=0, keep_sampling=True) as group:
        assert [m.worker_index for _, m in group.sample_columnar()] == [1, 2, 3]
        assert [m.worker_index for _, m in group.sample_columnar()] == [1, 2, 3]
        assert [m.worker_index for _, m in group.collect_in_flight()] == [1, 2, 3]


def test_seeded_sample_to_replay_answers_come_in_runner_order() -> None:
    replay: Any = ray.remote(ReplayActor).options(num_cpus=0).remote(ReplayConfig(capacity_env_steps=1_000))
    try:
        with stamp_group(seed=0) as group:
            answers = group.sample_to_replay(replay)
            assert [m.worker_index for m in answers] == [1, 2, 3]
            assert [m.replay is not None for m in answers] == [True, True, True]
    finally:
        ray.kill(replay)


def test_unseeded_answers_come_in_arrival_order() -> None:
    with stamp_group(seed=None) as group:
        answers = group.sample_columnar()
        assert len(answers) == 3 and {m.worker_index for _, m in answers} == {1, 2, 3}
        assert answers[-1][1].worker_index == 1  # the slow runner: nothing to repeat, so no waiting on order


def _ppo_run(env: str, slow_worker: int) -> tuple[list[Any], dict[str, np.ndarray]]:
    """(env steps, mean return, episodes, losses) per iteration and the final weights of a small seeded run."""
    runner = EnvRunnerConfig(
        env=env, env_config={"slow_worker": slow_worker}, num_envs_per_env_runner=2, rollout_fragment_length=32, seed=7
    )
    cfg = PPOTrainingConfig(
        env_runner=runner,
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5, sample_timeout_s=60),
        ppo=PPOConfig(lr=1e-3, num_epochs=2, minibatch_size=32, seed=7),
        max_iterations=3,
        target_return=None,
    )
    records: list[IterationRecord] = []
    result = train_ppo(cfg, log=lambda line: None, on_iteration=records.append)
    assert result.iterations == 3
    rows = [(r.env_steps, r.return_mean, r.episodes, r.losses) for r in records]
    return rows, result.policy.module.get_state()  # the final weights, as the run returns them


def test_a_seeded_ppo_run_repeats_exactly_whichever_runner_answers_first(
    slow_cartpole_env: str,
) -> None:
    # Runner 1 answers last in the first run, runner 2 in the second: the same seed, the same run.
    rows_1, weights_1 = _ppo_run(slow_cartpole_env, 1)
    rows_2, weights_2 = _ppo_run(slow_cartpole_env, 2)
    assert [steps for steps, *_ in rows_1] == [128, 256, 384]
    assert rows_1 == rows_2
    assert weights_1.keys() == weights_2.keys() and weights_1
    for key, value in weights_1.items():
        np.testing.assert_array_equal(value, weights_2[key], err_msg=key)
