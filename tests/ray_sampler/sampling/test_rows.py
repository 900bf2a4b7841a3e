"""Row helpers of the vectorized engine: nested structures, ranges, interleaving."""

from __future__ import annotations

import numpy as np

from ray_sampler.sampling.rows import concat_ranges, empty_rows_like, gather_rows, interleave_rows, set_row


def test_gather_and_set_rows_of_a_nested_structure() -> None:
    struct = {"a": np.arange(4), "b": (np.arange(8).reshape(4, 2), np.zeros(4))}
    picked = gather_rows(struct, np.array([3, 0]))
    assert picked["a"].tolist() == [3, 0] and picked["b"][0].tolist() == [[6, 7], [0, 1]]
    set_row(struct, 1, {"a": 9, "b": (np.array([5, 5]), 2.0)})
    assert struct["a"].tolist() == [0, 9, 2, 3] and struct["b"][0][1].tolist() == [5, 5] and struct["b"][1][1] == 2.0


def test_concat_ranges_with_empty_ranges() -> None:
    assert concat_ranges(np.array([4, 9, 0]), np.array([2, 0, 3])).tolist() == [4, 5, 0, 1, 2]
    assert concat_ranges(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []


def test_interleave_rows_takes_the_common_dtype() -> None:
    out = interleave_rows(np.array([0.5]), np.array([1, 2]), np.array([1]), np.array([0, 2]), 3)
    assert out.dtype == np.float64 and out.tolist() == [1.0, 0.5, 2.0]


def test_empty_rows_keep_dtype_and_trailing_shape() -> None:
    empty = empty_rows_like({"x": np.ones((3, 2, 2), np.uint8)})
    assert empty["x"].shape == (0, 2, 2) and empty["x"].dtype == np.uint8
