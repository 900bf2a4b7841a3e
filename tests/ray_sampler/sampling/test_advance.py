"""advance_cursors and its named steps: each sub-env's cursor after a harvest."""

from __future__ import annotations

import numpy as np

from ray_sampler.sampling.advance import advance_cursors, cursor_fates, lookback_plan
from ray_sampler.sampling.harvest import harvest
from tests.ray_sampler.sampling.records import counter, cursors, record


def test_fates_going_waiting_fresh_and_kept() -> None:
    # Sub-env 0 steps on; 1 ends (NEXT_STEP: no reset yet); 2 ends and resets; 3 makes no step.
    records = [record([1, 2, 3, 4], done=(1, 2), valid=[True, True, True, False], resets={2: 30})]
    col, _ = harvest(records, cursors(0, 0, 0, 0, ids="abcd"), lookback=1, new_id=counter())
    fates = cursor_fates(col, 4, np.array([0, 1, 2]), {2: [(np.array([30]), {})]}, {})
    assert fates.going.tolist() == [True, False, False, False]
    assert fates.waiting.tolist() == [False, True, False, False]
    assert fates.fresh.tolist() == [False, False, True, False]
    assert fates.kept.tolist() == [False, False, False, True]
    assert fates.last_chunk.tolist() == [0, 1, 2, -1]


def test_lookback_reaches_into_the_chunk_own_lookback_when_it_is_short() -> None:
    ids = counter()
    _, cur1 = harvest([record([1]), record([2])], cursors(0, ids="a"), lookback=3, new_id=ids)
    col2, _ = harvest([record([3])], cur1, lookback=3, new_id=ids)
    assert col2 is not None and col2.lookback_lens.tolist() == [2]
    fates = cursor_fates(col2, 1, np.array([0]), {}, {})
    plan = lookback_plan(col2, cur1.chunks, fates, 3)
    # Steps 2 and 3 (observations 1 and 2) come from the chunk's lookback, step 3 (obs 2 -> 3) from its data.
    assert plan.keep.tolist() == [3] and plan.from_old.tolist() == [False, False, False]
    assert plan.in_data.tolist() == [False, False, True]
    assert plan.lookback_rows.tolist() == [0, 1] and plan.step_data_rows.tolist() == [0]
    assert plan.obs_data_rows.tolist() == [0]


def test_advanced_cursor_keeps_the_last_h_steps() -> None:
    ids = counter()
    _, cur = harvest([record([1]), record([2]), record([3])], cursors(0, ids="a"), lookback=2, new_id=ids)
    c = cur.chunks
    assert c.ids == ["a"] and c.t_started.tolist() == [3] and c.data.observations[:, 0].tolist() == [3]
    assert c.lookback.observations[:, 0].tolist() == [1, 2] and c.lookback.actions.tolist() == [20, 30]
    assert c.lookback.extra_model_outputs["vf"].tolist() == [2.0, 3.0]


def test_a_sub_env_whose_episode_ended_without_reset_awaits_it() -> None:
    cur = cursors(0, 100)
    col, after = harvest([record([1, 101], done=(0,))], cur, lookback=1, new_id=counter())
    assert col is not None and after.awaiting.tolist() == [True, False]
    assert after.chunks.ids == ["a", "b"] and after.chunks.t_started.tolist() == [0, 1]
    assert after.chunks.data.observations[:, 0].tolist() == [1, 101] and after.chunks.lookback_lens.tolist() == [0, 1]


def test_no_harvest_keeps_every_cursor() -> None:
    cur = cursors(0, 100)
    after = advance_cursors(None, cur, chunk_env=np.zeros(0, np.int64), resets={}, used={}, h=2, new_id=counter())
    assert after.chunks.ids == ["a", "b"] and after.chunks.data.observations[:, 0].tolist() == [0, 100]
    assert after.awaiting.tolist() == [False, False] and after.chunks.lookback_lens.tolist() == [0, 0]
