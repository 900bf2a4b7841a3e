"""The fill rule of history positions before an episode's start, shared by env-to-module and learner pieces.

A trajectory view (previous actions and rewards, stacked frames) asks for items before the
current step. Where the episode (with its lookback) has none, because the episode began less
than that many steps ago, every position gets ``fill`` (default 0): zero-filled, never a
repeat of the first item. The result keeps the data's dtype when ``fill`` fits it (uint8
frames stay uint8), else the dtype numpy promotes the two to. The runner's pieces and the
learner's pieces both go through ``fill_dtype``, so they build the same arrays. String leaves
(a ``Text`` observation) keep their dtype and are filled with the empty string (``fill_value``).

>>> fill_dtype(np.dtype(np.uint8), 0), fill_dtype(np.dtype(np.uint8), 0.5)
(dtype('uint8'), dtype('float64'))
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["fill_dtype", "fill_value"]


def fill_dtype(dtype: np.dtype, fill: Any) -> np.dtype:
    """The dtype of history items of ``dtype`` padded with ``fill`` (see the module docstring)."""
    if dtype.kind in "TU":
        return dtype
    fits = np.asarray(fill).astype(dtype) == fill
    return dtype if bool(np.all(fits)) else np.result_type(dtype, np.asarray(fill))


def fill_value(dtype: np.dtype, fill: Any) -> Any:
    """What fills positions of a history of ``dtype``: ``fill``, or "" for strings.

    >>> fill_value(np.dtypes.StringDType(), 0), fill_value(np.dtype(np.float32), 0)
    ('', 0)
    """
    return "" if dtype.kind in "TU" else fill
