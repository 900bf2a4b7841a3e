"""harvest and its named steps, on hand-made vector steps with exact values."""

from __future__ import annotations

import numpy as np

from ray_sampler.sampling.harvest import (
    chunk_bounds,
    chunk_infos,
    chunk_lookback,
    chunk_starts,
    harvest,
    interleave_observations,
    order_transitions,
    resets_by_env,
)
from tests.ray_sampler.sampling.records import counter, cursors, record


def episode_end_then_steps() -> list:
    """Sub-env 0 ends at step 1 (SAME_STEP: its row holds the reset obs 10, the real last obs is 1)."""
    first = record([10, 101], done=(0,), resets={0: 10}, final_obs={0: 1}, infos={1: {"t": 1}})
    return [first, record([11, 102])]


class TestSteps:
    def test_transitions_are_ordered_by_sub_env_then_time(self) -> None:
        records = [record([1, 2], valid=[True, False]), record([3, 4])]
        order = order_transitions(records, 2)
        assert order.env_of.tolist() == [0, 0, 1] and order.step_of.tolist() == [0, 1, 1]
        assert order.position.tolist() == [[0, 1], [-1, 2]]
        assert order.gather([r.actions for r in records]).tolist() == [10, 30, 40]

    def test_resets_are_grouped_by_sub_env_in_order(self) -> None:
        resets = resets_by_env([record([1], resets={0: 5}), record([2], resets={0: 6})])
        assert [int(o[0]) for o, _ in resets[0]] == [5, 6] and [i for _, i in resets[0]] == [{"r": 5}, {"r": 6}]

    def test_a_chunk_starts_at_each_sub_env_and_after_each_episode_end(self) -> None:
        bounds = chunk_bounds(np.array([0, 0, 1, 1, 1]), np.array([True, False, False, True, False]))
        assert bounds.first.tolist() == [0, 1, 2, 4] and bounds.last.tolist() == [0, 1, 3, 4]
        assert bounds.chunk_of.tolist() == [0, 1, 2, 2, 3] and bounds.chunk_env.tolist() == [0, 0, 1, 1]

    def test_first_chunks_continue_their_cursor_and_later_ones_begin_at_resets(self) -> None:
        records = episode_end_then_steps()
        starts = chunk_starts(np.array([0, 0, 1]), cursors(0, 100), resets_by_env(records), new_id=counter())
        assert starts.continues.tolist() == [True, False, True] and starts.ids == ["a", "n1", "b"]
        assert starts.first_obs[:, 0].tolist() == [0, 10, 100] and starts.first_infos == [None, {"r": 10}, None]
        assert starts.used == {0: 1}

    def test_a_cursor_awaiting_a_reset_does_not_continue(self) -> None:
        cur = cursors(0, 100)
        cur.awaiting[0] = True
        resets = resets_by_env([record([5, 101], valid=[False, True], resets={0: 5}), record([6, 102])])
        starts = chunk_starts(np.array([0, 1]), cur, resets, new_id=counter())
        assert starts.continues.tolist() == [False, True] and starts.ids == ["n1", "b"]

    def test_observation_rows_put_each_chunk_first_observation_before_its_transitions(self) -> None:
        bounds = chunk_bounds(np.array([0, 0, 1]), np.array([True, False, False]))
        obs, chunk_row, trans_row = interleave_observations(np.array([0, 10, 100]), np.array([1, 11, 101]), bounds)
        assert obs.tolist() == [0, 1, 10, 11, 100, 101]
        assert chunk_row.tolist() == [0, 2, 4] and trans_row.tolist() == [1, 3, 5]

    def test_infos_keep_non_empty_dicts_by_observation_row(self) -> None:
        rows, values = chunk_infos({1: {"t": 1}}, [None, {"r": 10}, {}], np.array([0, 2, 4]), np.array([1, 3, 5]))
        assert rows.tolist() == [2, 3] and values == [{"r": 10}, {"t": 1}]

    def test_continuing_chunks_take_their_cursors_lookback(self) -> None:
        col, cur = harvest([record([1, 101])], cursors(0, 100), lookback=1, new_id=counter())
        assert col is not None
        lb = chunk_lookback(
            cur.chunks, np.array([1, 0]), col.data.actions, col.data.rewards, col.data.extra_model_outputs
        )
        assert lb.observations[:, 0].tolist() == [100, 0] and lb.actions.tolist() == [1010, 10]
        assert lb.rewards.tolist() == [101.0, 1.0] and lb.extra_model_outputs["vf"].tolist() == [101.0, 1.0]


class TestHarvest:
    def test_chunks_are_cut_at_episode_ends_with_exact_rows(self) -> None:
        col, _ = harvest(episode_end_then_steps(), cursors(0, 100), lookback=1, new_id=counter())
        assert col is not None
        assert col.ids == ["a", "n1", "b"] and col.lens.tolist() == [1, 1, 2]
        assert col.terminated.tolist() == [True, False, False] and col.t_started.tolist() == [0, 0, 0]
        assert col.data.observations[:, 0].tolist() == [0, 1, 10, 11, 100, 101, 102]
        assert col.data.actions.tolist() == [100, 110, 1010, 1020]
        assert col.data.rewards.tolist() == [10.0, 11.0, 101.0, 102.0]
        assert col.data.info_rows.tolist() == [2, 5] and col.data.info_values == [{"r": 10}, {"t": 1}]

    def test_cursors_after_a_harvest_hold_each_episode_tail(self) -> None:
        _, cur = harvest(episode_end_then_steps(), cursors(0, 100), lookback=1, new_id=counter())
        c = cur.chunks
        assert c.ids == ["n1", "b"] and c.t_started.tolist() == [1, 2] and c.lens.tolist() == [0, 0]
        assert c.data.observations[:, 0].tolist() == [11, 102] and c.lookback_lens.tolist() == [1, 1]
        assert c.lookback.observations[:, 0].tolist() == [10, 101] and c.lookback.actions.tolist() == [110, 1020]
        assert c.lookback.info_rows.tolist() == [0, 1] and c.lookback.info_values == [{"r": 10}, {"t": 1}]
        assert cur.awaiting.tolist() == [False, False]

    def test_no_transition_gives_no_chunk_and_fresh_cursors_at_resets(self) -> None:
        cur = cursors(0, 100)
        cur.awaiting[:] = True
        col, after = harvest(
            [record([5, 6], valid=[False, False], resets={0: 5, 1: 6})], cur, lookback=2, new_id=counter()
        )
        assert col is None
        assert after.chunks.ids == ["n1", "n2"] and after.chunks.data.observations[:, 0].tolist() == [5, 6]
        assert after.awaiting.tolist() == [False, False] and after.chunks.data.info_values == [{"r": 5}, {"r": 6}]
