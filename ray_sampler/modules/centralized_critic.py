"""CentralizedCriticMLPModule: a numpy MLP policy on the agent's own observation, and a value head on the global state.

MAPPO's module: observations are ``{"own": ..., "global": ...}`` (``GlobalObservationEnv``); the
policy MLP (``MLPModule``'s) reads ``own``, the value MLP reads ``global``. The PPO loss
(learner/ppo_loss.py) feeds each head its part.

>>> import gymnasium as gym
>>> space = gym.spaces.Dict({"own": gym.spaces.Box(-1, 1, (4,)), "global": gym.spaces.Box(-1, 1, (8,))})
>>> m = CentralizedCriticMLPModule(space, gym.spaces.Discrete(2), seed=0)
>>> out = m.forward_exploration({"obs": {"own": np.zeros((3, 4)), "global": np.zeros((3, 8))}})
>>> out["action_dist_inputs"].shape, out["vf_preds"].shape, m.params["vf.0.w"].shape
((3, 2), (3,), (8, 64))
"""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.errors import SpaceError
from ray_sampler.modules.mlp import init_layer
from ray_sampler.modules.mlp_module import MLPModule

__all__ = ["CentralizedCriticMLPModule", "critic_parts", "split_observations"]


def split_observations(obs: Any) -> tuple[np.ndarray, np.ndarray]:
    """(own[N, D], global[N, G]) as flat float32 rows, from a batch of ``{"own", "global"}`` observations."""
    own, glob = np.asarray(obs["own"], np.float32), np.asarray(obs["global"], np.float32)
    return own.reshape(len(own), -1), glob.reshape(len(glob), -1)


def critic_parts(name: str, observation_space: gym.Space) -> dict[str, gym.Space]:
    """The ``own`` and ``global`` Boxes of a centralized critic's observation space (SpaceError
    naming the module class ``name`` otherwise)."""
    parts = observation_space.spaces if isinstance(observation_space, gym.spaces.Dict) else {}
    if set(parts) != {"own", "global"} or not all(isinstance(s, gym.spaces.Box) for s in parts.values()):
        raise SpaceError(
            f"{name} takes a Dict observation space of two Boxes, 'own' and 'global' "
            f"(GlobalObservationEnv's; got {observation_space})"
        )
    return dict(parts)


class CentralizedCriticMLPModule(MLPModule):
    """Policy on ``own``, value on ``global`` (see the module docstring)."""

    needs_flat_observations = False

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, seed: int | None = 0, **kwargs: Any):
        parts = critic_parts("CentralizedCriticMLPModule", observation_space)
        super().__init__(parts["own"], action_space, seed=seed, **kwargs)
        self.observation_space = observation_space
        rng = np.random.default_rng(None if seed is None else [seed, 1])  # the value head on the global state
        sizes = (gym.spaces.flatdim(parts["global"]), *self.hidden_sizes, 1)
        for layer, (a, b) in enumerate(itertools.pairwise(sizes)):
            gain = 1.0 if layer == len(sizes) - 2 else float(np.sqrt(2))
            self.params[f"vf.{layer}.w"], self.params[f"vf.{layer}.b"] = init_layer(rng, a, b, gain)

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        own, glob = split_observations(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(own), Columns.VF_PREDS: self._mlp("vf", glob)[:, 0]}

    forward_inference = forward_exploration

    def compute_values(self, obs: Any) -> np.ndarray:
        """Value predictions for a batch of ``{"own", "global"}`` observations (the global state only)."""
        return self._mlp("vf", split_observations(obs)[1])[:, 0]
