"""MLPModule: a numpy MLP policy (logits, or a Gaussian mean and log-std) and a value head."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.action_masking import action_mask_slice, legal_actions, mask_logits
from ray_sampler.modules.distributions import dist_input_size
from ray_sampler.modules.mlp import forward, init_layer

__all__ = ["MLPModule"]


class MLPModule:
    """A tanh MLP policy (logits, or mean and a state-free log-std) and a separate MLP value head.

    Observations must be flat float vectors (the default env-to-module pipeline flattens
    nested and Discrete observations); the input width is ``gymnasium.spaces.flatdim``.

    Where the observation space is a Dict with an ``action_mask`` over Discrete actions (PettingZoo's
    board games), the input is still the whole flattened dict, mask included, and the actions the mask
    forbids get the logit ``MASKED_LOGIT`` in every forward (``action_mask_slice`` says where the mask
    lies, ``ray_sampler/modules/action_masking.py``); the numpy PPO loss masks the same logits.
    """

    action_mask_slice: slice | None = None
    """Where the action mask lies in the flat input (None: the observations carry none); set per
    instance from the spaces (``action_masking.action_mask_slice``)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        hidden_sizes: tuple[int, ...] = (64, 64),
        seed: int | None = 0,
        initial_log_std: float = 0.0,
    ) -> None:
        if not hidden_sizes or not all(isinstance(h, int) and h >= 1 for h in hidden_sizes):
            raise ConfigError(f"'hidden_sizes' must be a non-empty tuple of ints >= 1 (got {hidden_sizes!r})")
        self.observation_space = observation_space
        self.action_space = action_space
        self.hidden_sizes = tuple(hidden_sizes)
        self._depth = len(self.hidden_sizes) + 1  # layers per head
        n_in = gym.spaces.flatdim(observation_space)
        n_dist = dist_input_size(action_space)
        self.is_gaussian = isinstance(action_space, gym.spaces.Box)
        self.action_mask_slice = action_mask_slice(observation_space, action_space)
        rng = np.random.default_rng(seed)
        self.params: dict[str, np.ndarray] = {}
        for head, n_out, out_gain in (("pi", n_dist // 2 if self.is_gaussian else n_dist, 0.01), ("vf", 1, 1.0)):
            sizes = (n_in, *self.hidden_sizes, n_out)
            for layer, (a, b) in enumerate(itertools.pairwise(sizes)):
                gain = out_gain if layer == len(sizes) - 2 else float(np.sqrt(2))
                self.params[f"{head}.{layer}.w"], self.params[f"{head}.{layer}.b"] = init_layer(rng, a, b, gain)
        if self.is_gaussian:
            self.params["pi.log_std"] = np.full(n_dist // 2, initial_log_std, np.float32)

    def _mlp(self, head: str, x: np.ndarray) -> np.ndarray:
        return forward(self.params, head, x, depth=self._depth)[0]

    def _dist_inputs(self, obs: np.ndarray) -> np.ndarray:
        out = self._mlp("pi", obs)
        if self.action_mask_slice is not None:
            out = mask_logits(out, legal_actions(obs, self.action_mask_slice))
        if self.is_gaussian:
            out = np.concatenate([out, np.broadcast_to(self.params["pi.log_std"], out.shape)], axis=-1)
        return out

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        obs = np.asarray(batch[Columns.OBS], np.float32).reshape(len(batch[Columns.OBS]), -1)
        return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(obs), Columns.VF_PREDS: self._mlp("vf", obs)[:, 0]}

    # The same outputs either way (greedy acting happens in the module-to-env pipeline), so an
    # episode sampled partly with explore=False records the same extra model outputs.
    forward_inference = forward_exploration

    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        """Value predictions for flat observations ``obs[N, D]``."""
        return self._mlp("vf", np.asarray(obs, np.float32).reshape(len(obs), -1))[:, 0]

    def get_state(self) -> dict[str, Any]:
        return {k: v.copy() for k, v in self.params.items()}

    def set_state(self, state: dict[str, Any]) -> None:
        if state.keys() != self.params.keys():
            missing, extra = sorted(self.params.keys() - state.keys()), sorted(state.keys() - self.params.keys())
            raise ValueError(f"MLPModule.set_state: keys differ (missing {missing}, unexpected {extra})")
        for k, v in state.items():
            v = np.asarray(v, np.float32)
            if v.shape != self.params[k].shape:
                raise ValueError(f"MLPModule.set_state: {k!r} must have shape {self.params[k].shape} (got {v.shape})")
            self.params[k] = v.copy()
