"""MeanStdFilter: observations normalized by running mean and std, merged exactly across runners.

For array (Box) observations. As an env-to-module piece it normalizes what the module sees (the
episodes keep the raw observations); a learner pipeline applies a copy with ``update=False`` and
the synced state, so training sees the same normalization. It keeps the ``EnvToModulePiece``
contract (it reads only the current observation), so it runs on the runner's vectorized engine.

The filter keeps two sets of running moments: ``global`` (what all runners agreed on at the last
sync) and ``local`` (what this copy saw since). It normalizes with both combined and, when
updating, adds only to ``local``. ``merge_states`` folds every copy's ``local`` into the shared
``global`` with the parallel-variance formula (Chan et al.) and empties the locals, so after any
number of sync rounds ``global`` holds the exact mean and variance of all observations seen,
each counted once.

>>> a, b = MeanStdFilter(), MeanStdFilter()
>>> _ = a(rl_module=None, batch={"obs": np.array([[1.0], [3.0]])}, episodes=[])
>>> _ = b(rl_module=None, batch={"obs": np.array([[5.0]])}, episodes=[])
>>> merged = MeanStdFilter.merge_states([a.get_state(), b.get_state()])
>>> float(merged["global"]["mean"][0]), float(merged["global"]["m2"][0] / merged["global"]["count"])
(3.0, 2.6666666666666665)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.env_to_module.running_view import EnvToModulePiece
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError

__all__ = ["MeanStdFilter", "combine_moments"]

Moments = dict[str, Any]


def _empty() -> Moments:
    return {"count": 0.0, "mean": None, "m2": None}


def combine_moments(a: Moments, b: Moments) -> Moments:
    """The moments of the union of two disjoint sets of samples (parallel variance formula)."""
    if not b["count"]:
        return dict(a)
    if not a["count"]:
        return dict(b)
    if np.shape(a["mean"]) != np.shape(b["mean"]):
        raise ConfigError(
            f"MeanStdFilter: moments of observations of shape {np.shape(a['mean'])} and "
            f"{np.shape(b['mean'])} cannot be merged"
        )
    n = a["count"] + b["count"]
    delta = b["mean"] - a["mean"]
    return {
        "count": n,
        "mean": a["mean"] + delta * (b["count"] / n),
        "m2": a["m2"] + b["m2"] + delta * delta * (a["count"] * b["count"] / n),
    }


def _moments_of(x: np.ndarray) -> Moments:
    mean = x.mean(axis=0)
    return {"count": float(len(x)), "mean": mean, "m2": ((x - mean) ** 2).sum(axis=0)}


class MeanStdFilter(EnvToModulePiece):
    """Normalizes ``batch["obs"]`` to zero mean and unit std (clipped), learning the moments."""

    def __init__(
        self,
        *,
        update: bool = True,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        module_id: str | None = None,
        observation_space: gym.Space | None = None,
    ) -> None:
        if observation_space is not None and not isinstance(observation_space, gym.spaces.Box):
            raise ConfigError(f"MeanStdFilter needs a Box observation space (got {observation_space})")
        self.update, self.clip, self.epsilon, self.module_id = update, clip, epsilon, module_id
        self.global_moments: Moments = _empty()
        self.local_moments: Moments = _empty()

    def get_config(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this piece (a saved policy's; its moments are its state)."""
        return {"update": self.update, "clip": self.clip, "epsilon": self.epsilon, "module_id": self.module_id}

    def normalize(self, obs: Any) -> np.ndarray:
        """``obs`` normalized with all moments known here (no update)."""
        obs = np.asarray(obs, np.float64)
        moments = combine_moments(self.global_moments, self.local_moments)
        if moments["count"] > 1:
            std = np.sqrt(moments["m2"] / moments["count"])
            obs = np.clip((obs - moments["mean"]) / (std + self.epsilon), -self.clip, self.clip)
        return obs.astype(np.float32)

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
        """Env-to-module (``module_id`` None): normalizes ``batch["obs"]``, learning from it. Learner
        (``module_id`` set): normalizes ``batch[module_id]["obs"]`` and ``["next_obs"]`` and hands GAE
        the same normalization (``shared_data["value_obs_transform"]``)."""
        if self.module_id is not None:
            target = batch[self.module_id]
            for key in (Columns.OBS, Columns.NEXT_OBS, Columns.N_STEP_NEXT_OBS):
                if key in target:
                    target[key] = self.normalize(self._checked(target[key]))
            if shared_data is not None:  # after a transform an earlier piece set (e.g. frame stacking)
                before = shared_data.get("value_obs_transform")
                shared_data["value_obs_transform"] = (
                    self.normalize if before is None else lambda obs: self.normalize(before(obs))
                )
            return batch
        if Columns.OBS not in batch:  # user pieces run before the defaults: the current observations
            current = self.running(episodes, shared_data).get_observations(1)
            batch[Columns.OBS] = tree.map_structure(lambda leaf: leaf[:, 0], current)
        obs = self._checked(batch[Columns.OBS])
        if self.update and explore is not False and len(obs):
            self.local_moments = combine_moments(self.local_moments, _moments_of(obs))
        batch[Columns.OBS] = self.normalize(obs)
        return batch

    @staticmethod
    def _checked(obs: Any) -> np.ndarray:
        if isinstance(obs, (dict, tuple)):
            raise ConfigError("MeanStdFilter needs array observations (a Box space), not a Dict/Tuple structure")
        return np.asarray(obs, np.float64)

    def get_state(self) -> dict[str, Any]:
        copy = lambda m: {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in m.items()}  # noqa: E731
        return {"global": copy(self.global_moments), "local": copy(self.local_moments)}

    def set_state(self, state: dict[str, Any]) -> None:
        """Takes ``state``'s moments as agreed (its local part folded in), so copies of one state
        given to several filters are not counted twice by a later merge."""
        self.global_moments = combine_moments(dict(state["global"]), dict(state.get("local", _empty())))
        self.local_moments = _empty()

    @staticmethod
    def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state for every copy: the most complete global moments (a new copy may still hold
        none) plus every copy's local moments; locals emptied."""
        if not states:
            raise ConfigError("MeanStdFilter.merge_states needs at least one state")
        merged = max((s["global"] for s in states), key=lambda g: g["count"])
        for state in states:
            merged = combine_moments(merged, state["local"])
        return {"global": merged, "local": _empty()}

    def reset_state(self) -> None:
        """Forgets every observation seen: both sets of moments emptied."""
        self.global_moments = _empty()
        self.local_moments = _empty()
