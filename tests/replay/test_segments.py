"""SegmentTable: appends, links, copies that leave the original alone, compaction."""

from __future__ import annotations

import numpy as np

from replay.segments import SegmentTable, row_ranges


def two_segments() -> SegmentTable:
    table = SegmentTable()
    table.append(
        obs_start=[0, 3],
        step_start=[0, 2],
        num_steps=[2, 4],
        lookback_start=[0, 0],
        lookback_len=[1, 0],
        t_started=[0, 5],
        order=[0, 1],
        episode=["a", "b"],
    )
    return table


def test_append_returns_the_first_new_segment_live_and_unlinked() -> None:
    table = two_segments()
    assert len(table) == 2 and table.alive.tolist() == [True, True]
    assert table.next.tolist() == [-1, -1] and table.prev.tolist() == [-1, -1]
    assert table.append(
        obs_start=[8], step_start=[6], num_steps=[1], lookback_start=[0], lookback_len=[0],
        t_started=[9], order=[1], episode=["b"],
    ) == 2  # fmt: skip


def test_a_copy_changes_without_touching_the_original() -> None:
    table = two_segments()
    copy = table.copy()
    seg = copy.append(
        obs_start=[8], step_start=[6], num_steps=[1], lookback_start=[0], lookback_len=[0],
        t_started=[9], order=[1], episode=["b"],
    )  # fmt: skip
    copy.link(1, seg)
    copy.alive[0] = False
    assert (len(table), table.next.tolist(), table.alive.tolist(), table.episode) == (
        2,
        [-1, -1],
        [True, True],
        ["a", "b"],
    )
    assert (copy.next.tolist(), copy.prev.tolist(), copy.episode) == ([-1, 2, -1], [-1, -1, 1], ["a", "b", "b"])


def test_live_rows_and_compaction_drop_dead_segments() -> None:
    table = two_segments()
    table.append(
        obs_start=[8], step_start=[6], num_steps=[1], lookback_start=[1], lookback_len=[2],
        t_started=[9], order=[2], episode=["c"],
    )  # fmt: skip
    table.alive[1] = False
    obs_rows, step_rows, lb_rows = table.live_rows()
    assert (obs_rows.tolist(), step_rows.tolist(), lb_rows.tolist()) == ([0, 1, 2, 8, 9], [0, 1, 6], [0, 1, 2])
    compact, seg_map = table.compacted()
    assert seg_map.tolist() == [0, -1, 1] and compact.episode == ["a", "c"]
    assert compact.obs_start.tolist() == [0, 3] and compact.step_start.tolist() == [0, 2]
    assert compact.lookback_start.tolist() == [0, 1] and compact.lookback_len.tolist() == [1, 2]
    assert compact.t_started.tolist() == [0, 9] and compact.order.tolist() == [0, 2]


def test_compaction_remaps_links() -> None:
    table = two_segments()
    table.append(
        obs_start=[8], step_start=[6], num_steps=[1], lookback_start=[0], lookback_len=[0],
        t_started=[9], order=[1], episode=["b"],
    )  # fmt: skip
    table.link(1, 2)
    table.alive[0] = False
    compact, _ = table.compacted()
    assert compact.next.tolist() == [1, -1] and compact.prev.tolist() == [-1, 0]


def test_row_ranges_concatenates_ranges() -> None:
    assert row_ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert row_ranges(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
