"""OngoingEpisodes: the two forms of the running episodes, pending chunks and the one carry."""

from __future__ import annotations

import numpy as np

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.ongoing import OngoingEpisodes, split_excess
from tests.ray_sampler.sampling.records import record


def started(*first_obs: int, lookback: int = 1) -> OngoingEpisodes:
    ongoing = OngoingEpisodes(lookback=lookback, id_prefix="p")
    ongoing.restart([np.array([o]) for o in first_obs], [{} for _ in first_obs], ship_running=True)
    return ongoing


def obs_of(ep: SingleAgentEpisode) -> list[int]:
    return [int(o[0]) for o in ep.get_observations()]


class TestCarry:
    def test_split_moves_the_last_valid_sub_envs_and_their_resets(self) -> None:
        r = record([1, 2, 3], valid=[True, True, False], done=(0, 1), resets={0: 10, 1: 20})
        kept, held = split_excess(r, 1)
        assert kept.valid.tolist() == [True, False, False] and held.valid.tolist() == [False, True, False]
        assert list(kept.step.resets) == [0] and list(held.step.resets) == [1]

    def test_held_steps_are_added_first_when_the_episodes_are_next_asked_for(self) -> None:
        ongoing = started(0, 100)
        kept = ongoing.hold_back(record([1, 101], done=(1,), resets={1: 200}), 1)
        assert ongoing.add_step(kept) == []
        assert [len(ep) for ep in ongoing.as_episodes()] == [1, 0]  # the carry went on with the next request
        assert [ep.id_ for ep in ongoing.pop_pending()] == ["p000000000002"]  # it finished sub-env 1's episode
        assert obs_of(ongoing.as_episodes()[1]) == [200]

    def test_take_carry_hands_the_record_over(self) -> None:
        ongoing = started(0, 100)
        ongoing.hold_back(record([1, 101]), 1)
        carry = ongoing.take_carry()
        assert carry is not None and carry.valid.tolist() == [False, True] and ongoing.take_carry() is None


class TestChunks:
    def test_take_splits_a_chunk_at_the_step_count_and_keeps_the_rest(self) -> None:
        ongoing = started(0, lookback=1)
        for t in (1, 2, 3):
            ongoing.add_step(record([t]))
        out, steps = ongoing.take(2)
        assert steps == 2 and [obs_of(c) for c in out] == [[0, 1, 2]]
        rest = ongoing.pop_pending()
        assert [obs_of(c) for c in rest] == [[2, 3]] and rest[0].len_lookback_buffer == 1
        assert len(ongoing.as_episodes()[0]) == 0 and ongoing.as_episodes()[0].t_started == 3

    def test_cut_running_returns_chunks_with_steps_and_continues_every_episode(self) -> None:
        ongoing = started(0, 100)
        ongoing.add_step(record([1, 101], valid=[True, False]))
        out = ongoing.cut_running()
        assert [obs_of(c) for c in out] == [[0, 1]]
        assert [ep.t_started for ep in ongoing.as_episodes()] == [1, 0]

    def test_cursor_form_round_trips_to_episode_form(self) -> None:
        ongoing = started(0, 100)
        ongoing.add_step(record([1, 101]))
        ongoing.cut_running()
        cursors = ongoing.as_cursors()
        assert ongoing.is_columnar and cursors.chunks.ids == ["p000000000001", "p000000000002"]
        episodes = ongoing.as_episodes()
        assert not ongoing.is_columnar and [obs_of(ep) for ep in episodes] == [[1], [101]]
        assert [ep.len_lookback_buffer for ep in episodes] == [1, 1]


class TestLifecycle:
    def test_restart_ships_or_drops_running_steps(self) -> None:
        for ship in (True, False):
            ongoing = started(0, 100)
            ongoing.add_step(record([1, 101], valid=[True, False]))
            dropped, abandoned = ongoing.restart([np.array([5]), np.array([6])], [{}, {}], ship_running=ship)
            assert abandoned == {"p000000000001", "p000000000002"}
            assert dropped == (0 if ship else 1)
            assert [obs_of(c) for c in ongoing.pop_pending()] == ([[0, 1]] if ship else [])
            assert [ep.id_ for ep in ongoing.as_episodes()] == ["p000000000003", "p000000000004"]

    def test_drain_gives_everything_back_and_stops(self) -> None:
        ongoing = started(0, 100)
        ongoing.add_step(record([1, 101], done=(0,)))
        ongoing.defer(ongoing.add_step(record([2, 102], valid=[False, True])))
        out, dropped = ongoing.drain(ship_running=False)
        assert out == [] and dropped == 1 and not ongoing.is_started


class TestEndFailed:
    def test_failed_sub_env_drops_its_running_steps_and_starts_anew(self) -> None:
        ongoing = started(0, 100)
        ongoing.add_step(record([1, 101]))
        ongoing.add_step(record([2, 102]))
        assert ongoing.end_failed({1: (np.array([900]), {"r": 900})}) == 2
        episodes = ongoing.as_episodes()
        assert [obs_of(ep) for ep in episodes] == [[0, 1, 2], [900]]
        assert episodes[1].id_ == "p000000000003" and episodes[1].get_infos(0) == {"r": 900}
        assert ongoing.take_drops() == (1, 2, ["p000000000002"])
        assert ongoing.take_drops() == (0, 0, [])

    def test_in_cursor_form_only_the_failed_cursor_changes(self) -> None:
        ongoing = started(0, 100)
        ongoing.add_step(record([1, 101]))
        ongoing.cut_running()
        ongoing.as_cursors()
        assert ongoing.end_failed({0: (np.array([7]), {})}, num_steps_elsewhere=4) == 0
        assert ongoing.is_columnar and ongoing.as_cursors().chunks.ids == ["p000000000003", "p000000000002"]
        assert ongoing.take_drops() == (1, 4, ["p000000000001"])
        assert [obs_of(ep) for ep in ongoing.as_episodes()] == [[7], [101]]
