"""FlattenObservations: nested or discrete observations as flat float32 rows, in gymnasium's layout."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.connector_v2 import ConnectorV2
from ray_sampler.data.columns import Columns

__all__ = ["FlattenObservations", "flatten_batch"]


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
    """Turns ``batch["obs"]`` of a nested or discrete ``observation_space`` into flat float32 rows
    (for the whole vector of sub-envs at once).

    A module whose ``needs_flat_observations`` attribute is False (an image module such as
    ``TorchCNNModule``, which takes uint8 frames as they are) gets ``batch["obs"]`` unchanged.
    """

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
        if getattr(rl_module, "needs_flat_observations", True):
            batch[Columns.OBS] = flatten_batch(self.observation_space, batch[Columns.OBS])
        return batch
