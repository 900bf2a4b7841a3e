"""Default env-to-module pieces: the latest observation of each episode into a batch, then flattening.

Both work on the whole vector of sub-envs at once (no per-episode Python work when the
runner hands over the vector env's batched observation in ``shared_data["vector_obs"]``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.connector_v2 import ConnectorV2
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns

__all__ = ["AddObservationsFromEpisodesToBatch", "FlattenObservations", "default_env_to_module", "flatten_batch"]


class AddObservationsFromEpisodesToBatch(ConnectorV2):
    """``batch["obs"]``: the last observation of each episode, stacked (kept if already set)."""

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        if Columns.OBS in batch:
            return batch
        vector_obs = (shared_data or {}).get("vector_obs")
        if vector_obs is not None:
            batch[Columns.OBS] = vector_obs
        else:
            batch[Columns.OBS] = tree.stack([ep.get_observations(-1) for ep in episodes])
        return batch


def flatten_batch(space: gym.Space, x: Any) -> np.ndarray:
    """A batch of items of ``space`` -> float32 ``[N, flatdim(space)]`` in gymnasium's flatten layout
    (Box raveled, Discrete and MultiDiscrete one-hot, Dict in key order, Tuple in order)."""
    if isinstance(space, gym.spaces.Dict):
        return np.concatenate([flatten_batch(s, x[k]) for k, s in space.spaces.items()], axis=-1)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate([flatten_batch(s, part) for s, part in zip(space.spaces, x)], axis=-1)
    x = np.asarray(x)
    n = len(x)
    if isinstance(space, gym.spaces.Discrete):
        return ((x - space.start)[:, None] == np.arange(space.n)).astype(np.float32)
    if isinstance(space, gym.spaces.MultiDiscrete):
        flat = (x - space.start).reshape(n, -1)
        return np.concatenate(
            [
                (flat[:, j, None] == np.arange(k)).astype(np.float32)
                for j, k in enumerate(np.asarray(space.nvec).reshape(-1))
            ],
            axis=-1,
        )
    return x.reshape(n, -1).astype(np.float32, copy=False)


class FlattenObservations(ConnectorV2):
    """Turns ``batch["obs"]`` of a nested or discrete ``observation_space`` into flat float32 rows."""

    def __init__(self, observation_space: gym.Space) -> None:
        self.observation_space = observation_space

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        batch[Columns.OBS] = flatten_batch(self.observation_space, batch[Columns.OBS])
        return batch


def _is_flat_box(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and space.dtype == np.float32


def default_env_to_module(observation_space: gym.Space, user_pieces: tuple[Any, ...] = ()) -> ConnectorPipelineV2:
    """User pieces first, then the defaults (flattening only where the space is not a flat float Box)."""
    pieces: list[Any] = [*user_pieces, AddObservationsFromEpisodesToBatch()]
    if not _is_flat_box(observation_space):
        pieces.append(FlattenObservations(observation_space))
    return ConnectorPipelineV2(pieces, name="EnvToModulePipeline")
