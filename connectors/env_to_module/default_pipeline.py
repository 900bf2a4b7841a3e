"""default_env_to_module: the env-to-module pipeline an EnvRunner builds (user pieces, then the defaults)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.env_to_module.add_observations import AddObservationsFromEpisodesToBatch
from connectors.env_to_module.flatten_observations import FlattenObservations
from connectors.pipeline import ConnectorPipelineV2

__all__ = ["default_env_to_module", "env_to_module_observation_space", "is_flat_box"]


def is_flat_box(space: gym.Space) -> bool:
    """Whether ``space`` is what a module asking for flat input takes as it is (1-D float32 Box)."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and space.dtype == np.float32


def env_to_module_observation_space(observation_space: gym.Space, user_pieces: tuple[Any, ...] = ()) -> gym.Space:
    """The space of ``batch["obs"]`` after the user pieces (each piece's
    ``recompute_output_observation_space``, e.g. frame stacking adds an axis): the module's input."""
    for piece in user_pieces:
        recompute = getattr(piece, "recompute_output_observation_space", None)
        if recompute is not None:
            observation_space = recompute(observation_space)
    return observation_space


def default_env_to_module(observation_space: gym.Space, user_pieces: tuple[Any, ...] = ()) -> ConnectorPipelineV2:
    """User pieces first, then the defaults (flattening only where the space the user pieces give,
    ``env_to_module_observation_space``, is not a flat float Box)."""
    pieces: list[Any] = [*user_pieces, AddObservationsFromEpisodesToBatch()]
    observation_space = env_to_module_observation_space(observation_space, user_pieces)
    if not is_flat_box(observation_space):
        pieces.append(FlattenObservations(observation_space))
    return ConnectorPipelineV2(pieces, name="EnvToModulePipeline")
