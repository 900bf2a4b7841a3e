"""TorchActionMaskingModule: a torch MLP policy over the legal actions of a dict observation.

The observation is ``{"observation": ..., "action_mask": [n]}`` (ray_sampler/modules/action_masking.py):
the policy and value MLPs (``TorchMLPModule``'s) read ``observation`` flattened, and the actions the
mask forbids get the logit ``MASKED_LOGIT``, in acting and in the loss alike.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from ray_sampler.data.columns import Columns
from ray_sampler.modules.action_masking import MASKED_LOGIT, check_masked_spaces
from ray_sampler.modules.torch_mlp import TorchMLPModule

__all__ = ["TorchActionMaskingModule"]


class TorchActionMaskingModule(TorchMLPModule):
    """A TorchMLPModule over ``observation`` whose logits the ``action_mask`` masks (see the module docstring)."""

    needs_flat_observations = False

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> None:
        self.num_actions = check_masked_spaces("TorchActionMaskingModule", observation_space, action_space)
        assert isinstance(observation_space, gym.spaces.Dict), "checked by check_masked_spaces"
        super().__init__(observation_space["observation"], action_space, **kwargs)
        self.observation_space = observation_space

    def _policy_input(self, batch: dict[str, Any]) -> torch.Tensor:
        obs: torch.Tensor = batch[Columns.OBS]["observation"]
        return obs.reshape(len(obs), -1).to(torch.float32)

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = super()._forward(batch)
        mask = batch[Columns.OBS]["action_mask"].reshape(len(out[Columns.ACTION_DIST_INPUTS]), -1)
        out[Columns.ACTION_DIST_INPUTS] = out[Columns.ACTION_DIST_INPUTS].masked_fill(mask <= 0, MASKED_LOGIT)
        return out
