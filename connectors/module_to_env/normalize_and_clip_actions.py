"""NormalizeAndClipActions: Box actions fitted to the env's action space in ``actions_for_env``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.connector_v2 import ConnectorV2
from ray_sampler.data.columns import Columns

__all__ = ["NormalizeAndClipActions"]


class NormalizeAndClipActions(ConnectorV2):
    """``actions_for_env``: Box actions unsquashed from [-1, 1] (``normalize_actions``) or clipped.

    ``actions`` (what the episode keeps) stays as the module produced it.
    """

    def __init__(self, action_space: gym.Space, *, normalize_actions: bool = False) -> None:
        self.action_space = action_space
        self.normalize_actions = normalize_actions

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
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            actions = np.asarray(batch[Columns.ACTIONS])
            if self.normalize_actions:
                actions = space.low + (np.clip(actions, -1.0, 1.0) + 1.0) * 0.5 * (space.high - space.low)
            batch[Columns.ACTIONS_FOR_ENV] = np.clip(actions, space.low, space.high).astype(space.dtype)
        return batch
