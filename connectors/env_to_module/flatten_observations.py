"""FlattenObservations: nested or discrete observations as flat float32 rows, in gymnasium's layout."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from connectors.connector_v2 import ConnectorV2
from ray_sampler.data.columns import Columns
from ray_sampler.data.spaces import flatten_batch

__all__ = ["FlattenObservations", "flatten_batch"]


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
