"""SumTree: sums and minimums over leaf values, updated and searched for whole batches at once.

>>> tree = SumTree(np.array([1.0, 0.0, 3.0]))
>>> tree.total, tree.min, tree.find(np.array([0.5, 1.0, 3.9])).tolist()
(4.0, 1.0, [0, 2, 2])
"""

from __future__ import annotations

import numpy as np

__all__ = ["SumTree"]


class SumTree:
    """A binary tree over ``values`` (padded to a power of two) with each node's sum and smallest
    positive leaf."""

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
