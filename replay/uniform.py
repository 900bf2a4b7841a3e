"""UniformSampler: every stored step (lookback excluded) equally likely.

Live segments are ordered by (episode insertion order, time) with their cumulative steps, so a
draw picks the same step whatever the physical layout (a restored buffer samples alike).

>>> from ray_sampler.data.columnar import episodes_to_columnar
>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> from replay.storage import EpisodeStorage
>>> storage = EpisodeStorage(capacity_env_steps=10)
>>> storage.add(episodes_to_columnar([SingleAgentEpisode("a", observations=[0, 1, 2], actions=[0, 0],
...                                                      rewards=[0.0, 0.0])]))
2
>>> draw = UniformSampler().draw(storage, 1000, np.random.default_rng(0))
>>> sorted(set(draw.offsets.tolist())), set(draw.segments.tolist())
([0, 1], {0})
"""

from __future__ import annotations

import numpy as np

from ray_sampler.errors import ReplayError
from replay.sampler import Draw
from replay.segments import SegmentView
from replay.storage import EpisodeStorage

__all__ = ["UniformSampler"]


class UniformSampler:
    """Draws stored steps uniformly (see the module docstring)."""

    def __init__(self) -> None:
        self._view: SegmentView | None = None
        self._live = np.zeros(0, np.int64)
        self._cum = np.zeros(0, np.int64)

    def reset(self) -> None:
        self._view = None

    def rows_added(self, start: int, stop: int) -> None:
        """Nothing to follow: the order tables are rebuilt from the storage when it changed."""

    def rows_evicted(self, start: int, stop: int) -> None:
        """Nothing to follow."""

    def rows_moved(self, kept: np.ndarray) -> None:
        """Nothing to follow."""

    def _tables(self, view: SegmentView) -> tuple[np.ndarray, np.ndarray]:
        """Live segments in (insertion order, time) order and their cumulative steps."""
        if view is not self._view:
            live = np.flatnonzero(view.alive & (view.num_steps > 0))
            self._live = live[np.lexsort((view.t_started[live], view.order[live]))]
            self._cum = np.cumsum(view.num_steps[self._live])
            self._view = view
        return self._live, self._cum

    def draw(self, storage: EpisodeStorage, batch_size_B: int, rng: np.random.Generator) -> Draw:
        if not storage.num_steps:
            raise ReplayError("the buffer holds no steps to sample")
        view = storage.segment_view()
        live, cum = self._tables(view)
        draw = rng.integers(0, int(cum[-1]), batch_size_B)
        k = np.searchsorted(cum, draw, side="right")
        seg = live[k]
        return Draw(seg, draw - (cum[k] - view.num_steps[seg]))
