"""plan_add, through EpisodeStorage.add: refused chunks, continuations, restore gaps and re-sent chunks."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay.storage import EpisodeStorage
from tests.replay.checks import episode, segment_ids, stored_obs


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


# ------------------------------------------------------------------ regressions from the review of issue #4
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
