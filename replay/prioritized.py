"""Proportional prioritized replay: a vectorized sum/min tree over step priorities.

``PrioritizedEpisodeReplayBuffer`` draws stored steps with probability ``p_i / sum(p)``, where
``p_i = (|priority| + epsilon) ** alpha``; new steps get the largest priority seen so far.
``sample`` adds ``weights``, the importance weights ``(N * P(i)) ** -beta`` divided by their
largest possible value, and ``keys``, with which ``update_priorities`` finds the sampled steps
again even after evictions and compactions moved rows (keys of evicted steps are skipped). The
n-step walk is the uniform buffer's: never across episodes, never through a terminal.

>>> from ray_sampler import SingleAgentEpisode
>>> buf = PrioritizedEpisodeReplayBuffer(capacity_env_steps=10, alpha=1.0, seed=0)
>>> buf.add([SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 0], rewards=[0.0, 0.0])])
2
>>> batch = buf.sample(2)
>>> buf.update_priorities(batch["keys"], [3.0 if o == 0 else 1.0 for o in batch["obs"].tolist()])
>>> frequent = buf.sample(4000)["obs"]
>>> 0.7 < float((frequent == 0).mean()) < 0.8  # 3 / (3 + 1)
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay.buffer import EpisodeReplayBuffer

__all__ = ["PrioritizedEpisodeReplayBuffer", "SumTree"]

_MAX_PRIORITY = 1e30
"""Largest priority taken: sums over millions of steps stay finite."""


class SumTree:
    """Sums and minimums over leaf values, updated and searched for whole batches at once."""

    def __init__(self, values: np.ndarray) -> None:
        self.capacity = 1 << max(1, int(np.ceil(np.log2(max(len(values), 2)))))
        self.sums = np.zeros(2 * self.capacity)
        self.mins = np.full(2 * self.capacity, np.inf)
        self.sums[self.capacity : self.capacity + len(values)] = values
        self.mins[self.capacity : self.capacity + len(values)] = np.where(values > 0, values, np.inf)
        size = self.capacity
        while size > 1:  # each level from its children
            half = size // 2
            self.sums[half:size] = self.sums[size : 2 * size : 2] + self.sums[size + 1 : 2 * size : 2]
            self.mins[half:size] = np.minimum(self.mins[size : 2 * size : 2], self.mins[size + 1 : 2 * size : 2])
            size = half

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """Smallest positive leaf value."""
        return float(self.mins[1])

    def update(self, index: np.ndarray, values: np.ndarray) -> None:
        node = np.asarray(index, np.int64) + self.capacity
        self.sums[node] = values
        self.mins[node] = np.where(values > 0, values, np.inf)
        node = np.unique(node // 2)
        while len(node) and node[0] >= 1:
            self.sums[node] = self.sums[2 * node] + self.sums[2 * node + 1]
            self.mins[node] = np.minimum(self.mins[2 * node], self.mins[2 * node + 1])
            if node[0] == 1:
                break
            node = np.unique(node // 2)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each ``mass`` in [0, total): the leaf where the running sum passes it."""
        node = np.ones(len(mass), np.int64)
        mass = np.asarray(mass, np.float64).copy()
        while node[0] < self.capacity:
            left = 2 * node
            right = mass >= self.sums[left]
            mass = np.where(right, mass - self.sums[left], mass)
            node = np.where(right, left + 1, left)
        return node - self.capacity


class PrioritizedEpisodeReplayBuffer(EpisodeReplayBuffer):
    """An EpisodeReplayBuffer sampling in proportion to priorities (see the module docstring)."""

    def __init__(
        self,
        *,
        capacity_env_steps: int = 1_000_000,
        capacity_bytes: int | None = None,
        seed: int | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
    ) -> None:
        for name, value in (("alpha", alpha), ("beta", beta)):
            if not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ReplayError(f"'{name}' must be in [0, 1] (got {value!r})")
        if not isinstance(epsilon, (int, float)) or not epsilon > 0:
            raise ReplayError(f"'epsilon' must be a number > 0 (got {epsilon!r})")
        super().__init__(capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes, seed=seed)
        self.alpha, self.beta, self.epsilon = float(alpha), float(beta), float(epsilon)
        self.storage.priorities = np.zeros(0)
        self.max_priority = 1.0
        self._tree: SumTree | None = None

    def add(self, data: ColumnarEpisodes | list[SingleAgentEpisode]) -> int:
        """Stores chunks; their steps get the largest priority seen so far."""
        self.storage.new_priority = self.max_priority**self.alpha
        added = super().add(data)
        self._tree = None  # rebuilt on the next sample (rows moved, appeared or were evicted)
        return added

    def set_state(self, state: dict[str, Any]) -> None:
        """Replaces everything with ``get_state()`` output; every step starts at the same priority
        (priorities are not part of the state, as in ``restore``)."""
        super().set_state(state)
        s = self.storage
        s.priorities = np.zeros(s.actions.rows)
        for seg in np.flatnonzero(s.seg_alive).tolist():  # 1 on every stored step, 0 on dead rows
            s.priorities[s.seg_step[seg] : s.seg_step[seg] + s.seg_len[seg]] = 1.0
        self.max_priority, self._tree = 1.0, None

    def _sum_tree(self) -> SumTree:
        if self._tree is None:
            s = self.storage
            self._tree = SumTree(s.priorities[: s.actions.rows])
        return self._tree

    def sample(
        self, batch_size_B: int, *, n_step: int = 1, gamma: float = 0.99, beta: float | None = None
    ) -> dict[str, Any]:
        """Transitions drawn in proportion to priority, with importance ``weights`` and ``keys``."""
        if not isinstance(batch_size_B, int) or batch_size_B < 1:
            raise ReplayError(f"'batch_size_B' must be an int >= 1 (got {batch_size_B!r})")
        if not isinstance(n_step, int) or n_step < 1:
            raise ReplayError(f"'n_step' must be an int >= 1 (got {n_step!r})")
        if not len(self):
            raise ReplayError("the buffer holds no steps to sample")
        beta = self.beta if beta is None else beta
        s, tree = self.storage, self._sum_tree()
        rows = tree.find(self.rng.random(batch_size_B) * tree.total)
        # Rounding can land on an empty leaf at the very end: take the nearest stored step before it.
        empty = s.priorities[np.minimum(rows, len(s.priorities) - 1)] <= 0
        if empty.any():
            live = np.flatnonzero(s.priorities[: s.actions.rows] > 0)
            rows[empty] = live[np.maximum(np.searchsorted(live, rows[empty]) - 1, 0)]
        seg = np.searchsorted(s.seg_step, rows, side="right") - 1
        out = self._transitions(seg, rows - s.seg_step[seg], n_step, gamma)
        probs = s.priorities[rows] / tree.total
        n = len(self)
        out["weights"] = (n * probs) ** -beta / (n * tree.min / tree.total) ** -beta
        return out

    def update_priorities(self, keys: np.ndarray | list[int], priorities: np.ndarray | list[float]) -> None:
        """New priorities (e.g. |TD error|) for sampled steps; keys of evicted steps are skipped."""
        keys = np.asarray(keys, np.int64)
        values = np.abs(np.asarray(priorities, np.float64)) + self.epsilon
        if not (np.isfinite(values) & (values <= _MAX_PRIORITY)).all():
            raise ReplayError(
                f"'priorities' must be finite and at most {_MAX_PRIORITY:g} (got "
                f"{values[~(np.isfinite(values) & (values <= _MAX_PRIORITY))][:3].tolist()}; "
                "a diverged learner step?)"
            )
        if keys.shape != values.shape:
            raise ReplayError(f"'keys' and 'priorities' must have the same shape ({keys.shape} vs {values.shape})")
        s = self.storage
        rows = s.step_rows(keys)
        found = rows >= 0
        rows, values = rows[found], values[found]
        if not len(rows):
            return
        self.max_priority = max(self.max_priority, float(values.max()))
        p = values**self.alpha
        s.priorities[rows] = p
        if self._tree is not None:
            self._tree.update(rows, p)
