"""Default module-to-env pieces: sample actions from the module's outputs, then fit them to the env.

``GetActions`` samples (exploring) or takes the most likely action from
``action_dist_inputs`` and adds ``action_logp``; actions already in the batch (a module that
returns ``actions``, or ``sample(random_actions=True)``) are kept and only scored. ``NormalizeAndClipActions`` writes ``actions_for_env``: Box actions clipped to the
space (or unsquashed from [-1, 1]), while ``actions`` (what the episode keeps) stays as the
module produced it. Every other key of the final batch is recorded in the episodes as an
extra model output.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.connector_v2 import ConnectorV2
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.columns import Columns
from ray_sampler.modules.distributions import dist_class_for

__all__ = ["GetActions", "NormalizeAndClipActions", "default_module_to_env"]


class GetActions(ConnectorV2):
    """``actions`` and ``action_logp`` from ``action_dist_inputs`` (sampled when exploring)."""

    def __init__(self, action_space: gym.Space, *, seed: int | None = None) -> None:
        self.action_space = action_space
        self.rng = np.random.default_rng(seed)
        self._offset = int(getattr(action_space, "start", 0)) if isinstance(action_space, gym.spaces.Discrete) else 0

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
        if Columns.ACTIONS in batch:
            # Actions chosen elsewhere (a random module, random_actions=True): score them under the
            # module's distribution when it gave one, so every step records the same outputs.
            if Columns.ACTION_DIST_INPUTS in batch and Columns.ACTION_LOGP not in batch:
                dist = dist_class_for(self.action_space)(batch[Columns.ACTION_DIST_INPUTS])
                raw = np.asarray(batch[Columns.ACTIONS]) - self._offset
                batch[Columns.ACTION_LOGP] = dist.logp(raw).astype(np.float32)
            return batch
        dist = dist_class_for(self.action_space)(batch[Columns.ACTION_DIST_INPUTS])
        # Actions in the space's dtype (whatever the distribution computes in), scored as kept.
        raw = (dist.sample(self.rng) if explore else dist.deterministic()).astype(self.action_space.dtype)
        batch[Columns.ACTION_LOGP] = dist.logp(raw).astype(np.float32)
        batch[Columns.ACTIONS] = raw + self._offset if self._offset else raw
        return batch


class NormalizeAndClipActions(ConnectorV2):
    """``actions_for_env``: Box actions unsquashed from [-1, 1] (``normalize_actions``) or clipped."""

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


def default_module_to_env(
    action_space: gym.Space,
    user_pieces: tuple[Any, ...] = (),
    *,
    seed: int | None = None,
    normalize_actions: bool = False,
) -> ConnectorPipelineV2:
    """User pieces first, then GetActions and NormalizeAndClipActions."""
    return ConnectorPipelineV2(
        [
            *user_pieces,
            GetActions(action_space, seed=seed),
            NormalizeAndClipActions(action_space, normalize_actions=normalize_actions),
        ],
        name="ModuleToEnvPipeline",
    )
