"""MaskedPickEnv: a tiny single-agent env whose Dict observations carry an ``action_mask``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["MaskedPickEnv"]


class MaskedPickEnv(gym.Env):
    """Each step allows a random half of ``num_actions`` actions and names one of them the target
    (``observation`` is its one-hot): the target pays 1, another legal action 0; an illegal action
    ends the episode with reward -1 and ``info["illegal_move"]`` (as PettingZoo's board games end a
    game). Ten steps an episode."""

    def __init__(self, config: Any = None, *, num_actions: int = 6) -> None:
        self.num_actions = num_actions
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(0, 1, (num_actions,), np.float32),
                "action_mask": gym.spaces.MultiBinary(num_actions),
            }
        )
        self.action_space = gym.spaces.Discrete(num_actions)
        self._rng = np.random.default_rng(0)
        self._t = 0

    def _observe(self) -> dict[str, np.ndarray]:
        mask = np.zeros(self.num_actions, np.int8)
        mask[self._rng.permutation(self.num_actions)[: self.num_actions // 2]] = 1
        self._target = int(self._rng.choice(np.flatnonzero(mask)))
        self._mask = mask
        return {"observation": np.eye(self.num_actions, dtype=np.float32)[self._target], "action_mask": mask}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        action = int(action)
        if not self._mask[action]:
            return self._observe(), -1.0, True, False, {"illegal_move": True}
        reward = float(action == self._target)
        self._t += 1
        return self._observe(), reward, self._t >= 10, False, {}
