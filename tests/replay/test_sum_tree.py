"""SumTree: sums, minimums and searches equal a plain cumulative sum, before and after updates."""

from __future__ import annotations

import numpy as np
import pytest

from replay.sum_tree import SumTree


def test_sum_tree_matches_a_plain_cumulative_sum() -> None:
    rng = np.random.default_rng(0)
    values = rng.random(37) * (rng.random(37) > 0.3)
    tree = SumTree(values)
    assert tree.total == pytest.approx(values.sum()) and tree.min == pytest.approx(values[values > 0].min())
    mass = rng.random(500) * values.sum()
    np.testing.assert_array_equal(tree.find(mass), np.searchsorted(np.cumsum(values), mass, side="right"))
    values[[3, 20]] = [5.0, 0.0]
    tree.update(np.array([3, 20]), np.array([5.0, 0.0]))
    mass = rng.random(500) * values.sum()
    np.testing.assert_array_equal(tree.find(mass), np.searchsorted(np.cumsum(values), mass, side="right"))


def test_an_updated_tree_equals_a_fresh_one() -> None:
    values = np.array([1.0, 2.0, 0.0, 4.0, 0.5])
    tree = SumTree(values)
    values[[1, 4]] = [0.0, 3.0]
    tree.update(np.array([1, 4]), np.array([0.0, 3.0]))
    fresh = SumTree(values)
    np.testing.assert_array_equal(tree.sums, fresh.sums)
    np.testing.assert_array_equal(tree.mins, fresh.mins)
    assert (tree.total, tree.min) == (8.0, 1.0)
