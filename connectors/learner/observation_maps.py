"""Learner pieces that map every observation the same way: the learner twins of env-to-module
pieces that drop Dict keys (``FilterObservationKeysLearner``) or flatten for a module that asks
for flat input (``FlattenObservationsLearner``).

Each maps the module batch's ``obs``, ``next_obs`` and ``n_step_next_obs`` where present, and
what GAE computes values from (``shared_data["value_obs_transform"]``, after the transform an
earlier piece set), so the module sees in training what it saw acting.

>>> import gymnasium as gym
>>> obs = {"image": np.zeros((2, 3), np.uint8), "mission": np.array(["a", "b"])}
>>> FilterObservationKeysLearner(["image"]).map(obs).keys()
dict_keys(['image'])
>>> FlattenObservationsLearner(gym.spaces.Dict({"d": gym.spaces.Discrete(3)})).map({"d": np.array([2])}).tolist()
[[0.0, 0.0, 1.0]]
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.learner.learner_piece import DEFAULT_MODULE_ID, LearnerPiece
from ray_sampler.data.columns import Columns
from ray_sampler.data.spaces import flatten_batch

__all__ = ["FilterObservationKeysLearner", "FlattenObservationsLearner", "ObservationMap"]


class ObservationMap(LearnerPiece):
    """Base: ``map(obs)`` applied to every observation column of the batch and to GAE's inputs."""

    def map(self, obs: Any) -> Any:
        raise NotImplementedError

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        target = self.module_batch(batch)
        for key in (Columns.OBS, Columns.NEXT_OBS, Columns.N_STEP_NEXT_OBS):
            if key in target:
                target[key] = self.map(target[key])
        if shared_data is not None:
            before = shared_data.get("value_obs_transform")
            shared_data["value_obs_transform"] = self.map if before is None else lambda obs: self.map(before(obs))
        return batch


class FilterObservationKeysLearner(ObservationMap):
    """Keeps only ``keys`` of a Dict observation (``FilterObservationKeys``' twin)."""

    def __init__(self, keys: list[str] | tuple[str, ...], *, module_id: str = DEFAULT_MODULE_ID) -> None:
        super().__init__(module_id=module_id)
        self.keys = tuple(keys)

    def map(self, obs: Any) -> Any:
        return {k: obs[k] for k in self.keys}


class FlattenObservationsLearner(ObservationMap):
    """Observations of ``observation_space`` as flat float32 rows, in gymnasium's layout (the
    runner's ``FlattenObservations``, for a module that asks for flat input)."""

    def __init__(self, observation_space: gym.Space, *, module_id: str = DEFAULT_MODULE_ID) -> None:
        super().__init__(module_id=module_id)
        self.observation_space = observation_space

    def map(self, obs: Any) -> np.ndarray:
        return flatten_batch(self.observation_space, obs)
