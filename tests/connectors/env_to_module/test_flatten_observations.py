"""FlattenObservations and flatten_batch: flattening equal to gymnasium's, for a whole batch at once."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from connectors.env_to_module import FlattenObservations, flatten_batch
from ray_sampler.data import tree
from tests.helpers import SPACES


@pytest.mark.parametrize("name", [n for n in SPACES if n != "box_u8_image"] + ["box_u8_image"], ids=str)
def test_flatten_batch_equals_gymnasium_flatten(name: str) -> None:
    space = SPACES[name]
    space.seed(3)
    items = [space.sample() for _ in range(5)]

    got = flatten_batch(space, tree.stack(items))
    expected = np.stack([gym.spaces.flatten(space, item) for item in items]).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == (5, gym.spaces.flatdim(space))
    np.testing.assert_array_equal(got, expected)


def test_piece_replaces_obs_by_its_flat_rows() -> None:
    space = gym.spaces.Discrete(3, start=1)
    out = FlattenObservations(space)(rl_module=None, batch={"obs": np.array([1, 3])}, episodes=[])
    assert out["obs"].tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
