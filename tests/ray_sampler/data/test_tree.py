"""Nested structure helpers: map, flatten/unflatten through a spec, stack and concat."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data import tree

NESTED = {"a": (np.array([1, 2]), 3.0), "b": {"c": np.int64(4)}}


def test_flatten_and_unflatten_through_spec() -> None:
    leaves = tree.flatten(NESTED)
    assert [np.asarray(x).tolist() for x in leaves] == [[1, 2], 3.0, 4]
    spec = tree.spec_of(NESTED)
    assert spec == {"dict": [["a", {"tuple": [None, None]}], ["b", {"dict": [["c", None]]}]]}
    back = tree.unflatten(spec, leaves)
    assert back["a"][1] == 3.0 and back["b"]["c"] == 4


def test_unflatten_rejects_wrong_leaf_count() -> None:
    with pytest.raises(ValueError, match="more leaves"):
        tree.unflatten(None, [1, 2])
    with pytest.raises(ValueError, match="fewer leaves"):
        tree.unflatten({"tuple": [None, None]}, [1])


def test_stack_and_concat_keep_nesting() -> None:
    stacked = tree.stack([NESTED, NESTED])
    assert stacked["a"][0].shape == (2, 2) and stacked["b"]["c"].tolist() == [4, 4]
    joined = tree.concat([stacked, stacked])
    assert joined["a"][0].shape == (4, 2)


def test_concat_skips_empty_pieces() -> None:
    assert tree.concat([np.zeros((0,)), np.ones((2, 3), np.float32)]).dtype == np.float32


def test_map_structure_over_several_structures() -> None:
    out = tree.map_structure(lambda x, y: np.asarray(x) + np.asarray(y), NESTED, NESTED)
    assert out["a"][0].tolist() == [2, 4] and out["b"]["c"] == 8


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([np.zeros(2), np.ones(2)], None),
        ([], None),
        ([np.zeros(2), np.zeros((2, 1))], (1, "shape (2, 1) where the first has shape (2,)")),
        (
            [{"a": np.zeros(2)}, {"a": np.zeros(2)}, {"b": np.zeros(2)}],
            (2, "layout {'b': (2,)} where the first has {'a': (2,)} (leaf shapes in place of the leaves)"),
        ),
        (
            [(1, 2.0), (1, np.zeros(3))],
            (1, "layout ((), (3,)) where the first has ((), ()) (leaf shapes in place of the leaves)"),
        ),
    ],
    ids=["equal", "empty", "array-shape", "dict-keys", "tuple-leaf"],
)
def test_first_mismatch_names_the_first_item_stack_cannot_take(items: list, expected: tuple | None) -> None:
    assert tree.first_mismatch(items) == expected
    if expected is not None:
        with pytest.raises((ValueError, KeyError)):
            tree.stack(items)
