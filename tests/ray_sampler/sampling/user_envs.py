"""A user's env module, as the hand-over tests use it: an env class that takes its config (RLlib's
convention), a creator, a vector-env creator, creators that fail, and a gymnasium id registered on
import (``gym.register`` in the module, as users write it).

LightSide: the position starts at 0; action 1 walks right, 0 left; reaching ``size`` ends the
episode with reward 1. The observation is the position over ``size``, in [0, 1].
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["USER_ID", "LightSide", "fails", "make", "make_vector", "not_an_env"]

USER_ID = "UserLightSide-v0"


class LightSide(gym.Env):
    """Walk right to the light (see the module docstring); ``config["size"]`` (default 3)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.size = int((config or {}).get("size", 3))
        self.pos = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.pos = 0
        return np.array([0.0], np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        done = self.pos >= self.size
        return np.array([self.pos / self.size], np.float32), float(done), done, False, {}


def make(config: dict[str, Any]) -> LightSide:
    """A creator: ``(EnvContext) -> gymnasium.Env``."""
    return LightSide(config)


def make_vector(config: Any) -> gym.vector.VectorEnv:
    """A vector-env creator: ``config.num_envs`` sub-envs in one of gymnasium's vector envs."""
    return gym.vector.SyncVectorEnv([lambda: LightSide(config) for _ in range(config.num_envs)])


def fails(config: dict[str, Any]) -> gym.Env:
    raise ValueError("size must be positive")


def not_an_env(config: dict[str, Any]) -> dict[str, str]:
    return {"not": "an env"}


gym.register(USER_ID, entry_point=f"{__name__}:LightSide", max_episode_steps=20, reward_threshold=0.9)
