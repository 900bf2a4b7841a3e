"""EpisodeStorage: capacity and eviction order, chunk joining, atomic rejection, lookback, compaction."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay.storage import EpisodeStorage


def episode(
    id_: str, steps: int, *, start: int = 0, terminated: bool = False, lookback: int = 0, logp: bool = True
) -> SingleAgentEpisode:
    """Obs t (float32[1]), reward t+1, for t in [start - lookback, start + steps]; lookback steps first."""
    ts = range(start - lookback, start + steps + 1)
    return SingleAgentEpisode(
        id_,
        observations=[np.array([t], np.float32) for t in ts],
        actions=[t % 2 for t in ts][:-1],
        rewards=[float(t + 1) for t in ts][:-1],
        extra_model_outputs={"logp": [np.float32(-t) for t in ts][:-1]} if logp else None,
        terminated=terminated,
        t_started=start,
        len_lookback_buffer=lookback,
    )


def stored_obs(storage: EpisodeStorage, id_: str) -> list[float]:
    """The stored observations of an episode, walking its segments (boundary obs once)."""
    out: list[float] = []
    view = storage.segment_view()
    for seg in storage.segments_of(id_):
        rows = np.arange(view.obs_start[seg], view.obs_start[seg] + view.num_steps[seg] + 1)
        values = storage.gather_observations(rows)[:, 0].tolist()
        out += values if not out else values[1:]
    return out


def segment_ids(storage: EpisodeStorage) -> list[str]:
    """The episode of every segment, dead ones included, in segment order."""
    return [storage.segment_episode(seg) for seg in range(len(storage.segment_view().num_steps))]


def test_capacity_counts_steps_and_evicts_oldest_whole_episodes() -> None:
    storage = EpisodeStorage(capacity_env_steps=10)
    for name in "abc":
        storage.add(episodes_to_columnar([episode(name, 4, terminated=True)]))
    assert list(storage.episodes) == ["b", "c"] and storage.num_steps == 8
    assert storage.num_evicted_episodes == 1 and storage.num_evicted_steps == 4


def test_lookback_is_not_counted() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 2, start=5, lookback=3)]))
    assert storage.num_steps == 2 and storage.segment_view().lookback_len.tolist() == [3]
    assert storage.episodes_columnar(["a"]).lookback.observations[:, 0].tolist() == [2.0, 3.0, 4.0]


def test_continuation_chunks_join_the_stored_episode_and_drop_their_lookback() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    first = episode("a", 3)
    storage.add(episodes_to_columnar([first]))
    storage.add(episodes_to_columnar([episode("a", 3, start=3, lookback=2)]))
    ep = storage.episodes["a"]
    assert (ep.t_started, ep.t, ep.num_steps) == (0, 6, 6) and len(storage.episodes) == 1
    assert stored_obs(storage, "a") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert storage.segment_view().lookback_len.tolist() == [0, 0]
    assert storage.episodes_columnar(["a"]).lookback_lens.tolist() == [0]


def test_chunks_of_one_episode_in_one_add_join_in_order() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 2), episode("a", 3, start=2, lookback=1, terminated=True)]))
    assert storage.episodes["a"].terminated and stored_obs(storage, "a") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize(
    ("chunk", "match"),
    [
        (lambda: episode("a", 2, start=4, lookback=1), r"starts at t=4 but the stored episode is at t=3"),
        (lambda: episode("a", 4), r"starts at t=0 but the stored episode is at t=3"),
        (
            lambda: SingleAgentEpisode(
                "a",
                observations=[np.array([9.0], np.float32), np.array([4.0], np.float32)],
                actions=[1],
                rewards=[4.0],
                extra_model_outputs={"logp": [np.float32(0)]},
                t_started=3,
            ),
            "does not start with the stored episode's last observation",
        ),
        (lambda: episode("b", 2, logp=False), r"extra_model_outputs keys \['logp'\]"),
        (
            lambda: SingleAgentEpisode(
                "c",
                observations=[np.array([0.0]), np.array([1.0])],
                actions=[0],
                rewards=[1.0],
                extra_model_outputs={"logp": [np.float32(0)]},
            ),
            "'observations' rows must keep the stored structure, shapes and \\(safely castable\\) dtypes",
        ),
    ],
    ids=["gap", "duplicate", "boundary_obs", "extra_keys", "dtype"],
)
def test_bad_chunks_are_rejected_and_nothing_changes(chunk: object, match: str) -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 3)]))
    before = (
        storage.num_steps,
        dict(storage.episodes),
        storage.num_obs_rows,
        storage.num_step_rows,
        segment_ids(storage),
    )
    bad = chunk()  # type: ignore[operator]
    good = episode("z", 2, logp=bool(bad.extra_model_outputs))  # rides along: must not be stored either
    with pytest.raises(ReplayError, match=match):
        storage.add(episodes_to_columnar([good, bad]))
    after = (
        storage.num_steps,
        dict(storage.episodes),
        storage.num_obs_rows,
        storage.num_step_rows,
        segment_ids(storage),
    )
    assert after == before and "z" not in storage.episodes


def test_continuing_a_done_episode_is_rejected() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 3, terminated=True)]))
    with pytest.raises(ReplayError, match="already done"):
        storage.add(episodes_to_columnar([episode("a", 1, start=3, lookback=1)]))


def test_chunk_whose_predecessor_was_evicted_is_stored_with_its_lookback() -> None:
    storage = EpisodeStorage(capacity_env_steps=6)
    storage.add(episodes_to_columnar([episode("a", 3)]))
    storage.add(episodes_to_columnar([episode("b", 5, terminated=True)]))  # evicts "a"
    assert "a" not in storage.episodes
    storage.add(episodes_to_columnar([episode("a", 1, start=3, lookback=2)]))
    ep = storage.episodes["a"]
    assert (ep.t_started, ep.num_steps) == (3, 1)
    assert storage.segment_view().lookback_len[ep.first_segment] == 2
    assert storage.episodes_columnar(["a"]).lookback.observations[:, 0].tolist() == [1.0, 2.0]


def test_capacity_in_bytes() -> None:
    storage = EpisodeStorage(capacity_env_steps=10**6, capacity_bytes=10 * (4 + 8 + 8 + 4))
    for name in "abcd":
        storage.add(episodes_to_columnar([episode(name, 4, terminated=True)]))
    assert storage.step_nbytes() == 24 and storage.num_steps == 8 and list(storage.episodes) == ["c", "d"]


def test_compaction_keeps_every_live_episode_intact() -> None:
    storage = EpisodeStorage(capacity_env_steps=30)
    for k in range(400):
        storage.add(episodes_to_columnar([episode(f"e{k}", 10 + k % 5, terminated=True)]))
    assert storage.num_obs_rows < 4 * 30 + 4096 and storage.num_compactions > 0  # dead rows were reclaimed
    for id_, ep in storage.episodes.items():
        assert stored_obs(storage, id_) == [float(t) for t in range(ep.num_steps + 1)]
    assert storage.num_steps <= 30


# ------------------------------------------------------------------ regressions from the review of issue #4
def test_rejection_at_a_later_column_changes_nothing() -> None:
    import dataclasses

    storage = EpisodeStorage(capacity_env_steps=100)
    first = episodes_to_columnar([episode("a", 3)])
    storage.add(
        dataclasses.replace(first, data=dataclasses.replace(first.data, rewards=first.data.rewards.astype(np.float32)))
    )  # float32 rewards stored
    rows = (storage.num_obs_rows, storage.num_step_rows, segment_ids(storage))
    bad = episodes_to_columnar([episode("b", 2, start=0)])  # float64 rewards cannot go into float32
    with pytest.raises(ReplayError, match="'rewards' rows must keep"):
        storage.add(bad)
    assert (storage.num_obs_rows, storage.num_step_rows, segment_ids(storage)) == rows
    third = episodes_to_columnar([episode("c", 3)])
    storage.add(
        dataclasses.replace(third, data=dataclasses.replace(third.data, rewards=np.array([1, 2, 3], np.float32)))
    )
    stored = storage.episodes_columnar(["a", "c"])
    assert stored.data.rewards.tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]


def test_safe_upcasts_are_stored_and_strings_widen() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 2)]))
    import dataclasses

    second = episodes_to_columnar([episode("b", 2)])
    upcast = dataclasses.replace(
        second,
        data=dataclasses.replace(second.data, extra_model_outputs={"logp": np.array([-1.0, -2.0], np.float16)}),
    )
    storage.add(upcast)
    assert storage.episodes_columnar(["b"]).data.extra_model_outputs["logp"].tolist() == [-1.0, -2.0]
    words = EpisodeStorage(capacity_env_steps=100)
    words.add(episodes_to_columnar([SingleAgentEpisode("x", observations=["ab", "cd"], actions=[0], rewards=[1.0])]))
    words.add(episodes_to_columnar([SingleAgentEpisode("y", observations=["abc", "wxyz"], actions=[0], rewards=[1.0])]))
    assert words.episodes_columnar(["x", "y"]).data.observations.tolist() == ["ab", "cd", "abc", "wxyz"]


def test_an_episode_larger_than_capacity_stays_until_the_next_one_then_normal_adds() -> None:
    storage = EpisodeStorage(capacity_env_steps=1000)
    assert storage.add(episodes_to_columnar([episode("huge", 5000)])) == 5000  # the newest episode stays, whole
    assert storage.num_steps == 5000 and stored_obs(storage, "huge") == [float(t) for t in range(5001)]
    storage.add(episodes_to_columnar([episode("b", 3), episode("c", 2)]))
    assert list(storage.episodes) == ["b", "c"] and storage.num_evicted_steps == 5000
    assert stored_obs(storage, "b") == [0.0, 1.0, 2.0, 3.0] and stored_obs(storage, "c") == [0.0, 1.0, 2.0]
    storage.compact()  # compacting again is harmless
    assert stored_obs(storage, "c") == [0.0, 1.0, 2.0]
    empty = EpisodeStorage(capacity_env_steps=10)
    empty.compact()
    empty.add(episodes_to_columnar([episode("d", 2)]))
    assert stored_obs(empty, "d") == [0.0, 1.0, 2.0]


def test_nan_observations_continue_their_episode() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    nan = np.array([np.nan], np.float32)
    first = SingleAgentEpisode(
        "a",
        observations=[np.array([0.0], np.float32), nan],
        actions=[0],
        rewards=[1.0],
        extra_model_outputs={"logp": [np.float32(0)]},
    )
    storage.add(episodes_to_columnar([first]))
    storage.add(episodes_to_columnar([first.cut()]))  # zero steps: nothing to add
    cont = first.cut()
    cont.add_env_step(np.array([2.0], np.float32), 1, 2.0, extra_model_outputs={"logp": np.float32(0)})
    storage.add(episodes_to_columnar([cont]))
    assert storage.episodes["a"].num_steps == 2


def test_capacity_bytes_also_triggers_compaction() -> None:
    storage = EpisodeStorage(capacity_env_steps=10**6, capacity_bytes=20 * 24)
    for k in range(200):
        storage.add(episodes_to_columnar([episode(f"e{k}", 10, terminated=True)]))
    assert storage.num_steps * storage.step_nbytes() <= 20 * 24
    assert storage.num_obs_rows <= 4 * 11  # dead rows do not pile up past a quarter of the byte capacity


def test_step_rows_finds_every_stored_step_by_key_and_nothing_else() -> None:
    storage = EpisodeStorage(capacity_env_steps=40)
    orders = {}
    for k in range(30):  # continuation chunks of 3 steps with lookback, interleaved; old episodes evicted
        for ep in (f"a{k}", f"b{k}"):
            storage.add(episodes_to_columnar([episode(ep, 3)]))
            storage.add(episodes_to_columnar([episode(ep, 3, start=3, lookback=1)]))
            storage.add(episodes_to_columnar([episode(ep, 2, start=6, lookback=1, terminated=True)]))
            orders[ep] = storage.episodes[ep].order if ep in storage.episodes else orders.get(ep)
    assert storage.num_evicted_episodes > 0
    keys, expected_t = [], []
    for ep, order in orders.items():
        for t in range(-1, 10):
            keys.append((order << 32) | t)
            expected_t.append(t if ep in storage.episodes and 0 <= t < 8 else None)
    rows = storage.step_rows(np.array(keys, np.int64))
    for row, t in zip(rows.tolist(), expected_t, strict=True):
        if t is None:
            assert row == -1
        else:  # the helper's episodes have reward t + 1 at step t
            assert storage.rewards_at(np.array([row]))[0] == t + 1
    assert (rows >= 0).sum() == storage.num_steps
    assert storage.rewards_at(np.array([storage.step_row(orders["b29"], 7)]))[0] == 8
    keys = storage.keys()
    assert len(keys) == storage.num_steps and (storage.step_rows(keys) >= 0).all()


def test_a_failure_inside_an_add_rolls_everything_back(monkeypatch: pytest.MonkeyPatch) -> None:

    import replay.storage as storage_module

    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 3), episode("z", 2)]))
    before = (
        dict(storage.episodes),
        segment_ids(storage),
        storage.num_steps,
        storage.num_obs_rows,
        storage.first_order(),
    )
    real, calls = storage_module.StoredEpisode, {"n": 0}

    def fail_on_second_new_episode(*args: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return real(*args)

    monkeypatch.setattr(storage_module, "StoredEpisode", fail_on_second_new_episode)
    chunk = episodes_to_columnar([episode("a", 2, start=3, lookback=1), episode("b", 2), episode("c", 2)])
    with pytest.raises(RuntimeError, match="boom"):
        storage.add(chunk)  # "a" continued and "b" created before "c" fails
    monkeypatch.undo()
    after = (
        dict(storage.episodes),
        segment_ids(storage),
        storage.num_steps,
        storage.num_obs_rows,
        storage.first_order(),
    )
    assert after == before
    storage.add(chunk)
    assert segment_ids(storage) == ["a", "z", "a", "b", "c"]
    assert [storage.episodes[k].order for k in "azbc"] == [0, 1, 2, 3]  # "b" and "c" numbered as if never tried
    assert stored_obs(storage, "a") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and stored_obs(storage, "c") == [0.0, 1.0, 2.0]


class RecordingListener:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def rows_added(self, start: int, stop: int) -> None:
        self.calls.append(("added", start, stop))

    def rows_evicted(self, start: int, stop: int) -> None:
        self.calls.append(("evicted", start, stop))

    def rows_moved(self, kept: np.ndarray) -> None:
        self.calls.append(("moved", kept.tolist()))


def test_the_listener_hears_rows_added_evicted_and_moved_and_nothing_of_a_rejected_add() -> None:
    listener = RecordingListener()
    storage = EpisodeStorage(capacity_env_steps=4, listener=listener)
    storage.add(episodes_to_columnar([episode("a", 3, terminated=True)]))
    storage.add(episodes_to_columnar([episode("b", 2, terminated=True)]))  # evicts "a"
    with pytest.raises(ReplayError):
        storage.add(episodes_to_columnar([episode("b", 1, start=2)]))  # "b" is done
    storage.compact()
    assert listener.calls == [("added", 0, 3), ("added", 3, 5), ("evicted", 0, 3), ("moved", [3, 4])]


def test_the_segment_view_is_read_only_and_set_capacity_evicts() -> None:
    storage = EpisodeStorage(capacity_env_steps=10)
    storage.add(episodes_to_columnar([episode("a", 3), episode("b", 4)]))
    view = storage.segment_view()
    assert storage.segment_view() is view and view.num_steps.tolist() == [3, 4]
    with pytest.raises(ValueError, match="read-only"):
        view.alive[0] = False
    storage.set_capacity(5)
    assert list(storage.episodes) == ["b"] and storage.capacity_env_steps == 5 and storage.segment_view() is not view
    with pytest.raises(ReplayError, match="'capacity_env_steps' must be an int >= 1 \\(got True\\)"):
        storage.set_capacity(True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"capacity_env_steps": 0}, "'capacity_env_steps' must be an int >= 1"),
        ({"capacity_env_steps": 1.5}, "'capacity_env_steps' must be an int >= 1"),
        ({"capacity_env_steps": 10, "capacity_bytes": False}, "'capacity_bytes' must be an int >= 1 or None"),
    ],
    ids=["zero", "float", "bool_bytes"],
)
def test_bad_capacities_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ReplayError, match=match):
        EpisodeStorage(**kwargs)


def test_episode_rows_join_segments_and_keep_the_first_lookback() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 2, start=4, lookback=2)]))
    storage.add(episodes_to_columnar([episode("a", 2, start=6, lookback=1)]))
    rows = storage.episode_rows("a")
    assert storage.gather_observations(rows.observations)[:, 0].tolist() == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert storage.rewards_at(rows.steps).tolist() == [5.0, 6.0, 7.0, 8.0]
    assert storage.episodes_columnar(["a"]).lookback.observations[:, 0].tolist() == [2.0, 3.0]
    chunk = storage.episode_chunk("a", start=1, stop=3, lookback=3)
    assert chunk.t_started == 5 and len(chunk) == 2 and chunk.len_lookback_buffer == 3
    assert np.asarray(chunk.get_observations(slice(-6, None)))[:, 0].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


class TestRestoredEpisodes:
    """After ``mark_restored`` an episode that was not done goes on after a gap (the chunks acknowledged
    after the checkpoint died with the actor) as a new piece; everything else is checked as before."""

    @staticmethod
    def restored() -> EpisodeStorage:
        storage = EpisodeStorage(capacity_env_steps=100)
        storage.add(episodes_to_columnar([episode("a", 3), episode("d", 2, terminated=True)]))
        storage.mark_restored()
        return storage

    def test_a_chunk_that_continues_without_a_gap_joins_its_episode(self) -> None:
        storage = self.restored()
        assert storage.add(episodes_to_columnar([episode("a", 2, start=3, lookback=1)])) == 2
        assert list(storage.episodes) == ["a", "d"] and stored_obs(storage, "a") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]

    def test_a_chunk_after_a_gap_starts_a_new_piece_and_the_restored_part_is_renamed(self) -> None:
        storage = self.restored()
        assert storage.add(episodes_to_columnar([episode("a", 2, start=5, lookback=1)])) == 2
        assert list(storage.episodes) == ["a#3", "d", "a"]  # the restored part keeps its place in eviction order
        assert stored_obs(storage, "a#3") == [0.0, 1.0, 2.0, 3.0] and stored_obs(storage, "a") == [5.0, 6.0, 7.0]
        assert (storage.episodes["a"].t_started, storage.episodes["a"].t, storage.num_steps) == (5, 7, 7)
        assert storage.add(episodes_to_columnar([episode("a", 1, start=7)])) == 1  # and goes on from there
        with pytest.raises(ReplayError, match="starts at t=10 but the stored episode is at t=8"):
            storage.add(episodes_to_columnar([episode("a", 1, start=10)]))  # one gap only: the one after the restore

    def test_duplicates_and_gaps_outside_a_restore_are_still_refused(self) -> None:
        storage = self.restored()
        with pytest.raises(ReplayError, match="starts at t=1 but the stored episode is at t=3"):
            storage.add(episodes_to_columnar([episode("a", 3, start=1)]))
        with pytest.raises(ReplayError, match="already done"):
            storage.add(episodes_to_columnar([episode("d", 2, start=4)]))
        fresh = EpisodeStorage(capacity_env_steps=100)
        fresh.add(episodes_to_columnar([episode("a", 3)]))
        with pytest.raises(ReplayError, match="starts at t=5 but the stored episode is at t=3"):
            fresh.add(episodes_to_columnar([episode("a", 2, start=5)]))


class TestResentChunks:
    """A chunk the storage holds already (stored, then its ack was lost) is skipped; any other overlap is refused."""

    @staticmethod
    def stored() -> EpisodeStorage:
        storage = EpisodeStorage(capacity_env_steps=100)
        storage.add(episodes_to_columnar([episode("a", 3), episode("a", 2, start=3, lookback=1, terminated=True)]))
        storage.add(episodes_to_columnar([episode("b", 4)]))
        return storage

    def test_a_resent_chunk_is_skipped_and_counted(self) -> None:
        storage = self.stored()
        resent = [episode("a", 2, start=3, lookback=1, terminated=True), episode("b", 2, start=2)]
        assert storage.add(episodes_to_columnar([*resent, episode("b", 1, start=4)])) == 1
        assert storage.num_duplicate_steps_skipped == 4
        assert stored_obs(storage, "a") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert stored_obs(storage, "b") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert storage.num_steps == 10

    def test_a_chunk_overlapping_the_stored_end_is_refused(self) -> None:
        storage = self.stored()
        with pytest.raises(ReplayError, match="starts at t=2 but the stored episode is at t=4"):
            storage.add(episodes_to_columnar([episode("b", 3, start=2)]))
        assert storage.num_duplicate_steps_skipped == 0

    def test_a_chunk_within_the_stored_range_with_other_observations_is_refused(self) -> None:
        storage = self.stored()
        other = SingleAgentEpisode(
            "b",
            observations=[np.array([1.0], np.float32), np.array([7.0], np.float32)],
            actions=[1],
            rewards=[2.0],
            extra_model_outputs={"logp": [np.float32(-1)]},
            t_started=1,
        )
        with pytest.raises(ReplayError, match="starts at t=1 but the stored episode is at t=4"):
            storage.add(episodes_to_columnar([other]))
        assert storage.num_duplicate_steps_skipped == 0


def test_row_and_segment_counts_stay_bounded_over_many_adds_with_eviction() -> None:
    storage = EpisodeStorage(capacity_env_steps=200)

    def sizes() -> tuple[int, int, int, int]:
        return storage.num_obs_rows, storage.num_step_rows, len(storage.segment_view().num_steps), storage.nbytes()

    peaks: list[tuple[int, ...]] = []
    for half in range(2):
        peak = (0, 0, 0, 0)
        for k in range(800 * half, 800 * (half + 1)):  # 10-step episodes sent as two 5-step chunks
            storage.add(episodes_to_columnar([episode(f"e{k}", 5)]))
            storage.add(episodes_to_columnar([episode(f"e{k}", 5, start=5, terminated=True)]))
            peak = tuple(max(p, s) for p, s in zip(peak, sizes()))
        peaks.append(peak)
    assert storage.num_evicted_episodes == 1600 - storage.num_episodes and storage.num_episodes == 20
    assert all(late <= early for late, early in zip(peaks[1], peaks[0]))  # no growth once the capacity is reached


# ------------------------------------------------------------------ large observations: reserve, in-place compaction
FRAME_BYTES = 84 * 84


def frames(id_: str, steps: int, first: int) -> SingleAgentEpisode:
    """84x84 uint8 frames filled with ``first + t`` (mod 256), ended."""
    return SingleAgentEpisode(
        id_,
        observations=[np.full((84, 84), (first + t) % 256, np.uint8) for t in range(steps + 1)],
        actions=[0] * steps,
        rewards=[1.0] * steps,
        terminated=True,
    )


@pytest.mark.parametrize("num_episodes", [20, 60], ids=["full", "evicting"])
def test_frames_take_about_one_frame_per_stored_step(num_episodes: int) -> None:
    from replay.buffer import EpisodeReplayBuffer

    buf = EpisodeReplayBuffer(capacity_env_steps=2000, seed=0)
    for k in range(num_episodes):
        buf.add([frames(f"e{k}", 100, first=k)])
    metrics = buf.get_metrics()
    assert metrics.num_env_steps == 2000
    # next_obs is the next observation row (never a second copy); room: capacity / 16 + 1 rows.
    assert metrics.nbytes / metrics.num_env_steps / FRAME_BYTES <= 1.1
    batch = buf.sample(64)
    assert (batch["next_obs"][:, 0, 0].astype(int) == (batch["obs"][:, 0, 0].astype(int) + 1) % 256).all()


def test_columns_are_allocated_once_for_the_capacity_and_compacted_in_place() -> None:
    storage = EpisodeStorage(capacity_env_steps=2000)  # reserve: 2000 + 2000 // 16 + 1 = 2126 rows
    nbytes = []
    for k in range(60):
        storage.add(episodes_to_columnar([episode(f"e{k}", 100, terminated=True, logp=False)]))
        nbytes.append(storage.nbytes())
    # From e21 on, 101 more rows do not fit beside the dead ones: one in-place compaction per add.
    assert storage.num_compactions == 39 and storage.num_steps == 2000
    assert (storage.num_obs_rows, storage.num_step_rows) == (2121, 2100)
    assert list(storage.episodes) == [f"e{k}" for k in range(40, 60)]
    assert all(stored_obs(storage, id_) == [float(t) for t in range(101)] for id_ in storage.episodes)
    assert len(set(nbytes[25:])) == 1 and nbytes[0] >= 2126 * (4 + 8 + 8)  # never reallocated


def test_capacity_bytes_sizes_the_reserve() -> None:
    storage = EpisodeStorage(capacity_env_steps=10**6, capacity_bytes=3000 * 20)  # 20 B a step: 3001 steps
    storage.add(episodes_to_columnar([episode("a", 10, logp=False)]))
    assert 3189 * 20 <= storage.nbytes() < 3189 * 20 + 4096  # 3001 + 3001 // 16 + 1 rows, then the segments


def test_a_smaller_capacity_gives_the_room_back() -> None:
    storage = EpisodeStorage(capacity_env_steps=20000)
    for k in range(4):
        storage.add(episodes_to_columnar([episode(f"e{k}", 100, terminated=True, logp=False)]))
    storage.set_capacity(200)
    assert list(storage.episodes) == ["e2", "e3"]
    assert all(stored_obs(storage, id_) == [float(t) for t in range(101)] for id_ in storage.episodes)
    assert (storage.num_obs_rows, storage.num_step_rows) == (202, 200)
    storage.add(episodes_to_columnar([episode("e4", 100, terminated=True, logp=False)]))
    assert list(storage.episodes) == ["e3", "e4"]
