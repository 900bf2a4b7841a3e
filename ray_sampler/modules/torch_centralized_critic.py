"""TorchCentralizedCriticModule: the torch twin of CentralizedCriticMLPModule (MAPPO's module).

Observations are ``{"own": ..., "global": ...}`` (``GlobalObservationEnv``): the policy MLP reads
``own``, the value MLP reads ``global``, as in the numpy module; parameters are named as
``TorchMLPModule``'s (``pi.i.weight``, ``vf.i.weight``, ...), the value head's inputs being the
global state's size. Importing this module imports torch.

>>> import gymnasium as gym, numpy as np
>>> space = gym.spaces.Dict({"own": gym.spaces.Box(-1, 1, (4,)), "global": gym.spaces.Box(-1, 1, (8,))})
>>> m = TorchCentralizedCriticModule(space, gym.spaces.Discrete(2), seed=0)
>>> out = m.forward_exploration({"obs": {"own": np.zeros((3, 4)), "global": np.zeros((3, 8))}})
>>> out["action_dist_inputs"].shape, out["vf_preds"].shape, tuple(m.vf[0].weight.shape)
((3, 2), (3,), (64, 8))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from ray_sampler.data.columns import Columns
from ray_sampler.modules.centralized_critic import critic_parts
from ray_sampler.modules.torch_mlp import TorchMLPModule

__all__ = ["TorchCentralizedCriticModule"]


class TorchCentralizedCriticModule(TorchMLPModule):
    """Policy on ``own``, value on ``global`` (see the module docstring); ``TorchMLPModule``'s options."""

    needs_flat_observations = False

    def _input_sizes(self, observation_space: gym.Space) -> tuple[int, int]:
        parts = critic_parts("TorchCentralizedCriticModule", observation_space)
        return gym.spaces.flatdim(parts["own"]), gym.spaces.flatdim(parts["global"])

    def _policy_input(self, batch: dict[str, Any]) -> torch.Tensor:
        own: torch.Tensor = batch[Columns.OBS]["own"]
        return own.reshape(len(own), -1)

    def _value_input(self, batch: dict[str, Any]) -> torch.Tensor:
        glob: torch.Tensor = batch[Columns.OBS]["global"]
        return glob.reshape(len(glob), -1)
