"""Multi-agent envs written the way RLlib's docs write them: ``super().__init__()``, then
``self.agents = self.possible_agents = [...]`` and per-agent space dicts; ``reset`` starts with
``super().reset(seed=seed, options=options)`` and draws from ``self.np_random``.

In all three, an agent observes a one-hot target out of three and earns 1.0 when its next action
names it: random play earns a third per action, a trained policy close to 1.0. They differ in who
acts when: both players at every step, players taking turns, or an agent that joins late.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.sampling.multi_agent_env import MultiAgentEnv

__all__ = ["LateJoinerEnv", "SimultaneousEnv", "TurnBasedEnv"]

NUM_TARGETS = 3


class _TargetGame(MultiAgentEnv):
    """What the three share: spaces, the targets, and the reward for naming one."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["player1", "player2"]
        self.observation_spaces = {a: gym.spaces.Box(0.0, 1.0, (NUM_TARGETS,), np.float32) for a in self.agents}
        self.action_spaces = {a: gym.spaces.Discrete(NUM_TARGETS) for a in self.agents}
        self.max_steps = int((config or {}).get("max_steps", 10))

    def _new_target(self, agent: str) -> np.ndarray:
        self.targets[agent] = int(self.np_random.integers(NUM_TARGETS))
        obs = np.zeros(NUM_TARGETS, np.float32)
        obs[self.targets[agent]] = 1.0
        return obs

    def _reward(self, agent: str, action: Any) -> float:
        return 1.0 if int(action) == self.targets[agent] else 0.0


class SimultaneousEnv(_TargetGame):
    """Both players act at every step (RLlib's rock-paper-scissors shape); ends after ``max_steps``."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed, options=options)
        self.t = 0
        self.targets: dict[str, int] = {}
        return {a: self._new_target(a) for a in self.agents}, {}

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        self.t += 1
        rewards = {a: self._reward(a, action) for a, action in action_dict.items()}
        obs = {a: self._new_target(a) for a in self.agents}
        return obs, rewards, {"__all__": self.t >= self.max_steps}, {"__all__": False}, {}


class TurnBasedEnv(_TargetGame):
    """Players take turns (RLlib's tic-tac-toe shape): only the player to move gets an observation;
    its reward comes back with the other player's turn. At the end both get a last observation."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed, options=options)
        self.t = 0
        self.targets = {}
        self.to_move = self.agents[int(self.np_random.integers(2))]
        return {self.to_move: self._new_target(self.to_move)}, {}

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        (mover, action) = next(iter(action_dict.items()))
        self.t += 1
        rewards = {mover: self._reward(mover, action)}
        self.to_move = self.agents[1 - self.agents.index(mover)]
        done = self.t >= self.max_steps
        movers = self.agents if done else [self.to_move]
        obs = {a: self._new_target(a) for a in movers}
        return obs, rewards, {"__all__": done}, {"__all__": False}, {}


class LateJoinerEnv(_TargetGame):
    """``player1`` acts from the reset; ``player2`` joins at env step ``join_at`` (3) and acts from
    then on; ends after ``max_steps`` with a time limit (``"__all__"`` truncated)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self.join_at = int((config or {}).get("join_at", 3))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed, options=options)
        self.t = 0
        self.targets = {}
        return {"player1": self._new_target("player1")}, {"player1": {"joined_at": 0}}

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        self.t += 1
        rewards = {a: self._reward(a, action) for a, action in action_dict.items()}
        acting = ["player1", "player2"] if self.t >= self.join_at else ["player1"]
        obs = {a: self._new_target(a) for a in acting}
        infos = {"player2": {"joined_at": self.t}} if self.t == self.join_at else {}
        return obs, rewards, {"__all__": False}, {"__all__": self.t >= self.max_steps}, infos
