"""FilterObservationKeys: keep only some keys of a Dict observation before the module.

The fix for a Dict observation with a leaf a module cannot take (MiniGrid's ``mission`` string
for an MLP): ``env_to_module_connectors=(FilterObservationKeys(["image", "direction"]),)``. The
episodes keep the whole observation; the module is built for the filtered space, and
``learner_piece()`` gives the learner the same filter (``train_ppo`` adds it).

>>> import gymnasium as gym
>>> space = gym.spaces.Dict({"image": gym.spaces.Box(0, 9, (2,)), "mission": gym.spaces.Text(8)})
>>> FilterObservationKeys(["image"]).recompute_output_observation_space(space)
Dict('image': Box(0.0, 9.0, (2,), float32))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from connectors.env_to_module.running_view import EnvToModulePiece
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError

__all__ = ["FilterObservationKeys"]


class FilterObservationKeys(EnvToModulePiece):
    """``batch["obs"]`` with only ``keys`` of the Dict observation (its space sorts them, as gymnasium's Dict does)."""

    def __init__(self, keys: list[str] | tuple[str, ...]) -> None:
        if isinstance(keys, str) or not isinstance(keys, (list, tuple)) or not keys:
            raise ConfigError(f"FilterObservationKeys: 'keys' must be a non-empty list of Dict keys (got {keys!r})")
        if not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
            raise ConfigError(f"FilterObservationKeys: 'keys' must be distinct strings (got {list(keys)!r})")
        self.keys = tuple(keys)

    def get_config(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this piece (a saved policy's)."""
        return {"keys": list(self.keys)}

    def recompute_output_observation_space(self, observation_space: gym.Space) -> gym.Space:
        if not isinstance(observation_space, gym.spaces.Dict):
            raise ConfigError(f"FilterObservationKeys needs a Dict observation space (got {observation_space})")
        missing = [k for k in self.keys if k not in observation_space.spaces]
        if missing:
            raise ConfigError(
                f"FilterObservationKeys: keys {missing} are not in the observation space "
                f"(it has {list(observation_space.spaces)})"
            )
        return gym.spaces.Dict({k: observation_space.spaces[k] for k in self.keys})

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
        obs = batch.get(Columns.OBS)
        if obs is None:  # the first piece: the current observations
            obs = tree.map_structure(lambda a: a[:, 0], self.running(episodes, shared_data).get_observations(1))
        batch[Columns.OBS] = {k: obs[k] for k in self.keys}
        return batch

    def learner_piece(self) -> Any:
        from connectors.learner.observation_maps import FilterObservationKeysLearner

        return FilterObservationKeysLearner(self.keys)
