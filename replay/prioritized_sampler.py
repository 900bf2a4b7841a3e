"""PrioritizedSampler: proportional prioritized draws over a sum tree of per-step priorities.

Stored steps are drawn with probability ``p_i / sum(p)``, where ``p_i = (|priority| + epsilon) **
alpha``; new steps get the largest priority seen so far. Draws carry ``weights``, the importance
weights ``(N * P(i)) ** -beta`` divided by their largest possible value. The sampler owns the
priorities, one per step row, and follows the rows as the storage adds, evicts (priority 0: never
drawn) and compacts them; the tree is rebuilt on the next draw after any such change.
``update_priorities`` finds sampled steps by their keys, even after evictions and compactions
moved rows (keys of evicted steps are skipped).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ray_sampler.errors import ReplayError
from ray_sampler.validate import check_number, check_probability
from replay.sampler import Draw
from replay.storage import EpisodeStorage
from replay.sum_tree import SumTree

__all__ = ["MAX_PRIORITY", "PrioritizedSampler"]

MAX_PRIORITY = 1e30
"""Largest priority taken: sums over millions of steps stay finite."""


class PrioritizedSampler:
    """Draws stored steps in proportion to their priorities (see the module docstring)."""

    def __init__(self, *, alpha: float = 0.6, beta: float = 0.4, epsilon: float = 1e-6) -> None:
        self.alpha = check_probability("alpha", alpha, error=ReplayError)
        self.beta = check_probability("beta", beta, error=ReplayError)
        self.epsilon = check_number("epsilon", epsilon, minimum=0, exclusive_minimum=True, error=ReplayError)
        self._priorities = np.zeros(0)
        self._max_priority = 1.0
        self._tree: SumTree | None = None

    @property
    def max_priority(self) -> float:
        """The largest priority given so far (before ``alpha``); new steps get it."""
        return self._max_priority

    def reset(self) -> None:
        self._priorities, self._max_priority, self._tree = np.zeros(0), 1.0, None

    # ---------------------------------------------------------------- following the storage's rows
    def rows_added(self, start: int, stop: int) -> None:
        grown = np.zeros(max(len(self._priorities), stop), np.float64)
        grown[: len(self._priorities)] = self._priorities
        grown[start:stop] = self._max_priority**self.alpha
        self._priorities, self._tree = grown, None

    def rows_evicted(self, start: int, stop: int) -> None:
        self._priorities[start:stop] = 0.0
        self._tree = None

    def rows_moved(self, kept: np.ndarray) -> None:
        self._priorities, self._tree = self._priorities[kept], None

    # ---------------------------------------------------------------- drawing
    def mass(self, storage: EpisodeStorage) -> tuple[float, float]:
        """(sum, smallest) of the stored steps' priorities (``priority ** alpha``); (0, 0) when empty."""
        if not storage.num_steps:
            return 0.0, 0.0
        if self._tree is None:
            self._tree = SumTree(self._priorities[: storage.num_step_rows])
        return float(self._tree.total), float(self._tree.min)

    def draw(
        self, storage: EpisodeStorage, batch_size_B: int, rng: np.random.Generator, *, beta: float | None = None
    ) -> Draw:
        """Steps drawn in proportion to priority, with importance weights for ``beta`` (default: the
        sampler's)."""
        if not storage.num_steps:
            raise ReplayError("the buffer holds no steps to sample")
        beta = self.beta if beta is None else check_probability("beta", beta, error=ReplayError)
        num_rows = storage.num_step_rows
        if self._tree is None:
            self._tree = SumTree(self._priorities[:num_rows])
        tree, priorities = self._tree, self._priorities
        rows = tree.find(rng.random(batch_size_B) * tree.total)
        # Rounding can land on an empty leaf at the very end: take the nearest stored step before it.
        empty = priorities[np.minimum(rows, len(priorities) - 1)] <= 0
        if empty.any():
            live = np.flatnonzero(priorities[:num_rows] > 0)
            rows[empty] = live[np.maximum(np.searchsorted(live, rows[empty]) - 1, 0)]
        seg, off = storage.locate_step_rows(rows)
        probs = priorities[rows] / tree.total
        n = storage.num_steps
        weights = (n * probs) ** -beta / (n * tree.min / tree.total) ** -beta
        return Draw(seg, off, weights)

    # ---------------------------------------------------------------- priorities by key
    def update_priorities(self, storage: EpisodeStorage, keys: ArrayLike, priorities: ArrayLike) -> None:
        """New priorities (e.g. |TD error|) for the steps of sampling ``keys``; keys of evicted steps
        are skipped. Raises ReplayError (and changes nothing) on non-finite or huge priorities."""
        try:
            key_array = np.asarray(keys, np.int64)
            values = np.abs(np.asarray(priorities, np.float64)) + self.epsilon
        except (TypeError, ValueError) as e:
            raise ReplayError(f"'keys' must be ints and 'priorities' numbers ({e})") from None
        ok = np.isfinite(values) & (values <= MAX_PRIORITY)
        if not ok.all():
            raise ReplayError(
                f"'priorities' must be finite and at most {MAX_PRIORITY:g} (got "
                f"{values[~ok][:3].tolist()}; a diverged learner step?)"
            )
        if key_array.shape != values.shape:
            raise ReplayError(f"'keys' and 'priorities' must have the same shape ({key_array.shape} vs {values.shape})")
        rows = storage.step_rows(key_array)
        found = rows >= 0
        rows, values = rows[found], values[found]
        if not len(rows):
            return
        self._max_priority = max(self._max_priority, float(values.max()))
        p = values**self.alpha
        self._priorities[rows] = p
        if self._tree is not None:
            self._tree.update(rows, p)

    def priorities_of(self, storage: EpisodeStorage, keys: np.ndarray | list[int]) -> np.ndarray:
        """The priorities (after ``alpha``) of the steps of sampling ``keys``; 0 where not stored."""
        rows = storage.step_rows(np.asarray(keys, np.int64))
        found = rows >= 0
        out = np.zeros(len(rows))
        out[found] = self._priorities[rows[found]]
        return out
