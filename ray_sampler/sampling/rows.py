"""Row operations on (nested) arrays with a leading row axis, shared by the vectorized engine's steps.

>>> concat_ranges(np.array([5, 0]), np.array([2, 3])).tolist()
[5, 6, 0, 1, 2]
>>> interleave_rows(np.array([10, 20]), np.array([1, 2, 3]), np.array([0, 3]), np.array([1, 2, 4]), 5).tolist()
[10, 1, 2, 20, 3]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import row_offsets

__all__ = ["concat_ranges", "empty_rows_like", "gather_rows", "interleave_rows", "set_row"]


def gather_rows(struct: Any, index: np.ndarray) -> Any:
    """Rows ``index`` of every leaf of ``struct``."""
    return tree.map_structure(lambda a: a[index], struct)


def empty_rows_like(struct: Any) -> Any:
    """No rows, with ``struct``'s leaves' dtypes and trailing shapes."""
    return tree.map_structure(lambda a: np.zeros((0, *a.shape[1:]), a.dtype), struct)


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each start ``s`` and length ``n``."""
    total = int(lengths.sum())
    return np.repeat(starts - row_offsets(lengths)[:-1], lengths) + np.arange(total)


def set_row(struct: Any, j: int, item: Any) -> None:
    """Writes ``item`` (one row's nested structure) into row ``j`` of ``struct``."""
    if isinstance(struct, dict):
        for k in struct:
            set_row(struct[k], j, item[k])
    elif isinstance(struct, tuple):
        for part, sub in zip(struct, item):
            set_row(part, j, sub)
    else:
        struct[j] = item


def interleave_rows(
    first: np.ndarray, rest: np.ndarray, first_rows: np.ndarray, rest_rows: np.ndarray, total: int
) -> np.ndarray:
    """``total`` rows: ``first`` at ``first_rows`` and ``rest`` at ``rest_rows`` (common dtype)."""
    out = np.empty((total, *rest.shape[1:]), dtype=np.result_type(first, rest))
    out[first_rows] = first
    out[rest_rows] = rest
    return out
