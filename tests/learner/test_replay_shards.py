"""Replay shards through Ray: each runner's chunks reach one shard whole, a killed shard alone is
restored from its own checkpoint with its loss counted, and the other shard keeps its data."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from learner.replay_recovery import SupervisedReplay
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from replay.actor import ReplayConfig
from replay.buffer import EpisodeReplayBuffer
from tests.helpers import kill_and_wait
from tests.learner.test_replay_recovery import GROUP, RUNNER, STEPS_PER_CALL

pytestmark = pytest.mark.usefixtures("ray_session")

PER_RUNNER = STEPS_PER_CALL // 2


def stored_stamps(replay: SupervisedReplay, shard: int) -> dict[str, list[list[int]]]:
    """Shard ``shard``'s stored episodes: their observations, ``[worker, sub-env, episode, t]``."""
    buffer = EpisodeReplayBuffer(capacity_env_steps=10)
    buffer.set_state(replay.call_shard(shard, "get_state"))
    return {id_: buffer.storage.episodes_columnar([id_]).data.observations.tolist() for id_ in buffer.storage.episodes}


def acked_by(answers: list[Any], worker_index: int) -> int:
    return sum(m.replay.num_env_steps_received for m in answers if m.worker_index == worker_index and m.replay)


def test_each_runner_fills_one_shard_and_a_killed_shard_alone_is_restored_with_its_loss(tmp_path: Path) -> None:
    path = tmp_path / "replay.parquet"
    replay = SupervisedReplay(ReplayConfig(checkpoint_path=str(path)), num_shards=2, timeout_s=30, num_cpus=0)
    try:
        with EnvRunnerGroup(RUNNER, GROUP) as runners:
            for _ in range(2):
                replay.sample_to_replay(runners)
            replay.call_each("save")
            assert sorted(p.name for p in tmp_path.glob("*.parquet")) == [
                "replay.shard-0.parquet",
                "replay.shard-1.parquet",
            ]
            after_save = replay.sample_to_replay(runners)
            lost = acked_by(after_save, 2)
            assert lost == PER_RUNNER and acked_by(after_save, 1) == PER_RUNNER
            first_shard = replay.actors[0]
            kill_and_wait(replay.actors[1])
            answers = replay.sample_to_replay(runners)  # runner 2 holds its chunks; runner 1 adds to shard 0
            held = {m.worker_index: m.num_env_steps_held_for_replay for m in answers}
            assert held == {1: 0, 2: PER_RUNNER} and acked_by(answers, 1) == PER_RUNNER
            assert replay.actors[0] is first_shard  # the live shard was left alone
            assert replay.metrics.num_replay_restarts == 1
            assert replay.metrics.num_env_steps_lost == lost
            assert replay.metrics.num_env_steps_lost_by_shard == (0, lost)
            (line,) = replay.take_recoveries()
            shard_file = re.escape(str(tmp_path / "replay.shard-1.parquet"))
            assert re.fullmatch(
                rf"replay shard 1 died \(a runner could not add its chunks\); restored from {shard_file} "
                rf"\(restart 1\), {lost} acknowledged env steps lost",
                line,
            )
            answers = replay.sample_to_replay(runners)  # runner 2's held chunks first, then its continuations
            assert acked_by(answers, 2) == 2 * PER_RUNNER
        received = [m.num_env_steps_received for m in replay.call_each("get_metrics")]
        # Shard 0: runner 1's 5 fragments. Shard 1: 2 checkpointed, 1 lost, 1 held and 1 new.
        assert received == [5 * PER_RUNNER, 4 * PER_RUNNER]
        for shard, worker in ((0, 1), (1, 2)):
            episodes = stored_stamps(replay, shard)
            assert episodes and {s[0] for stamps in episodes.values() for s in stamps} == {worker}
            for stamps in episodes.values():  # every continuation reached the shard holding its start
                assert [s[3] for s in stamps] == list(range(stamps[0][3], stamps[0][3] + len(stamps)))
    finally:
        replay.stop()


def test_a_shard_killed_under_the_learners_pull_is_restored_alone_and_the_update_owed() -> None:
    """The learner's pull reads every shard's mass first, so a dead shard fails it whichever shard
    would have been drawn: the update returns None (owed), only that shard is restored (empty: no
    checkpoint, so every step it acknowledged is lost), and the next pull draws from the live one."""
    from learner.dqn import DQNConfig, DQNLearner
    from learner.learner_group import LearnerGroup
    from ray_sampler.sampling.config import EnvRunnerConfig
    from tests.learner.test_dqn_replay import make_module

    runner = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=16, seed=0)
    replay = SupervisedReplay(
        ReplayConfig(min_size_to_sample=64, prioritized=True, seed=0), num_shards=2, timeout_s=30, num_cpus=0
    )
    learners = LearnerGroup(make_module, DQNConfig(), learner_class=DQNLearner)
    try:
        with EnvRunnerGroup(runner, GROUP) as runners:
            for _ in range(2):  # 2 runners x 2 sub-envs x 16 steps a call: 64 steps in each shard
                replay.sample_to_replay(runners)
            assert replay.update_from_replay(learners, 4, 16, prioritized=True) is not None
            live = replay.actors[1]
            kill_and_wait(replay.actors[0])
            assert replay.update_from_replay(learners, 4, 16, prioritized=True) is None
            assert replay.actors[1] is live and replay.metrics.num_env_steps_lost_by_shard == (64, 0)
            assert [m.num_env_steps for m in replay.call_each("get_metrics")] == [0, 64]
            update = replay.update_from_replay(learners, 4, 16, prioritized=True)
            assert update is not None and update.num_gradient_steps == 4
    finally:
        replay.stop()
        learners.stop()
