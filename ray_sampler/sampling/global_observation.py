"""GlobalObservationEnv: each agent observes its own observation and the team's global state.

The centralized critic of MAPPO: a module's policy reads the agent's own observation, its value
function the global state, so the value (and the advantages) see what the whole team sees, while
acting needs only what the agent sees. This wrapper makes every observation a dict
``{"own": <the agent's observation>, "global": <the global state>}`` with the global state either

- ``"concat"``: every possible agent's latest observation, flattened and concatenated in
  ``possible_agents`` order (zeros for an agent that has not observed yet in the episode), or
- ``"state"``: the env's own global state, ``env.state()`` with its ``state_space`` (PettingZoo's
  parallel envs have one, e.g. the MPE scenarios; through ray-sampler's adapters too).

Rewards, dones and actions pass through unchanged.

>>> from ray_sampler.sampling.multi_agent_env import make_multi_agent
>>> env = GlobalObservationEnv(make_multi_agent("CartPole-v1", 2)({}))
>>> obs, _ = env.reset(seed=0)
>>> obs[0]["own"].shape, obs[0]["global"].shape, bool((obs[0]["global"] == obs[1]["global"]).all())
((4,), (8,), True)
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.errors import ConfigError
from ray_sampler.sampling.multi_agent_env import MultiAgentEnv

__all__ = ["GLOBAL_STATES", "GlobalObservationEnv"]

GLOBAL_STATES = ("concat", "state")
"""What the global state of a centralized critic is (see the module docstring)."""


def _state_source(env: Any) -> Any:
    """The object whose ``state()`` and ``state_space`` give the global state: the env, or the
    PettingZoo env inside ray-sampler's adapter; None if neither has them."""
    for candidate in (env, getattr(env, "env", None)):
        if candidate is not None and callable(getattr(candidate, "state", None)) and hasattr(candidate, "state_space"):
            return candidate
    return None


class GlobalObservationEnv(MultiAgentEnv):
    """Wraps a multi-agent env so each observation is ``{"own", "global"}`` (see the module docstring)."""

    def __init__(self, env: Any, global_state: str = "concat") -> None:
        super().__init__()
        if global_state not in GLOBAL_STATES:
            raise ConfigError(f"'global_state' must be one of {list(GLOBAL_STATES)} (got {global_state!r})")
        self.env, self.global_state = env, global_state
        self.possible_agents = list(env.possible_agents)
        own = {a: env.get_observation_space(a) for a in self.possible_agents}
        if global_state == "state":
            source = _state_source(env)
            if source is None:
                raise ConfigError(
                    f"'global_state' 'state' needs an env with state() and state_space ({type(env).__name__} has "
                    "neither): use 'concat'"
                )
            self._state = source
            global_space = gym.spaces.Box(-np.inf, np.inf, (gym.spaces.flatdim(source.state_space),), np.float32)
        else:
            self._sizes = {a: gym.spaces.flatdim(s) for a, s in own.items()}
            global_space = gym.spaces.Box(-np.inf, np.inf, (sum(self._sizes.values()),), np.float32)
        self.observation_spaces = {a: gym.spaces.Dict({"own": s, "global": global_space}) for a, s in own.items()}
        self.action_spaces = {a: env.get_action_space(a) for a in self.possible_agents}
        self._latest: dict[Hashable, np.ndarray] = {}

    def _wrap(self, obs: dict[Hashable, Any]) -> dict[Hashable, Any]:
        if self.global_state == "state":
            state = np.asarray(self._state.state(), np.float32).reshape(-1)
        else:
            for aid, o in obs.items():
                flat = gym.spaces.flatten(self.env.get_observation_space(aid), o)
                self._latest[aid] = np.asarray(flat, np.float32)
            parts = [self._latest.get(a, np.zeros(n, np.float32)) for a, n in self._sizes.items()]
            state = np.concatenate(parts)
        return {aid: {"own": o, "global": state} for aid, o in obs.items()}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._latest = {}
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(getattr(self.env, "agents", self.possible_agents))
        return self._wrap(obs), infos

    def step(self, action_dict: dict[Hashable, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        obs, rewards, terminateds, truncateds, infos = self.env.step(action_dict)
        self.agents = list(getattr(self.env, "agents", self.possible_agents))
        return self._wrap(obs), rewards, terminateds, truncateds, infos

    def close(self) -> None:
        self.env.close()
