"""default_module_to_env: the module-to-env pipeline an EnvRunner builds (user pieces, then the defaults).

Every key of the final batch other than ``actions`` and ``actions_for_env`` is recorded in the
episodes as an extra model output.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from connectors.module_to_env.get_actions import GetActions
from connectors.module_to_env.normalize_and_clip_actions import NormalizeAndClipActions
from connectors.pipeline import ConnectorPipelineV2

__all__ = ["default_module_to_env"]


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
