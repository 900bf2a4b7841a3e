"""Stacked frames straight from the stored rows: each sampled observation with the ones before it.

``stacked_observations(storage, seg, pos, num_frames)`` gives, for the observation at position
``pos`` of segment ``seg`` (``pos`` 0 .. ``num_steps``), that observation and the
``num_frames - 1`` before it, oldest first: ``[B, num_frames, ...]`` per leaf. Earlier positions
come from the episode's earlier stored segments (a segment's position 0 is the position
``num_steps`` of the segment before it), then from the lookback stored with the episode's first
segment; where none is stored (before the episode's start, or evicted) they are filled by
``connectors.history``'s rule, as the learner's ``FrameStacking`` fills them. Each frame is stored
once; a stack is built only for the sampled items, one gather per leaf and frame position.

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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.history import fill_dtype, fill_value
from ray_sampler.data import tree
from replay.storage import EpisodeStorage

__all__ = ["stacked_observations"]


def stacked_observations(
    storage: EpisodeStorage, seg: np.ndarray, pos: np.ndarray, num_frames: int, *, fill: Any = 0
) -> Any:
    """The stacks of the observations at (``seg``, ``pos``) (see the module docstring)."""
    view = storage.segment_view()
    prev = _previous_segments(view)
    # [B, num_frames]: the segment and position of every frame, walked back through segments.
    s = np.repeat(np.asarray(seg, np.int64)[:, None], num_frames, axis=1)
    p = np.asarray(pos, np.int64)[:, None] - np.arange(num_frames - 1, -1, -1)[None, :]
    while True:
        back = (p < 0) & (prev[s] >= 0)
        if not back.any():
            break
        before = np.where(back, prev[s], s)
        p = np.where(back, p + view.num_steps[before], p)
        s = before
    in_data = p >= 0
    data_rows = np.where(in_data, view.obs_start[s] + p, -1)
    lb_len = view.lookback_len[s]
    in_lb = ~in_data & (p >= -lb_len)
    lb_rows = np.where(in_lb, view.lookback_start[s] + lb_len + p, -1)
    spec, data_leaves, lb_leaves = storage.observation_leaves()
    all_data = bool(in_data.all())

    def stack(data: np.ndarray, lookback: np.ndarray | None) -> np.ndarray:
        if all_data:  # the common case: one gather, no fill
            return data[data_rows]
        dtype = fill_dtype(data.dtype, fill)
        out = np.full((*data_rows.shape, *data.shape[1:]), fill_value(dtype, fill), dtype=dtype)
        out[in_data] = data[data_rows[in_data]]
        if lookback is not None and in_lb.any():
            out[in_lb] = lookback[lb_rows[in_lb]]
        return out

    lb = lb_leaves if lb_leaves else [None] * len(data_leaves)
    return tree.unflatten(spec, [stack(d, b) for d, b in zip(data_leaves, lb, strict=True)])


def _previous_segments(view: Any) -> np.ndarray:
    """Per segment, the segment of the same episode before it (-1: none), cached on the view."""
    prev = getattr(view, "_previous", None)
    if prev is None:
        prev = np.full(len(view.next), -1, np.int64)
        has_next = np.flatnonzero(view.next >= 0)
        prev[view.next[has_next]] = has_next
        object.__setattr__(view, "_previous", prev)
    return prev
