"""Rows: a column of a replay storage, a (nested) structure of arrays that grows by whole rows.

Plus the small row helpers the storage shares: dtype fitting, NaN-safe row equality and the
remapping of sparse row-keyed values after compaction.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.errors import ReplayError

__all__ = ["Rows", "equal_rows", "fits", "remap_rows"]

_GROWTH = 1.25


class Rows:
    """A (nested) structure of arrays growing by whole rows; ``rows`` of them are in use."""

    def __init__(self) -> None:
        self.spec: Any = "unset"
        self.leaves: list[np.ndarray] = []
        self.rows = 0

    def check(self, struct: Any, name: str) -> None:
        """Raises ReplayError if ``struct``'s rows cannot be appended; changes nothing."""
        if self.spec == "unset" or not len(tree.first_leaf(struct)):
            return
        leaves = tree.flatten(struct)
        if tree.spec_of(struct) != self.spec or any(
            a.shape[1:] != b.shape[1:] or not fits(a.dtype, b.dtype) for a, b in zip(leaves, self.leaves)
        ):
            got = [(leaf.dtype.str, leaf.shape[1:]) for leaf in leaves]
            held = [(leaf.dtype.str, leaf.shape[1:]) for leaf in self.leaves]
            raise ReplayError(
                f"'{name}' rows must keep the stored structure, shapes and (safely castable) dtypes "
                f"{held} (got {got}); nothing was added"
            )

    def append(self, struct: Any, name: str) -> int:
        """Appends the rows of ``struct`` (checked first); returns the first new row's index."""
        leaves = tree.flatten(struct)
        n = len(leaves[0])
        if self.spec == "unset":
            if not n:
                return 0
            self.spec = tree.spec_of(struct)
            self.leaves = [np.empty((max(n, 1024), *leaf.shape[1:]), leaf.dtype) for leaf in leaves]
        self.check(struct, name)
        # Strings widen the stored column (lossless); other dtypes cast safely into it.
        self.leaves = [
            a.astype(np.promote_types(a.dtype, leaf.dtype))
            if a.dtype.kind == "U" and leaf.dtype.itemsize > a.dtype.itemsize
            else a
            for a, leaf in zip(self.leaves, leaves)
        ]
        start = self.rows
        if start + n > len(self.leaves[0]):
            size = max(start + n, int(len(self.leaves[0]) * _GROWTH))
            self.leaves = [
                np.concatenate([a[:start], np.empty((size - start, *a.shape[1:]), a.dtype)]) for a in self.leaves
            ]
        for a, leaf in zip(self.leaves, leaves):
            a[start : start + n] = leaf
        self.rows += n
        return start

    def gather(self, index: np.ndarray) -> Any:
        return tree.unflatten(self.spec, [a[index] for a in self.leaves])

    def keep(self, index: np.ndarray) -> None:
        """Keeps only rows ``index`` (in that order), in freshly sized arrays."""
        self.leaves = [a[index] for a in self.leaves]
        self.rows = len(index)

    @property
    def is_set(self) -> bool:
        return self.spec != "unset"

    def row_nbytes(self) -> int:
        return sum(a.itemsize * int(np.prod(a.shape[1:])) for a in self.leaves)

    def nbytes(self) -> int:
        """Bytes allocated (used rows and room to grow)."""
        return sum(a.nbytes for a in self.leaves)


def fits(incoming: np.dtype, stored: np.dtype) -> bool:
    """Whether rows of dtype ``incoming`` go into a column of dtype ``stored`` without loss."""
    if incoming.kind == "U" and stored.kind == "U":
        return True  # the column widens
    return np.can_cast(incoming, stored, "safe")


def equal_rows(a: Any, b: Any) -> bool:
    """Leaf-wise equality of two (nested) single rows; NaN equals NaN in float leaves."""
    return all(
        np.array_equal(x, y, equal_nan=x.dtype.kind in "fc" and y.dtype.kind in "fc")
        for x, y in zip(tree.flatten(a), tree.flatten(b))
    )


def remap_rows(sparse: dict[int, dict], kept_rows: np.ndarray) -> dict[int, dict]:
    """Sparse row-keyed values after keeping ``kept_rows`` (ascending): new keys, dropped rows gone."""
    if not sparse:
        return {}
    keys = np.fromiter(sparse, np.int64, len(sparse))
    at = np.searchsorted(kept_rows, keys)
    hit = (
        (at < len(kept_rows)) & (kept_rows[np.minimum(at, len(kept_rows) - 1)] == keys)
        if len(kept_rows)
        else np.zeros(len(keys), bool)
    )
    values = list(sparse.values())
    return {int(a): values[i] for i, a in zip(np.flatnonzero(hit).tolist(), at[hit].tolist())}
