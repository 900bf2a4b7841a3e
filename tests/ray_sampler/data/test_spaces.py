"""describe_outside: what makes a value fall outside its space, named by leaf."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.spaces import describe_outside

BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
NESTED = gym.spaces.Dict({"pos": BOX, "parts": gym.spaces.Tuple([gym.spaces.Discrete(3), gym.spaces.Text(5)])})


@pytest.mark.parametrize(
    ("space", "value", "expected"),
    [
        (BOX, np.array([0.5, -0.5], np.float32), None),
        (BOX, [0.5, -0.5], None),  # gymnasium casts a list
        (
            BOX,
            np.zeros(3, np.float32),
            f"observation of shape (3,) and dtype float32, where {BOX} holds shape (2,) and dtype float32",
        ),
        (
            BOX,
            np.zeros(2),
            f"observation of shape (2,) and dtype float64, where {BOX} holds shape (2,) and dtype float32",
        ),
        (
            BOX,
            np.array([0.0, 1.5], np.float32),
            f"observation 1.5 at index [1], outside {BOX}'s bounds [-1.0, 1.0] there",
        ),
        (BOX, np.array([np.nan, 0.0], np.float32), "observation with nan at index [0]"),
        (gym.spaces.Discrete(2), 5, "observation 5 (a int), which Discrete(2) does not contain"),
        (NESTED, {"pos": np.zeros(2, np.float32), "parts": (1, "abc")}, None),
        (
            NESTED,
            {"pos": np.zeros(2, np.float32)},
            f"observation with keys ['pos'], where {NESTED} has keys ['parts', 'pos']",
        ),
        (
            NESTED,
            {"pos": np.zeros(2, np.float32), "parts": (7, "abc")},
            "observation['parts'][0] 7 (a int), which Discrete(3) does not contain",
        ),
        (
            NESTED,
            {"pos": np.zeros(2, np.float32), "parts": (1,)},
            f"observation['parts'] (1,), where {NESTED['parts']} holds a tuple of 2",
        ),
    ],
    ids=[
        "inside",
        "list-inside",
        "shape",
        "dtype",
        "bounds",
        "nan",
        "discrete",
        "nested-inside",
        "dict-keys",
        "tuple-leaf",
        "tuple-length",
    ],
)
def test_describe_outside_names_the_leaf_and_what_the_space_holds(
    space: gym.Space, value: object, expected: str | None
) -> None:
    assert describe_outside(space, value) == expected
    assert (expected is None) == space.contains(value if not isinstance(value, list) else np.asarray(value, np.float32))


def test_non_finite_values_can_be_left_to_a_check_of_their_own() -> None:
    nan = np.array([np.nan, 0.0], np.float32)
    assert describe_outside(BOX, nan, non_finite_ok=True) is None
    assert describe_outside(BOX, np.array([np.inf, 2.0], np.float32), non_finite_ok=True) == (
        f"observation 2.0 at index [1], outside {BOX}'s bounds [-1.0, 1.0] there"
    )
