"""Rows: a column of a replay storage, a (nested) structure of arrays that grows by whole rows.

Growth (:func:`grown_rows`): the first allocation that needs more than the rows in hand takes the
column's ``reserve_rows`` (the storage sets it from its capacity) at once, so a column filling up
to capacity is never copied; ``np.empty`` pages cost memory only once rows are written there.
Beyond the reserve (an episode longer than the capacity) it grows by 1.25x. Compaction
(:meth:`Rows.keep`) moves rows down in place, in slices of at most ``_MOVE_BYTES``, and keeps the
room. Plus the small row helpers the storage shares: dtype fitting, NaN-safe row equality and the
remapping of sparse row-keyed values after compaction.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ray_sampler.data import tree
from ray_sampler.errors import ReplayError

__all__ = ["Rows", "RowsMark", "equal_rows", "fits", "grown_rows", "remap_rows"]

_GROWTH = 1.25
_MIN_ROWS = 1024
_MOVE_BYTES = 8 << 20
"""Compaction moves rows through a temporary of at most this many bytes (or one row)."""


def grown_rows(needed: int, allocated: int, reserve: int) -> int:
    """Rows to allocate so that ``needed`` fit: what is allocated while it suffices, else the
    reserve (at least 1024 rows) while that suffices, else ``needed`` or 1.25x, whichever is more.

    >>> grown_rows(10, 0, 0), grown_rows(10, 0, 5000), grown_rows(6000, 5000, 5000), grown_rows(9, 20, 0)
    (1024, 5000, 6250, 20)
    """
    if needed <= allocated:
        return allocated
    if needed <= max(reserve, _MIN_ROWS):
        return max(reserve, _MIN_ROWS)
    return max(needed, int(allocated * _GROWTH))


class RowsMark(NamedTuple):
    """What ``Rows.rollback`` needs: no arrays, only the rows in use, the spec and the leaf dtypes."""

    rows: int
    spec: Any
    dtypes: tuple[np.dtype, ...]


class Rows:
    """A (nested) structure of arrays growing by whole rows; ``rows`` of them are in use."""

    def __init__(self) -> None:
        self.spec: Any = "unset"
        self.leaves: list[np.ndarray] = []
        self.rows = 0
        self.reserve_rows = 0
        """Rows to allocate at once when the column must grow (see the module docstring)."""

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
            self.leaves = self._allocate(n, leaves)
        self.check(struct, name)
        # Strings widen the stored column (lossless); other dtypes cast safely into it.
        self.leaves = [
            a.astype(np.promote_types(a.dtype, leaf.dtype))
            if a.dtype.kind == "U" and leaf.dtype.itemsize > a.dtype.itemsize
            else a
            for a, leaf in zip(self.leaves, leaves)
        ]
        start = self.rows
        if start + n > self.allocated_rows:
            # New pages are written only by the copy, and each old array goes once copied.
            for i, grown in enumerate(self._allocate(start + n, self.leaves)):
                grown[:start] = self.leaves[i][:start]
                self.leaves[i] = grown
        for a, leaf in zip(self.leaves, leaves):
            a[start : start + n] = leaf
        self.rows += n
        return start

    def _allocate(self, needed: int, like: list[np.ndarray]) -> list[np.ndarray]:
        """Empty arrays shaped as ``like``'s, of ``grown_rows`` rows; without the reserve where the
        system refuses that much address space at once (a huge capacity of huge observations)."""
        size = grown_rows(needed, self.allocated_rows, self.reserve_rows)
        try:
            return [self._empty(size, a) for a in like]
        except MemoryError:
            fallback = grown_rows(needed, self.allocated_rows, 0)
            if fallback >= size:
                raise
            return [self._empty(fallback, a) for a in like]

    @staticmethod
    def _empty(size: int, like: np.ndarray) -> np.ndarray:
        return np.empty((size, *like.shape[1:]), like.dtype)

    def mark(self) -> RowsMark:
        """The column as it is (for ``rollback``): appends only write past the rows in use."""
        return RowsMark(self.rows, self.spec, tuple(a.dtype for a in self.leaves))

    def rollback(self, mark: RowsMark) -> None:
        """Undoes the appends made after ``mark``, in place: the rows before it are untouched (a
        widened string column is narrowed back), the room allocated since stays."""
        rows, spec, dtypes = mark
        if spec == "unset":
            self.spec, self.leaves, self.rows = "unset", [], 0
            return
        self.rows, self.spec = rows, spec
        self.leaves = [a if a.dtype == dtype else a.astype(dtype) for a, dtype in zip(self.leaves, dtypes)]

    def gather(self, index: np.ndarray) -> Any:
        return tree.unflatten(self.spec, [a[index] for a in self.leaves])

    def keep(self, index: np.ndarray) -> None:
        """Keeps only rows ``index`` (ascending), renumbered from 0, moved down in place, slice by
        slice: row ``j`` comes from ``index[j] >= j``, so a slice never overwrites a row a later
        one reads, and the temporary is one slice. The allocated room stays for the next appends."""
        index = np.asarray(index, np.int64)
        k = len(index)
        moved = np.flatnonzero(index != np.arange(k))
        first = int(moved[0]) if len(moved) else k
        step = max(1, _MOVE_BYTES // max(self.row_nbytes(), 1))
        # Runs of consecutive rows move as slices (a memmove); many short runs as one gather each slice.
        runs = first + np.flatnonzero(np.diff(index[first:]) != 1) + 1
        starts = np.concatenate([[first], runs]).astype(np.int64) if first < k else np.zeros(0, np.int64)
        if len(starts) * 64 > k - first:
            for a in self.leaves:
                for at in range(first, k, step):
                    stop = min(at + step, k)
                    a[at:stop] = a[index[at:stop]]
        else:
            stops = np.append(starts[1:], k)
            for a in self.leaves:
                for dst, stop in zip(starts.tolist(), stops.tolist()):
                    for at in range(dst, stop, step):
                        end = min(at + step, stop)
                        src = int(index[at])
                        a[at:end] = a[src : src + end - at]
        self.rows = k

    def fit(self, size: int) -> None:
        """Reallocates to ``size`` rows (at least the rows in use) when more are allocated."""
        size = max(size, self.rows)
        if self.leaves and len(self.leaves[0]) > size:
            self.leaves = [a[:size].copy() for a in self.leaves]

    @property
    def is_set(self) -> bool:
        return self.spec != "unset"

    def row_nbytes(self) -> int:
        return sum(a.itemsize * int(np.prod(a.shape[1:])) for a in self.leaves)

    @property
    def allocated_rows(self) -> int:
        return len(self.leaves[0]) if self.leaves else 0

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
