"""RandomModule: uniformly random actions from the action space, batched."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.modules.action_masking import action_mask_slice, legal_actions

__all__ = ["RandomModule"]


class RandomModule:
    """Uniformly random actions from the action space, batched; holds no weights. It reads only the
    batch size, so it takes observations of any space as they come (no flattening); where the
    observations are dicts with an ``action_mask`` over Discrete actions (PettingZoo's board games),
    it draws among the actions the mask allows, and so it does where the runner has flattened such
    observations (the mask read where ``action_mask_slice`` says it lies)."""

    needs_flat_observations = False

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, seed: int | None = None) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self._space = copy.deepcopy(action_space)  # seeded privately; the runner's space stays as it was
        self._space.seed(seed)
        self._rng = np.random.default_rng(seed)
        # Where a flattened observation (the runner's, for random_actions=True) holds the mask.
        self._mask_slice = action_mask_slice(observation_space, action_space)

    def _actions(self, n: int) -> Any:
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return self._rng.integers(space.start, space.start + space.n, n)
        if n:
            return np.stack([self._space.sample() for _ in range(n)])
        return np.zeros((0, *(space.shape or ())), space.dtype)

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        space = self.action_space
        mask = None
        if isinstance(obs, dict) and "action_mask" in obs and isinstance(space, gym.spaces.Discrete):
            mask = np.asarray(obs["action_mask"]).reshape(-1, int(space.n)) > 0
        elif self._mask_slice is not None and not isinstance(obs, (dict, tuple)):  # flattened by the runner
            mask = legal_actions(np.asarray(obs).reshape(len(obs), -1), self._mask_slice)
        if mask is not None:
            assert isinstance(space, gym.spaces.Discrete), "a mask is read for Discrete actions only"
            keys = self._rng.random(mask.shape) + (~mask) * 2.0  # the smallest key: a random allowed action
            return {Columns.ACTIONS: keys.argmin(axis=1) + int(space.start)}
        return {Columns.ACTIONS: self._actions(len(tree.first_leaf(obs)))}

    forward_exploration = forward_inference

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"RandomModule holds no weights (got keys {sorted(state)})")
