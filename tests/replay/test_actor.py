"""ReplayActor: rate limiting (backpressure engages and releases), sample deadlines, checkpoints,
and runners shipping straight to it through Ray."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ray

from ray_sampler.errors import ConfigError, ReplayError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from replay.actor import MALLOC_ARENA_MAX, ReplayActor, ReplayConfig, create_replay_actor
from replay.buffer import EpisodeReplayBuffer
from replay.metrics import AddAck
from replay.prioritized import PrioritizedEpisodeReplayBuffer
from tests.helpers import stamp_creator
from tests.replay.test_storage import episode


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_size_to_sample": 0}, "'min_size_to_sample' must be an int >= 1"),
        ({"samples_per_insert": -1}, "'samples_per_insert' must be a finite number > 0 or None"),
        ({"samples_per_insert_tolerance": 0}, "'samples_per_insert_tolerance' must be a finite number >= 1"),
        ({"add_timeout_s": 0}, "'add_timeout_s' must be a finite number > 0"),
        ({"checkpoint_every_s": 5}, "'checkpoint_every_s' needs 'checkpoint_path'"),
        ({"capacity_env_steps": 0}, "'capacity_env_steps' must be an int >= 1"),
        ({"capacity_env_steps": 10, "min_size_to_sample": 100}, "must be >= 'min_size_to_sample' \\(100\\)"),
        ({"prioritized": 1}, "'prioritized' must be True or False"),
        ({"prioritized": True, "alpha": 1.5}, "'alpha' must be in \\[0, 1\\]"),
        ({"prioritized": True, "beta": -0.1}, "'beta' must be in \\[0, 1\\]"),
        ({"add_timeout_s": float("nan")}, "'add_timeout_s' must be a finite number > 0"),
        ({"sample_timeout_s": True}, "'sample_timeout_s' must be a finite number > 0"),
        ({"capacity_env_steps": True}, "'capacity_env_steps' must be an int >= 1"),
        ({"seed": "x"}, "'seed' must be an int >= 0 or None"),
        ({"checkpoint_drop_infos": "no"}, "'checkpoint_drop_infos' must be True or False"),
        ({"checkpoint_every_env_steps": 5}, "'checkpoint_every_env_steps' needs 'checkpoint_path'"),
        ({"checkpoint_path": "c", "checkpoint_every_env_steps": 0}, "'checkpoint_every_env_steps' must be an int >= 1"),
    ],
    ids=[
        "min_size",
        "spi",
        "tolerance",
        "add_timeout",
        "checkpoint",
        "capacity",
        "capacity_below_min_size",
        "prioritized",
        "alpha",
        "beta",
        "nan_timeout",
        "bool_timeout",
        "bool_capacity",
        "seed",
        "drop_infos",
        "every_steps_without_path",
        "every_zero_steps",
    ],
)
def test_bad_replay_config_raises(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ReplayConfig(**kwargs)


def test_backpressure_engages_and_a_sample_releases_it() -> None:
    actor = ReplayActor(
        ReplayConfig(min_size_to_sample=2, samples_per_insert=1.0, samples_per_insert_tolerance=4, add_timeout_s=20)
    )
    actor.add([episode("a", 2)])  # warm-up, free
    actor.add([episode("b", 4)])  # lead 4: at the tolerance
    acks: list[AddAck] = []
    adder = threading.Thread(target=lambda: acks.append(actor.add([episode("c", 3)])))
    adder.start()
    time.sleep(0.3)
    assert adder.is_alive() and not acks  # held back: inserts run ahead of sampling
    actor.sample(3)  # lead 1: room for 3 more
    adder.join(timeout=10)
    assert acks and acks[0].num_env_steps == 3 and acks[0].waited_s > 0
    metrics = actor.get_metrics()
    assert metrics.num_add_timeouts == 0 and metrics.backpressure_s > 0 and metrics.num_env_steps == 9


def test_backpressure_times_out_and_stores_anyway() -> None:
    actor = ReplayActor(ReplayConfig(samples_per_insert=1.0, samples_per_insert_tolerance=2, add_timeout_s=0.2))
    actor.add([episode("a", 1)])
    actor.add([episode("b", 2)])
    ack = actor.add([episode("c", 2)])
    assert ack.num_env_steps == 2 and ack.waited_s >= 0.2
    assert actor.get_metrics().num_add_timeouts == 1 and len(actor.buffer) == 5


def test_sample_waits_for_min_size_then_raises() -> None:
    actor = ReplayActor(ReplayConfig(min_size_to_sample=10, sample_timeout_s=0.2))
    actor.add([episode("a", 3)])
    with pytest.raises(ReplayError, match=r"sample waited .* 3 env steps stored \(min_size_to_sample 10\)"):
        actor.sample(2)
    results: list[dict] = []
    sampler = threading.Thread(target=lambda: results.append(actor.sample(2, timeout_s=20)))
    sampler.start()
    time.sleep(0.2)
    actor.add([episode("b", 8)])  # now 11 >= 10: the waiting sample goes
    sampler.join(timeout=10)
    assert results and len(results[0]["obs"]) == 2


def test_bad_chunks_are_refused_and_the_actor_keeps_going() -> None:
    actor = ReplayActor(ReplayConfig())
    actor.add([episode("a", 3)])
    with pytest.raises(ReplayError, match="starts at t=0 but the stored episode is at t=3"):
        actor.add([episode("a", 4)])
    assert actor.add([episode("b", 1)]).num_env_steps_stored == 4


@pytest.mark.parametrize("bad", [123, "", b"c.parquet", ["c.parquet"]], ids=["int", "empty", "bytes", "list"])
def test_a_checkpoint_path_that_is_not_a_path_is_refused(bad: object) -> None:
    """Before: ReplayConfig(checkpoint_path=123) was taken, and every checkpoint failed unseen."""
    with pytest.raises(ConfigError) as raised:
        ReplayConfig(checkpoint_path=bad)  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"'checkpoint_path' must be a file path (a non-empty str or os.PathLike) or None (got {bad!r})"
    )


def test_a_path_object_is_taken_as_its_string(tmp_path: Path) -> None:
    assert ReplayConfig(checkpoint_path=tmp_path / "c.parquet").checkpoint_path == str(tmp_path / "c.parquet")  # type: ignore[arg-type]


def test_an_actor_whose_checkpoint_directory_is_missing_refuses_to_start(tmp_path: Path) -> None:
    """Before: it started, and each checkpoint only added to num_checkpoint_errors."""
    path = str(tmp_path / "missing" / "c.parquet")
    with pytest.raises(ConfigError) as raised:
        ReplayActor(ReplayConfig(checkpoint_path=path, checkpoint_every_s=1.0))
    assert str(raised.value) == (
        f"'checkpoint_path' {path!r}: its directory {tmp_path / 'missing'} does not exist on the replay actor's node"
    )


def test_a_failing_periodic_checkpoint_is_logged_once_and_counted_every_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    actor = ReplayActor(ReplayConfig(checkpoint_path=str(directory / "c.parquet"), checkpoint_every_s=0.05))
    actor.add([episode("a", 4, terminated=True)])
    directory.rmdir()  # taken away after the start: every save fails from here on
    with caplog.at_level("ERROR", logger="replay.actor"):
        deadline = time.monotonic() + 30
        while actor.get_metrics().num_checkpoint_errors < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        actor.stop()
    assert actor.get_metrics().num_checkpoint_errors >= 3
    errors = [r.getMessage() for r in caplog.records if r.name == "replay.actor"]
    assert len(errors) == 1 and errors[0].startswith(
        f"replay checkpoint to {directory / 'c.parquet'} failed (later failures are only counted): cannot write"
    )


def test_periodic_checkpoints_and_restore_on_start(tmp_path: Path) -> None:
    path = str(tmp_path / "ckpt.parquet")
    config = ReplayConfig(checkpoint_path=path, checkpoint_every_s=0.1, seed=1)
    actor = ReplayActor(config)
    actor.add([episode("a", 4, terminated=True), episode("b", 2)])
    deadline = time.monotonic() + 10
    while actor.get_metrics().num_checkpoints == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    actor.stop()
    assert actor.get_metrics().num_checkpoints >= 1
    again = ReplayActor(ReplayConfig(checkpoint_path=path))
    assert again.restored_from == path and len(again.buffer) == 6 and list(again.buffer.storage.episodes) == ["a", "b"]


@pytest.mark.usefixtures("ray_session")
def test_runners_ship_straight_to_the_replay_actor_and_every_step_is_stored_once() -> None:
    replay = create_replay_actor(ReplayConfig(capacity_env_steps=10**6), num_cpus=0.5)
    config = EnvRunnerConfig(env=stamp_creator, num_envs_per_env_runner=2, rollout_fragment_length=4)
    try:
        with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)) as group:
            acks = []
            for _ in range(4):
                acks += group.sample_to_replay(replay)
            assert all(m.replay.num_env_steps == 8 for m in acks)
        state = ray.get(replay.get_state.remote(), timeout=60)
        buffer = EpisodeReplayBuffer(capacity_env_steps=10)
        buffer.set_state(state)
        assert len(buffer) == 4 * 2 * 8
        seen = set()
        for id_ in buffer.storage.episodes:
            stamps = buffer.storage.episodes_columnar([id_]).data.observations.tolist()
            w, v, e = stamps[0][:3]
            assert [s[3] for s in stamps] == list(range(stamps[0][3], stamps[0][3] + len(stamps)))
            assert all(s[:3] == [w, v, e] for s in stamps)
            assert (w, v, e) not in seen
            seen.add((w, v, e))
        batch = ray.get(replay.sample.remote(16, n_step=2), timeout=60)
        assert np.all(batch["next_obs"][:, 3] == batch["obs"][:, 3] + batch["n_step"])
    finally:
        ray.kill(replay)


@pytest.mark.usefixtures("ray_session")
def test_the_replay_actor_process_runs_with_few_malloc_arenas() -> None:
    """Its threads' arenas grew its RSS for the whole of a 30-minute DQN soak (see create_replay_actor)."""
    replay = create_replay_actor(ReplayConfig(capacity_env_steps=10), num_cpus=0)
    try:
        seen = ray.get(replay.__ray_call__.remote(lambda _: os.environ.get("MALLOC_ARENA_MAX")), timeout=60)
        assert seen == MALLOC_ARENA_MAX == "2"
    finally:
        ray.kill(replay)


@pytest.mark.usefixtures("ray_session")
def test_backpressure_reaches_the_runners_through_ray() -> None:
    replay = create_replay_actor(
        ReplayConfig(samples_per_insert=1.0, samples_per_insert_tolerance=8, add_timeout_s=0.3), num_cpus=0.5
    )
    config = EnvRunnerConfig(env=stamp_creator, num_envs_per_env_runner=2, rollout_fragment_length=4)
    try:
        with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)) as group:
            first = group.sample_to_replay(replay)[0].replay
            second = group.sample_to_replay(replay)[0].replay  # 8 steps ahead already: waits, times out
            assert first.waited_s < 0.3 <= second.waited_s
            metrics = ray.get(replay.get_metrics.remote(), timeout=60)
            assert metrics.num_add_timeouts == 1 and metrics.num_env_steps == 16
    finally:
        ray.kill(replay)


def test_a_batch_larger_than_the_tolerance_does_not_deadlock() -> None:
    actor = ReplayActor(
        ReplayConfig(samples_per_insert=1.0, samples_per_insert_tolerance=10, add_timeout_s=5, sample_timeout_s=5)
    )
    for name in "abc":
        actor.add([episode(name, 4)])
    batch = actor.sample(32)  # lead 8 >= 0: goes at once
    assert len(batch["obs"]) == 32
    assert actor.add([episode("d", 4)]).waited_s < 1  # lead -24: inserts go


def test_checkpoint_errors_are_counted_and_the_thread_keeps_going(tmp_path: Path) -> None:
    from ray_sampler.data.episode import SingleAgentEpisode

    actor = ReplayActor(ReplayConfig(checkpoint_path=str(tmp_path / "c.parquet"), checkpoint_every_s=0.05))
    actor.add(
        [SingleAgentEpisode("a", observations=[0, 1], actions=[0], rewards=[1.0], infos=[{}, {"x": np.int64(1)}])]
    )
    deadline = time.monotonic() + 10
    while actor.get_metrics().num_checkpoint_errors < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    metrics = actor.get_metrics()
    assert metrics.num_checkpoint_errors >= 2 and "numpy.int64" in (metrics.last_checkpoint_error or "")
    actor.stop()
    dropping = ReplayActor(ReplayConfig(checkpoint_path=str(tmp_path / "d.parquet"), checkpoint_drop_infos=True))
    dropping.add(
        [SingleAgentEpisode("a", observations=[0, 1], actions=[0], rewards=[1.0], infos=[{}, {"x": np.int64(1)}])]
    )
    assert Path(dropping.save()).exists()


def test_ack_counts_only_steps_still_stored() -> None:
    actor = ReplayActor(ReplayConfig(capacity_env_steps=5))
    ack = actor.add([episode("a", 8), episode("b", 2)])  # "a" goes: it is not the newest episode
    assert (ack.num_env_steps, ack.num_env_steps_received, ack.num_env_steps_stored) == (2, 10, 2)
    assert actor.add(None) == AddAck(num_env_steps=0, num_env_steps_received=0, waited_s=0.0, num_env_steps_stored=2)
    assert actor.limiter.num_inserted == 1  # the first step only filled the buffer up to min_size_to_sample


def test_the_actor_takes_one_episode_and_refuses_other_types() -> None:
    actor = ReplayActor(ReplayConfig())
    ack = actor.add(episode("a", 3))
    assert (ack.num_env_steps, ack.num_env_steps_received) == (3, 3)
    with pytest.raises(ReplayError, match=r"^add takes a SingleAgentEpisode, .* \(got str\)$"):
        actor.add("a")  # type: ignore[arg-type]


def test_the_actor_passes_the_include_flags_and_n_step_ranges_on() -> None:
    actor = ReplayActor(ReplayConfig(seed=0))
    actor.add(episode("a", 6))
    batch = actor.sample(50, n_step=(1, 2), include_extra_model_outputs=True)
    np.testing.assert_array_equal(batch["logp"], -batch["obs"][:, 0])
    assert set(batch["n_step"].tolist()) == {1, 2}
    assert "logp" not in actor.sample(2)


def test_actor_sample_episodes_and_set_state() -> None:
    actor = ReplayActor(ReplayConfig(seed=0))
    actor.add([episode("a", 6)])
    chunks = actor.sample_episodes(3, 2, lookback=1)
    assert len(chunks) == 3 and all(1 <= len(c) <= 2 for c in chunks)
    other = ReplayActor(ReplayConfig())
    other.set_state(actor.get_state())
    assert len(other.buffer) == 6


def test_restore_applies_the_configured_capacity(tmp_path: Path) -> None:
    path = str(tmp_path / "c.parquet")
    first = ReplayActor(ReplayConfig(checkpoint_path=path))
    first.add([episode("a", 4, terminated=True), episode("b", 4, terminated=True)])
    first.save()
    smaller = ReplayActor(ReplayConfig(checkpoint_path=path, capacity_env_steps=5))
    assert list(smaller.buffer.storage.episodes) == ["b"] and smaller.buffer.storage.capacity_env_steps == 5


def test_sample_batches_draws_several_batches_and_counts_them() -> None:
    actor = ReplayActor(ReplayConfig(seed=0))
    actor.add([episode("a", 6, terminated=True)])
    batches = actor.sample_batches(4, 3, n_step=2)
    assert [len(b["obs"]) for b in batches] == [4, 4, 4]
    assert all((b["n_step"] <= 2).all() and "keys" in b for b in batches)
    metrics = actor.get_metrics()
    assert (metrics.num_samples, metrics.num_transitions_sampled) == (3, 12)
    with pytest.raises(ReplayError, match="'num_batches' must be an int >= 1"):
        actor.sample_batches(4, 0)
    with pytest.raises(ReplayError, match="'batch_size_B' must be an int >= 1"):
        actor.sample_batches(0, 2)


def test_sample_batches_waits_for_the_ratio_of_all_its_batches() -> None:
    actor = ReplayActor(ReplayConfig(samples_per_insert=1.0, samples_per_insert_tolerance=10, sample_timeout_s=0.2))
    actor.add([episode("a", 10)])
    assert len(actor.sample_batches(5, 2)) == 2  # 10 of the 10 + 10 allowed
    with pytest.raises(ReplayError, match="samples-per-insert lead"):
        actor.sample_batches(5, 3)  # 25 would run 15 ahead: more than the tolerance


def test_prioritized_actor_takes_priorities_and_samples_by_them() -> None:
    actor = ReplayActor(ReplayConfig(prioritized=True, alpha=1.0, beta=1.0, seed=0))
    actor.add([episode("a", 2, terminated=True)])
    batch = actor.sample(100)  # both steps, with equal priorities so far
    assert set(batch["t"].tolist()) == {0, 1} and np.allclose(batch["weights"], 1.0)
    key_of = {int(t): int(k) for t, k in zip(batch["t"], batch["keys"], strict=True)}
    actor.update_priorities([key_of[0], key_of[1]], [9.0, 1.0])
    drawn = actor.sample(4000)
    assert 0.87 < float((drawn["t"] == 0).mean()) < 0.93  # 9 / (9 + 1)
    assert drawn["weights"][drawn["t"] == 1].max() == pytest.approx(1.0)  # the rarer step weighs most


def test_uniform_actor_refuses_priorities() -> None:
    actor = ReplayActor(ReplayConfig())
    actor.add([episode("a", 3)])
    with pytest.raises(ReplayError, match="update_priorities needs a prioritized replay"):
        actor.update_priorities(actor.sample(1)["keys"], [1.0])


def test_prioritized_actor_restores_from_a_checkpoint(tmp_path: Path) -> None:
    path = str(tmp_path / "p.parquet")
    first = ReplayActor(ReplayConfig(checkpoint_path=path, prioritized=True, seed=0))
    first.add([episode("a", 4, terminated=True), episode("b", 3)])
    first.update_priorities(first.sample(2)["keys"], [5.0, 5.0])
    first.save()
    again = ReplayActor(ReplayConfig(checkpoint_path=path, prioritized=True, alpha=0.5, seed=0))
    assert again.restored_from == path and len(again.buffer) == 7 and again.buffer.alpha == 0.5
    assert isinstance(again.buffer, PrioritizedEpisodeReplayBuffer)
    stored = again.buffer.get_priorities(again.buffer.storage.keys())
    assert stored.tolist() == [1.0] * 7  # every restored step starts equal
    assert len(again.sample(3)["weights"]) == 3


def test_sampling_goes_on_when_evictions_leave_fewer_than_min_size_stored() -> None:
    # Whole-episode eviction: 4 x 30 steps into 100 leaves 90, below min_size_to_sample = capacity.
    actor = ReplayActor(ReplayConfig(capacity_env_steps=100, min_size_to_sample=100, sample_timeout_s=0.2))
    for k in range(3):
        actor.add([episode(f"e{k}", 30)])
    with pytest.raises(ReplayError, match="90 env steps stored"):
        actor.sample(4)  # still warming up: 90 of 100
    actor.add([episode("e3", 30)])
    assert len(actor.buffer) == 90  # 120 inserted, e0 evicted
    assert len(actor.sample(4)["obs"]) == 4  # the warm-up is over for good


def test_a_restored_actor_samples_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "w.parquet")
    first = ReplayActor(ReplayConfig(checkpoint_path=path))
    first.add([episode("a", 20)])
    first.save()
    again = ReplayActor(ReplayConfig(checkpoint_path=path, min_size_to_sample=10, sample_timeout_s=0.2))
    assert len(again.sample(3)["obs"]) == 3


def test_a_restored_replay_that_was_sampling_samples_again_at_once(tmp_path: Path) -> None:
    # Capacity == min_size_to_sample: whole-episode eviction keeps 90 of 100 stored for good.
    path = str(tmp_path / "r.parquet")
    config = ReplayConfig(capacity_env_steps=100, min_size_to_sample=100, sample_timeout_s=0.2, checkpoint_path=path)
    first = ReplayActor(config)
    for k in range(4):
        first.add([episode(f"e{k}", 30)])
    assert len(first.sample(2)["obs"]) == 2
    first.save()
    for again in (ReplayActor(config), ReplayActor(ReplayConfig(**{**vars(config), "checkpoint_path": None}))):
        if again.restored_from is None:
            again.set_state(first.get_state())
        assert len(again.buffer) == 90 and len(again.sample(2)["obs"]) == 2


def test_checkpoints_every_n_received_env_steps_record_the_acknowledged_count(tmp_path: Path) -> None:
    path = str(tmp_path / "c.parquet")
    actor = ReplayActor(ReplayConfig(checkpoint_path=path, checkpoint_every_env_steps=5))
    actor.add([episode("a", 3, terminated=True)])
    time.sleep(0.2)
    assert actor.get_metrics().num_checkpoints == 0  # 3 < 5 steps: the thread sleeps (no time interval)
    actor.add([episode("b", 3, terminated=True)])
    deadline = time.monotonic() + 10
    while actor.get_metrics().num_checkpoints == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    actor.stop()
    assert actor.get_metrics().num_checkpoints == 1
    again = ReplayActor(ReplayConfig(checkpoint_path=path))
    assert len(again.buffer) == 6 and again.restored_num_env_steps_received == 6
    assert again.get_metrics().num_env_steps_received == 6  # the count goes on from the checkpoint's


def test_stale_temp_files_are_removed_when_the_actor_starts(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    first = ReplayActor(ReplayConfig(checkpoint_path=str(path)))
    first.add([episode("a", 3, terminated=True)])
    first.save()
    (tmp_path / ".c.parquet.5f3a.tmp").write_bytes(path.read_bytes()[:100])  # a save killed mid-write
    again = ReplayActor(ReplayConfig(checkpoint_path=str(path)))
    assert again.num_stale_temp_files_removed == 1 and [p.name for p in tmp_path.iterdir()] == ["c.parquet"]
    assert again.restored_from == str(path) and len(again.buffer) == 3
    assert ReplayActor(ReplayConfig(checkpoint_path=str(tmp_path / "d.parquet"))).restored_from is None  # no file yet


class TestRestoredActor:
    """An actor restored from its last checkpoint: continuation chunks go on, the lost steps are counted."""

    def test_continuation_chunks_of_the_restored_episodes_are_accepted(self, tmp_path: Path) -> None:
        path = str(tmp_path / "c.parquet")
        first = ReplayActor(ReplayConfig(checkpoint_path=path))
        first.add([episode("a", 3), episode("b", 2)])
        first.save()
        again = ReplayActor(ReplayConfig(checkpoint_path=path))
        assert again.add([episode("a", 2, start=3, lookback=1), episode("b", 1, start=2)]).num_env_steps == 3
        assert list(again.buffer.storage.episodes) == ["a", "b"] and len(again.buffer) == 8
        assert again.num_env_steps_lost(8) == 0

    def test_steps_acknowledged_after_the_checkpoint_are_reported_lost_and_the_gap_is_accepted(
        self, tmp_path: Path
    ) -> None:
        path = str(tmp_path / "c.parquet")
        first = ReplayActor(ReplayConfig(checkpoint_path=path))
        acknowledged = first.add([episode("a", 3)]).num_env_steps_received
        first.save()
        acknowledged += first.add([episode("a", 2, start=3, lookback=1)]).num_env_steps_received  # dies with it
        again = ReplayActor(ReplayConfig(checkpoint_path=path))
        assert again.num_env_steps_lost(acknowledged) == 2
        ack = again.add([episode("a", 2, start=5, lookback=1)])  # the runner's next chunk, after the lost one
        acknowledged += ack.num_env_steps_received
        assert ack.num_env_steps == 2 and again.num_env_steps_lost(acknowledged) == 2
        assert list(again.buffer.storage.episodes) == ["a#3", "a"]
        with pytest.raises(ReplayError, match="'num_env_steps_acknowledged' must be an int >= 0"):
            again.num_env_steps_lost(-1)

    def test_a_chunk_resent_after_a_lost_ack_is_acked_as_no_new_steps(self, tmp_path: Path) -> None:
        path = str(tmp_path / "c.parquet")
        first = ReplayActor(ReplayConfig(checkpoint_path=path))
        first.add([episode("a", 3)])
        first.save()  # the actor dies before the ack reaches the runner, which sends the chunk again
        again = ReplayActor(ReplayConfig(checkpoint_path=path))
        ack = again.add([episode("a", 3)])
        assert (ack.num_env_steps, ack.num_env_steps_received, ack.num_env_steps_stored) == (0, 0, 3)
        metrics = again.get_metrics()
        assert (metrics.num_env_steps_duplicate_skipped, metrics.num_env_steps_received) == (3, 3)


@pytest.mark.usefixtures("ray_session")
def test_create_replay_actor_refuses_a_missing_checkpoint_directory_before_the_actor_starts(tmp_path: Path) -> None:
    """Before: the actor started and died, and the caller got an ActorDiedError wrapping this."""
    path = str(tmp_path / "missing" / "c.parquet")
    before = len(ray.util.list_named_actors())
    with pytest.raises(ConfigError) as raised:
        create_replay_actor(ReplayConfig(checkpoint_path=path), num_cpus=0, name="replay-missing-dir")
    assert str(raised.value) == (
        f"'checkpoint_path' {path!r}: its directory {tmp_path / 'missing'} does not exist on the replay actor's node"
    )
    assert len(ray.util.list_named_actors()) == before
