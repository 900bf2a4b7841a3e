"""EpisodeStorage: chunk joining, lookback, atomic adds, the step-row listener and the read API."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay.storage import EpisodeStorage
from tests.replay.checks import episode, segment_ids, stored_obs


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
