"""StatelessCartPole: CartPole with the velocities hidden, a task only a policy with memory solves."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["StatelessCartPole"]


class StatelessCartPole(CartPoleEnv):
    """CartPole-v1's dynamics and reward, observing only the cart position and the pole angle.

    The two velocities are left out of every observation, so one observation cannot tell which
    way the pole is moving: a memoryless policy balances it for a few dozen steps at best, a
    recurrent one can infer the velocities from the last few observations.
    """

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], dtype=np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    @staticmethod
    def _hide_velocities(obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, np.float32)[[0, 2]]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        obs, info = super().reset(seed=seed, options=options)
        return self._hide_velocities(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return self._hide_velocities(obs), float(reward), terminated, truncated, info
