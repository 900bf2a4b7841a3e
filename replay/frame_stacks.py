"""Stacked frames straight from the stored rows: each sampled observation with the ones before it.

``stacked_observations(storage, seg, pos, num_frames)`` gives, for the observation at position
``pos`` of segment ``seg`` (``pos`` 0 .. ``num_steps``), that observation and the
``num_frames - 1`` before it, oldest first: ``[B, num_frames, ...]`` per leaf. Earlier positions
come from the episode's earlier stored segments (a segment's position 0 is the position
``num_steps`` of the segment before it), then from the lookback stored with the episode's first
segment; where none is stored (before the episode's start, or evicted) they are filled by
``connectors.history``'s rule, as the learner's ``FrameStacking`` fills them. Each frame is stored
once; a stack is built only for the sampled items, one gather per leaf.
``stacked_transition_observations`` gives the stacks at ``pos`` and ``pos + 1`` of the same
segments (a 1-step transition's ``obs`` and ``next_obs``) from one row computation.

Where each frame comes from is a *row code* (suffix ``_BK``: [B, num_frames]): a data row (>= 0),
a lookback row ``l`` as ``-2 - l``, or -1 (filled). A frame at a position ``p >= 0`` is the data
row ``obs_start[seg] + p``; the codes of positions -W .. 0 of every segment (the walk back through
earlier segments and the lookback done once) are one [segments, W + 1] table, built when the
storage has changed (a new segment view) and kept beside it. A call walks nothing: one table
lookup gives the codes of a [B, num_frames] batch of stacks, then one gather per leaf copies the
frames (the fill and lookback frames, rare, are set after it).

>>> from ray_sampler.data.columnar import episodes_to_columnar
>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> from replay.storage import EpisodeStorage
>>> storage = EpisodeStorage(capacity_env_steps=10)
>>> ep = SingleAgentEpisode("a", observations=[10, 11, 12, 13], actions=[0, 0, 0], rewards=[0.0] * 3)
>>> storage.add(episodes_to_columnar([ep.cut(len_lookback_buffer=0)]))  # nothing: no steps yet
0
>>> storage.add(episodes_to_columnar([ep]))
3
>>> stacked_observations(storage, np.array([0, 0]), np.array([0, 3]), 3).tolist()
[[0, 0, 10], [11, 12, 13]]
>>> obs, next_obs = stacked_transition_observations(storage, np.array([0]), np.array([1]), 2)
>>> obs.tolist(), next_obs.tolist()
([[10, 11]], [[11, 12]])
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from connectors.history import fill_dtype, fill_value
from ray_sampler.data import tree
from replay.segments import SegmentView
from replay.storage import EpisodeStorage

__all__ = ["stacked_observations", "stacked_transition_observations"]

_FILL = -1
"""Row code of a frame nobody stored (before the episode's start, or evicted)."""

_codes_before: weakref.WeakKeyDictionary[EpisodeStorage, tuple[SegmentView, np.ndarray]] = weakref.WeakKeyDictionary()
"""Per storage: the segment view its table was built from, and that table (see ``_table``)."""


def stacked_observations(
    storage: EpisodeStorage, seg: np.ndarray, pos: np.ndarray, num_frames: int, *, fill: Any = 0
) -> Any:
    """The stacks of the observations at (``seg``, ``pos``) (see the module docstring)."""
    return _gather(storage, _row_codes(storage, seg, pos, num_frames), fill)


def stacked_transition_observations(
    storage: EpisodeStorage, seg: np.ndarray, pos: np.ndarray, num_frames: int, *, fill: Any = 0
) -> tuple[Any, Any]:
    """The stacks at (``seg``, ``pos``) and (``seg``, ``pos + 1``): two separate arrays per leaf, the
    rows of both from one [B, num_frames + 1] code computation (``pos + 1`` <= ``num_steps``)."""
    codes = _row_codes(storage, seg, np.asarray(pos, np.int64) + 1, num_frames + 1)
    return _gather(storage, codes[:, :-1], fill), _gather(storage, codes[:, 1:], fill)


def _row_codes(storage: EpisodeStorage, seg: np.ndarray, pos: np.ndarray, num_frames: int) -> np.ndarray:
    """[B, num_frames]: the row code of every frame of the stacks at (``seg``, ``pos``)."""
    table = _table(storage, num_frames - 1)
    width = table.shape[1] - 1
    p_BK = np.asarray(pos, np.int64)[:, None] + np.arange(1 - num_frames, 1)
    # Position p < 0: the table's code; p >= 0: the table's code of position 0 (obs_start) plus p.
    return table[np.asarray(seg, np.int64)[:, None], np.minimum(p_BK, 0) + width] + np.maximum(p_BK, 0)


def _table(storage: EpisodeStorage, width: int) -> np.ndarray:
    """[segments, W + 1]: the row codes of positions -W .. 0 of every segment, W >= ``width``, kept
    until the storage changes (a new segment view)."""
    view = storage.segment_view()
    kept = _codes_before.get(storage)
    if kept is not None and kept[0] is view and kept[1].shape[1] > width:
        return kept[1]
    num_segments = len(view.next)
    seg = np.repeat(np.arange(num_segments, dtype=np.int64)[:, None], width + 1, axis=1)
    table = _walk_back(view, seg, np.broadcast_to(np.arange(-width, 1), seg.shape))
    _codes_before[storage] = (view, table)
    return table


def _walk_back(view: SegmentView, seg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The row codes of positions ``pos`` (negative ones too) of segments ``seg``: walked back
    through the episode's earlier segments, then its stored lookback, else filled."""
    prev = np.full(len(view.next), -1, np.int64)
    has_next = np.flatnonzero(view.next >= 0)
    prev[view.next[has_next]] = has_next
    s, p = seg, pos
    while True:
        back = (p < 0) & (prev[s] >= 0)
        if not back.any():
            break
        before = np.where(back, prev[s], s)
        p = np.where(back, p + view.num_steps[before], p)
        s = before
    lb_len = view.lookback_len[s]
    in_lb = (p < 0) & (p >= -lb_len)
    codes = np.where(in_lb, -2 - (view.lookback_start[s] + lb_len + p), _FILL)
    return np.where(p >= 0, view.obs_start[s] + p, codes)


def _gather(storage: EpisodeStorage, codes_BK: np.ndarray, fill: Any) -> Any:
    """The frames of ``codes_BK``, [B, K, ...] per observation leaf."""
    spec, data_leaves, lb_leaves = storage.observation_leaves()
    if not codes_BK.size or codes_BK.min() >= 0:  # the common case: one gather per leaf, no fill
        return tree.unflatten(spec, [data[codes_BK] for data in data_leaves])
    is_fill, in_lb = codes_BK == _FILL, codes_BK <= -2
    data_rows, lb_rows = np.maximum(codes_BK, 0), -2 - codes_BK[in_lb]

    def stack(data: np.ndarray, lookback: np.ndarray | None) -> np.ndarray:
        dtype = fill_dtype(data.dtype, fill)
        # One gather (row 0 where a frame comes from elsewhere), then the few other frames set.
        out = data[data_rows] if dtype == data.dtype else data[data_rows].astype(dtype)
        out[is_fill] = fill_value(dtype, fill)
        if lookback is not None and len(lb_rows):
            out[in_lb] = lookback[lb_rows]
        return out

    lb = lb_leaves if lb_leaves else [None] * len(data_leaves)
    return tree.unflatten(spec, [stack(d, b) for d, b in zip(data_leaves, lb, strict=True)])
