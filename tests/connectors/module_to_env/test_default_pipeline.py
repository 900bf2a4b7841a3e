"""default_module_to_env: user pieces first, then GetActions and NormalizeAndClipActions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.module_to_env import default_module_to_env


def test_user_pieces_then_get_actions_then_clipping() -> None:
    def user_piece(*, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        return batch

    pipe = default_module_to_env(gym.spaces.Discrete(2), (user_piece,), seed=0)
    assert pipe.name == "ModuleToEnvPipeline"
    assert len(pipe) == 3 and pipe[0] is user_piece
    assert [pipe[1].name, pipe[2].name] == ["GetActions", "NormalizeAndClipActions"]


def test_pipeline_passes_its_options_on() -> None:
    space = gym.spaces.Box(np.array([0.0], np.float32), np.array([2.0], np.float32))
    pipe = default_module_to_env(space, normalize_actions=True)
    out = pipe(rl_module=None, batch={"actions": np.array([[0.0]])}, episodes=[], explore=False)
    assert out["actions_for_env"].tolist() == [[1.0]]
