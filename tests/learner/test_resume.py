"""Resuming training from a checkpoint: the restored learners, connector states and counters equal
the saved ones, and a resumed run carries on from them (PPO and DQN)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import ray

from connectors.common import MeanStdFilter
from learner.checkpoint import Checkpointer, CheckpointError, TrainingState, latest_checkpoint, load_checkpoint
from learner.learner_group import LearnerGroup
from learner.train import PPOTrainingConfig, ReturnTracker, env_spaces, restore_training, train_ppo
from learner.train_dqn import DQNTrainingConfig, train_dqn
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner import build_module
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from tests.learner.test_checkpoint import assert_same

pytestmark = pytest.mark.usefixtures("ray_session")

SPACE = repr(env_spaces("CartPole-v1")[0])


def small_ppo(max_iterations: int) -> PPOTrainingConfig:
    base = PPOTrainingConfig()
    return dataclasses.replace(
        base,
        env_runner=dataclasses.replace(base.env_runner, num_envs_per_env_runner=2, rollout_fragment_length=64),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.25),
        max_iterations=max_iterations,
        target_return=None,
    )


def saved_ppo_run(tmp_path: Path) -> TrainingState:
    train_ppo(small_ppo(2), log=lambda _: None, checkpointer=Checkpointer(tmp_path / "a", every=2))
    found = latest_checkpoint(tmp_path / "a")
    assert found is not None and found.name == "ckpt-0000002"
    return load_checkpoint(found, algo="ppo", env="CartPole-v1", observation_space=SPACE)


def test_restoring_puts_the_learners_and_the_stop_rule_in_the_saved_state(tmp_path: Path) -> None:
    saved = saved_ppo_run(tmp_path)
    assert saved.env_steps == 2 * 128 and saved.learner["optimizer"]["t"] > 0
    cfg = small_ppo(2)
    learners = LearnerGroup(lambda: build_module(cfg.env_runner, *env_spaces("CartPole-v1")), cfg.ppo)
    tracker = ReturnTracker(None, cfg.stop_window)
    restore_training(saved, learners, None, tracker)
    assert_same(learners.get_states()[0], saved.learner)  # weights, optimizer moments and step, RNG, version
    assert (tracker.returns and list(tracker.returns)) == saved.returns and tracker.episodes == saved.episodes
    assert tracker.elapsed >= saved.elapsed_s


def test_a_checkpoint_of_another_architecture_is_refused_naming_it(tmp_path: Path) -> None:
    """Same algorithm, env and space, other hidden sizes (``--resume RUN --hidden-sizes 32`` asks for
    that): a CheckpointError, not the module's raw ValueError."""
    saved = saved_ppo_run(tmp_path)
    cfg = small_ppo(2)
    runner = dataclasses.replace(cfg.env_runner, module_config={"hidden_sizes": (32,)})
    learners = LearnerGroup(lambda: build_module(runner, *env_spaces("CartPole-v1")), cfg.ppo)
    with pytest.raises(CheckpointError) as raised:
        restore_training(saved, learners, None, ReturnTracker(None, cfg.stop_window))
    assert str(raised.value).startswith(
        "checkpoint of ppo on CartPole-v1 at iteration 2: its learner state does not fit this run's learners "
        "(ValueError: MLPModule.set_state: keys differ"
    )


def test_a_resumed_ppo_run_carries_on_from_the_checkpoint(tmp_path: Path) -> None:
    saved = saved_ppo_run(tmp_path)
    result = train_ppo(
        small_ppo(3), log=lambda _: None, checkpointer=Checkpointer(tmp_path / "b", every=1), resume=saved
    )
    assert result.iterations == 3 and result.env_steps == 3 * 128
    after = load_checkpoint(tmp_path / "b" / "ckpt-0000003", algo="ppo", env="CartPole-v1", observation_space=SPACE)
    # One more update on top of the saved optimizer: its step count goes on from the saved one.
    steps_per_update = saved.learner["optimizer"]["t"] // 2
    assert after.learner["optimizer"]["t"] == saved.learner["optimizer"]["t"] + steps_per_update
    assert after.learner["weights_version"] == saved.learner["weights_version"] + 1
    assert after.episodes >= saved.episodes and after.elapsed_s >= saved.elapsed_s


def test_connector_states_are_restored_on_every_runner() -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        num_envs_per_env_runner=2,
        rollout_fragment_length=16,
        env_to_module_connectors=(MeanStdFilter(),),
    )
    group_config = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.25)
    with EnvRunnerGroup(config, group_config) as group:
        group.sample()
        merged = group.sync_connector_states()
    saved = TrainingState(
        algo="ppo", env="CartPole-v1", observation_space=SPACE, iteration=1, env_steps=64, connector_states=merged
    )
    learners = LearnerGroup(lambda: build_module(config, *env_spaces("CartPole-v1")), PPOTrainingConfig().ppo)
    with EnvRunnerGroup(config, group_config) as fresh:
        restore_training(
            dataclasses.replace(saved, learner=learners.get_states()[0]), learners, fresh, ReturnTracker(None)
        )
        for index in (1, 2):
            state = ray.get(fresh.actor(index).get_state.remote(), timeout=60)["env_to_module"]
            (name,) = merged
            for key, value in merged[name]["global"].items():
                np.testing.assert_array_equal(state[name]["global"][key], value)


@pytest.mark.parametrize("shards", [1, 2])
def test_a_resumed_dqn_run_restores_its_replay_and_counters(tmp_path: Path, shards: int) -> None:
    """With replay shards the checkpoint holds a folder with each shard's file, and a run resumes
    only with the same number of shards (each runner's episodes are in its own shard)."""
    base = DQNTrainingConfig()
    cfg = dataclasses.replace(
        base,
        env_runner_group=dataclasses.replace(
            base.env_runner_group, num_env_runners=shards, num_cpus_per_env_runner=0.25
        ),
        replay=dataclasses.replace(base.replay, min_size_to_sample=200),
        max_env_steps=600,
        target_return=None,
        num_replay_shards=shards,
    )
    train_dqn(cfg, log=lambda _: None, log_every_s=0.0, checkpointer=Checkpointer(tmp_path / "a", every=2))
    found = latest_checkpoint(tmp_path / "a")
    assert found is not None
    saved = load_checkpoint(found, algo="dqn", env="CartPole-v1", observation_space=SPACE)
    assert saved.replay_path is not None and saved.counters["num_updates"] > 0
    if shards > 1:
        files = sorted(p.name for p in saved.replay_path.iterdir())
        assert files == ["replay.shard-0.parquet", "replay.shard-1.parquet"]
        one = dataclasses.replace(cfg, num_replay_shards=1)
        with pytest.raises(ConfigError, match=r"^'num_replay_shards' \(1\) must match the checkpoint's replay, saved"):
            train_dqn(one, log=lambda _: None, resume=saved)
    result = train_dqn(
        dataclasses.replace(cfg, max_env_steps=saved.env_steps + 256),
        log=lambda _: None,
        log_every_s=0.0,
        checkpointer=Checkpointer(tmp_path / "b", every=1),
        resume=saved,
    )
    assert result.env_steps >= saved.env_steps + 256
    assert result.num_updates > saved.counters["num_updates"]  # the count went on from the saved one
    # The restored replay held what was saved: it received the saved steps and the new ones.
    assert result.replay_num_env_steps_received >= saved.env_steps + 256
