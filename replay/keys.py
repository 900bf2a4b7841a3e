"""Sampling keys: ``order << 32 | t`` names a stored step whatever rows and segments hold it.

A key joins the insertion counter of the step's episode (``StoredEpisode.order``) and the step's
global timestep, so it outlives compaction (which renumbers rows and segments) and restores (which
keep the counters). These are the lookups between keys and the step rows of a segment table.

>>> from replay.segments import SegmentTable
>>> table = SegmentTable()
>>> table.append(obs_start=[0, 3], step_start=[0, 2], num_steps=[2, 1], lookback_start=[0, 0],
...              lookback_len=[0, 0], t_started=[5, 0], order=[1, 0], episode=["b", "a"])
0
>>> keys = stored_keys(table)
>>> [(int(k) >> 32, int(k) & 0xFFFFFFFF) for k in keys]
[(0, 0), (1, 5), (1, 6)]
>>> step_rows_of_keys(table, np.append(keys, 1 << 32)).tolist()
[2, 0, 1, -1]
"""

from __future__ import annotations

import numpy as np

from replay.segments import SegmentTable, row_ranges

__all__ = ["step_rows_of_keys", "stored_keys"]


def step_rows_of_keys(table: SegmentTable, keys: np.ndarray) -> np.ndarray:
    """Step rows of sampling ``keys`` in ``table``'s live segments; -1 where not stored.

    Vectorized: live segments sorted by (order, first t), then one ``searchsorted``."""
    keys = np.asarray(keys, np.int64)
    live = np.flatnonzero(table.alive)
    if not len(live):
        return np.full(len(keys), -1, np.int64)
    starts = (table.order[live] << 32) | table.t_started[live]
    by_start = np.argsort(starts, kind="stable")
    live, starts = live[by_start], starts[by_start]
    at = np.maximum(np.searchsorted(starts, keys, side="right") - 1, 0)
    seg, offset = live[at], keys - starts[at]
    found = ((keys >> 32) == table.order[seg]) & (offset >= 0) & (offset < table.num_steps[seg])
    return np.where(found, table.step_start[seg] + offset, -1).astype(np.int64)


def stored_keys(table: SegmentTable) -> np.ndarray:
    """The sampling keys of every step of ``table``'s live segments, in (insertion order, time) order."""
    live = np.flatnonzero(table.alive)
    live = live[np.lexsort((table.t_started[live], table.order[live]))]
    lens = table.num_steps[live]
    return np.repeat(table.order[live] << 32, lens) + row_ranges(table.t_started[live], lens)
