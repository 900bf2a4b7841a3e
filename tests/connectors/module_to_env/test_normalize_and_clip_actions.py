"""NormalizeAndClipActions: Box actions clipped or unsquashed into ``actions_for_env``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from connectors.module_to_env import NormalizeAndClipActions


def test_clip_and_unsquash() -> None:
    space = gym.spaces.Box(np.array([0.0, -4.0], np.float32), np.array([2.0, 4.0], np.float32))
    batch = {"actions": np.array([[-1.0, 0.5], [3.0, 1.5]])}
    clipped = NormalizeAndClipActions(space)(rl_module=None, batch=dict(batch), episodes=[])
    np.testing.assert_allclose(clipped["actions_for_env"], [[0.0, 0.5], [2.0, 1.5]])
    unsquashed = NormalizeAndClipActions(space, normalize_actions=True)(rl_module=None, batch=dict(batch), episodes=[])
    np.testing.assert_allclose(unsquashed["actions_for_env"], [[0.0, 2.0], [2.0, 4.0]])
    assert unsquashed["actions"] is batch["actions"]


def test_discrete_actions_get_no_env_actions() -> None:
    out = NormalizeAndClipActions(gym.spaces.Discrete(2))(rl_module=None, batch={"actions": np.array([1])}, episodes=[])
    assert list(out) == ["actions"]
