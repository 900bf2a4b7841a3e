"""GetActions: env actions and their log-probabilities from the module's action distribution inputs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.connector_v2 import ConnectorV2
from ray_sampler.data.columns import Columns
from ray_sampler.modules.distributions import dist_class_for

__all__ = ["GetActions"]


class GetActions(ConnectorV2):
    """``actions`` and ``action_logp`` from ``action_dist_inputs`` (sampled when exploring).

    Samples (exploring) or takes the most likely action; actions already in the batch (a module
    that returns ``actions``, or ``sample(random_actions=True)``) are kept and only scored.
    """

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
        # Actions in the space's dtype (whatever the distribution computes in), scored as kept;
        # both arrays are new, so a cast that changes nothing makes no copy.
        raw = (dist.sample(self.rng) if explore else dist.deterministic()).astype(self.action_space.dtype, copy=False)
        batch[Columns.ACTION_LOGP] = dist.logp(raw).astype(np.float32, copy=False)
        batch[Columns.ACTIONS] = raw + self._offset if self._offset else raw
        return batch
