"""The replay's reports: a buffer's BufferMetrics, the ReplayActor's AddAck and ReplayMetrics, after
known adds, evictions, samples and checkpoints."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from replay.actor import ReplayActor, ReplayConfig
from replay.buffer import EpisodeReplayBuffer
from replay.metrics import AddAck, BufferMetrics, ReplayCounters, ReplayMetrics
from tests.replay.test_storage import episode

STEP_NBYTES = 24
"""One stored step of ``episode``: float32 obs + int64 action + float64 reward + float32 logp."""


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


class TestBufferMetrics:
    def test_an_empty_buffer_reports_zeros(self) -> None:
        assert EpisodeReplayBuffer(capacity_env_steps=10).get_metrics() == BufferMetrics(
            num_env_steps=0, num_episodes=0, num_evicted_episodes=0, num_evicted_env_steps=0, nbytes=0, step_nbytes=0
        )

    def test_adds_and_evictions_are_counted(self) -> None:
        buf = EpisodeReplayBuffer(capacity_env_steps=10)
        for name in "abc":
            buf.add([episode(name, 4, terminated=True)])
        assert buf.get_metrics() == BufferMetrics(
            num_env_steps=8,
            num_episodes=2,
            num_evicted_episodes=1,
            num_evicted_env_steps=4,
            nbytes=buf.storage.nbytes(),
            step_nbytes=STEP_NBYTES,
        )

    def test_an_episode_longer_than_the_capacity_counts_as_evicted_when_the_next_one_comes(self) -> None:
        buf = EpisodeReplayBuffer(capacity_env_steps=5)
        buf.add([episode("a", 8)])
        m = buf.get_metrics()
        assert (m.num_env_steps, m.num_episodes, m.num_evicted_episodes, m.num_evicted_env_steps) == (8, 1, 0, 0)
        buf.add([episode("b", 2)])
        m = buf.get_metrics()
        assert (m.num_env_steps, m.num_episodes, m.num_evicted_episodes, m.num_evicted_env_steps) == (2, 1, 1, 8)

    def test_continuation_chunks_count_their_steps_but_not_a_new_episode(self) -> None:
        buf = EpisodeReplayBuffer(capacity_env_steps=10)
        buf.add([episode("a", 3)])
        buf.add([episode("a", 2, start=3, lookback=1)])
        m = buf.get_metrics()
        assert (m.num_env_steps, m.num_episodes, m.num_evicted_episodes, m.num_evicted_env_steps) == (5, 1, 0, 0)

    def test_nbytes_holds_at_least_the_first_allocation_of_every_column(self) -> None:
        buf = EpisodeReplayBuffer(capacity_env_steps=10)
        buf.add([episode("a", 2)])
        assert buf.get_metrics().nbytes >= STEP_NBYTES * 1024  # 1024 rows are allocated up front

    def test_eviction_counts_survive_get_state_and_set_state(self) -> None:
        buf = EpisodeReplayBuffer(capacity_env_steps=6)
        for name in "abc":
            buf.add([episode(name, 3, terminated=True)])
        restored = EpisodeReplayBuffer(capacity_env_steps=6)
        restored.set_state(buf.get_state())
        m = restored.get_metrics()
        assert (m.num_env_steps, m.num_episodes, m.num_evicted_episodes, m.num_evicted_env_steps) == (6, 2, 1, 3)

    def test_metrics_are_frozen(self) -> None:
        m = EpisodeReplayBuffer(capacity_env_steps=10).get_metrics()
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'num_env_steps'"):
            m.num_env_steps = 1  # type: ignore[misc]


class TestAddAck:
    def test_acks_report_steps_received_kept_and_stored(self) -> None:
        actor = ReplayActor(ReplayConfig(capacity_env_steps=10))
        acks = [actor.add([episode(name, 4, terminated=True)]) for name in "abc"]
        assert [(a.num_env_steps, a.num_env_steps_received, a.num_env_steps_stored) for a in acks] == [
            (4, 4, 4),
            (4, 4, 8),
            (4, 4, 8),
        ]
        assert all(0.0 <= a.waited_s < 1.0 for a in acks)  # no ratio: nothing waits

    def test_steps_of_an_add_evicted_by_that_add_are_not_delivered(self) -> None:
        actor = ReplayActor(ReplayConfig(capacity_env_steps=5))
        ack = actor.add([episode("a", 4, terminated=True), episode("b", 3, terminated=True)])
        assert (ack.num_env_steps, ack.num_env_steps_received, ack.num_env_steps_stored) == (3, 7, 3)

    def test_an_add_of_nothing_reports_the_stored_steps(self) -> None:
        actor = ReplayActor(ReplayConfig(capacity_env_steps=10))
        actor.add([episode("a", 4)])
        assert actor.add(None) == AddAck(
            num_env_steps=0, num_env_steps_received=0, waited_s=0.0, num_env_steps_stored=4
        )

    def test_a_timed_out_add_reports_its_wait(self) -> None:
        config = ReplayConfig(samples_per_insert=1.0, samples_per_insert_tolerance=1.0, add_timeout_s=0.05)
        actor = ReplayActor(config)
        actor.add([episode("a", 2)])  # warms up; the second add would run ahead of the ratio
        ack = actor.add([episode("b", 2)])
        assert (ack.num_env_steps, ack.num_env_steps_stored) == (2, 4) and ack.waited_s >= 0.05
        assert actor.get_metrics().num_add_timeouts == 1


class TestReplayMetrics:
    def test_fields_are_the_buffer_metrics_the_counters_and_the_rates(self) -> None:
        rates = ["inserts_per_s", "samples_per_s", "samples_per_insert_lead", "restored_from"]
        assert field_names(ReplayMetrics) == field_names(BufferMetrics) + field_names(ReplayCounters) + rates

    def test_counters_start_at_zero(self) -> None:
        assert dataclasses.asdict(ReplayCounters()) == {
            "num_adds": 0,
            "num_env_steps_received": 0,
            "num_env_steps_added": 0,
            "num_env_steps_duplicate_skipped": 0,
            "num_samples": 0,
            "num_transitions_sampled": 0,
            "backpressure_s": 0.0,
            "num_add_timeouts": 0,
            "sample_wait_s": 0.0,
            "num_checkpoints": 0,
            "num_checkpoint_errors": 0,
            "last_checkpoint_error": None,
        }

    def test_a_fresh_actor_reports_zeros(self) -> None:
        m = ReplayActor(ReplayConfig(capacity_env_steps=10)).get_metrics()
        assert dataclasses.asdict(m) == {
            **dataclasses.asdict(EpisodeReplayBuffer(capacity_env_steps=10).get_metrics()),
            **dataclasses.asdict(ReplayCounters()),
            "inserts_per_s": 0.0,
            "samples_per_s": 0.0,
            "samples_per_insert_lead": 0.0,
            "restored_from": None,
        }

    def test_actor_metrics_after_known_adds_evictions_and_samples(self) -> None:
        actor = ReplayActor(ReplayConfig(capacity_env_steps=10, samples_per_insert=2.0, seed=0))
        for name in "abc":
            actor.add([episode(name, 4, terminated=True)])
        actor.sample_batches(2, 3)
        m = actor.get_metrics()
        assert BufferMetrics(**{k: getattr(m, k) for k in field_names(BufferMetrics)}) == BufferMetrics(
            num_env_steps=8,
            num_episodes=2,
            num_evicted_episodes=1,
            num_evicted_env_steps=4,
            nbytes=actor.buffer.storage.nbytes(),
            step_nbytes=STEP_NBYTES,
        )
        counts = (m.num_adds, m.num_env_steps_received, m.num_env_steps_added, m.num_samples, m.num_transitions_sampled)
        assert counts == (3, 12, 12, 3, 6)
        checkpoints = (m.num_add_timeouts, m.num_checkpoints, m.num_checkpoint_errors, m.last_checkpoint_error)
        assert checkpoints == (0, 0, 0, None)
        # 2 * (12 inserted - 1 free warm-up step) - 6 sampled.
        assert (m.samples_per_insert_lead, m.restored_from) == (16.0, None)

    def test_steps_evicted_by_their_own_add_are_received_but_not_added(self) -> None:
        actor = ReplayActor(ReplayConfig(capacity_env_steps=5))
        actor.add([episode("a", 8), episode("b", 2)])  # "a" is not the newest episode: it goes at once
        actor.add([episode("c", 1)])
        m = actor.get_metrics()
        assert (m.num_adds, m.num_env_steps_received, m.num_env_steps_added, m.num_env_steps) == (2, 11, 3, 3)

    def test_rates_are_the_counts_over_the_same_elapsed_time(self) -> None:
        actor = ReplayActor(ReplayConfig(capacity_env_steps=10, seed=0))
        actor.add([episode("a", 4)])
        actor.sample(3)
        m = actor.get_metrics()
        assert m.inserts_per_s > 0 and m.samples_per_s / m.inserts_per_s == pytest.approx(3 / 4)

    def test_checkpoints_are_counted_and_a_restored_actor_names_its_checkpoint(self, tmp_path: Path) -> None:
        path = str(tmp_path / "replay.parquet")
        actor = ReplayActor(ReplayConfig(capacity_env_steps=6, checkpoint_path=path))
        for name in "abc":
            actor.add([episode(name, 3, terminated=True)])
        actor.save()
        assert actor.get_metrics().num_checkpoints == 1
        m = ReplayActor(ReplayConfig(capacity_env_steps=6, checkpoint_path=path)).get_metrics()
        assert (m.restored_from, m.num_checkpoints, m.num_adds) == (path, 0, 0)
        assert (m.num_env_steps, m.num_episodes, m.num_evicted_episodes, m.num_evicted_env_steps) == (6, 2, 1, 3)
