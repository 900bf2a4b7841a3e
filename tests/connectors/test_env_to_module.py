"""Default env-to-module pieces: observations into a batch, flattening equal to gymnasium's."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from connectors.env_to_module import AddObservationsFromEpisodesToBatch, default_env_to_module, flatten_batch
from tests.helpers import SPACES, episode_from_space


@pytest.mark.parametrize("name", [n for n in SPACES if n != "box_u8_image"] + ["box_u8_image"], ids=str)
def test_flatten_batch_equals_gymnasium_flatten(name: str) -> None:
    space = SPACES[name]
    space.seed(3)
    items = [space.sample() for _ in range(5)]
    from ray_sampler.data import tree

    got = flatten_batch(space, tree.stack(items))
    expected = np.stack([gym.spaces.flatten(space, item) for item in items]).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == (5, gym.spaces.flatdim(space))
    np.testing.assert_array_equal(got, expected)


def test_observations_come_from_episodes_or_the_vector_batch() -> None:
    eps = [episode_from_space(SPACES["box_f32_3"], SPACES["discrete"], k, seed=k) for k in (1, 2)]
    piece = AddObservationsFromEpisodesToBatch()
    from_eps = piece(rl_module=None, batch={}, episodes=eps)["obs"]
    np.testing.assert_array_equal(from_eps, np.stack([e.get_observations(-1) for e in eps]))
    given = np.ones((2, 3))
    assert piece(rl_module=None, batch={}, episodes=eps, shared_data={"vector_obs": given})["obs"] is given
    assert piece(rl_module=None, batch={"obs": 5}, episodes=eps)["obs"] == 5


def test_default_pipeline_flattens_only_when_needed() -> None:
    assert [p.name for p in default_env_to_module(gym.spaces.Box(-1, 1, (4,), np.float32))] == [
        "AddObservationsFromEpisodesToBatch"
    ]
    assert [p.name for p in default_env_to_module(SPACES["dict"])] == [
        "AddObservationsFromEpisodesToBatch",
        "FlattenObservations",
    ]
