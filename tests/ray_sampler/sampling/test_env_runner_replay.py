"""EnvRunner (plain class, no Ray) sending to a replay: chunks held for a dead replay actor, running episode ids."""

from __future__ import annotations

from typing import Any

import pytest

from ray_sampler.data.columnar import columnar_to_episodes
from ray_sampler.sampling.env_runner import EnvRunner
from replay.actor import ReplayActor, ReplayConfig
from tests.ray_sampler.sampling.checks import MODES, stamp_config, stamps


class DeadReplay:
    """A replay whose actor has died: every ``add`` raises Ray's ``RayActorError``."""

    def add(self, data: Any) -> Any:
        import ray

        raise ray.exceptions.RayActorError()


def test_drain_returns_chunks_held_for_a_dead_replay_before_the_running_steps() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=2, rollout_fragment_length=2))
    assert runner.sample_to(DeadReplay()).num_env_steps_held_for_replay == 4
    runner.sample(num_episodes=1)  # sub-env 0's whole second episode; sub-env 1's steps stay with the runner
    drained, dropped = runner.drain()
    assert dropped == 0
    assert [stamps(ep) for ep in drained] == [
        [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2)],  # held for the replay: first, in order
        [(0, 1, 0, 0), (0, 1, 0, 1), (0, 1, 0, 2)],
        [(0, 1, 0, 2), (0, 1, 0, 3)],  # then what the runner kept: the pending end of an episode
        [(0, 1, 1, 0), (0, 1, 1, 1), (0, 1, 1, 2), (0, 1, 1, 3), (0, 1, 1, 4)],  # and the running one
    ]


@pytest.mark.parametrize("mode", MODES)
def test_sample_to_reports_the_episodes_it_shipped_unfinished_that_still_run(mode: str) -> None:
    runner = EnvRunner(stamp_config(mode, num_envs_per_env_runner=2, rollout_fragment_length=4))
    replay = ReplayActor(ReplayConfig(capacity_env_steps=1_000))
    for _ in range(3):  # episodes of 2..8 steps: some end on the way
        reported = runner.sample_to(replay).running_episode_ids
        stored = columnar_to_episodes(replay.get_state().episodes)
        assert reported == sorted(ep.id_ for ep in stored if not ep.is_done)


def test_sample_to_does_not_report_the_episodes_a_force_reset_ended() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=2, rollout_fragment_length=4))
    replay = ReplayActor(ReplayConfig(capacity_env_steps=1_000))
    before = runner.sample_to(replay).running_episode_ids
    assert before is not None and len(before) == 2
    after = runner.sample_to(replay, force_reset=True).running_episode_ids
    stored = columnar_to_episodes(replay.get_state().episodes)  # the reset-away episodes' last chunks too
    assert after == sorted(ep.id_ for ep in stored if not ep.is_done and ep.id_ not in before)
    assert len(after) == 2


def test_sample_columnar_reports_no_running_episode_ids() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=2, rollout_fragment_length=4))
    _, metrics = runner.sample_columnar()
    assert metrics.running_episode_ids is None
