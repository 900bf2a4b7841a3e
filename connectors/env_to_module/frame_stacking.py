"""FrameStackingEnvToModule: the last ``num_frames`` observations of each running episode as ``obs``.

The runner-side twin of the learner's ``FrameStacking`` (the seed's trajectory view ``"-3:0"``
for frame stacking): both read the episode and its lookback, fill positions before the
episode's start with ``fill`` (``connectors.history``) and give ``[N, num_frames, ...]``, oldest
first, in the observations' dtype (uint8 frames stay uint8). The episode stores one frame per
step; the stack is built on the fly and never stored.

>>> stack = FrameStackingEnvToModule(num_frames=4)
>>> stack.lookback_steps, stack.learner_piece().num_frames
(3, 4)
>>> stack.recompute_output_observation_space(gym.spaces.Box(0, 255, (2, 2), np.uint8)).shape
(4, 2, 2)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.env_to_module.running_view import EnvToModulePiece
from connectors.learner.frame_stacking import FrameStacking
from ray_sampler.data.columns import Columns
from ray_sampler.validate import check_int

__all__ = ["FrameStackingEnvToModule", "stacked_space"]


def stacked_space(space: gym.Space, num: int) -> gym.Space:
    """The space of ``num`` stacked items of ``space`` (a leading axis on every leaf)."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: stacked_space(s, num) for k, s in space.spaces.items()})
    if isinstance(space, gym.spaces.Tuple):
        return gym.spaces.Tuple(tuple(stacked_space(s, num) for s in space.spaces))
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.MultiDiscrete(np.full(num, space.n), start=np.full(num, space.start), dtype=space.dtype)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return gym.spaces.MultiDiscrete(
            np.stack([space.nvec] * num), start=np.stack([space.start] * num), dtype=space.dtype
        )
    if isinstance(space, gym.spaces.MultiBinary):
        return gym.spaces.MultiBinary([num, *np.atleast_1d(space.n).tolist()])
    if isinstance(space, gym.spaces.Box):
        return gym.spaces.Box(np.stack([space.low] * num), np.stack([space.high] * num), dtype=space.dtype)
    raise TypeError(f"frames of a {type(space).__name__} space cannot be stacked")


class FrameStackingEnvToModule(EnvToModulePiece):
    """``batch["obs"]``: each running episode's last ``num_frames`` observations, oldest first
    (see the module docstring). ``learner_piece()`` is the learner's ``FrameStacking`` with the
    same ``num_frames`` and ``fill``, so ``num_frames`` is set once."""

    def __init__(self, *, num_frames: int = 4, fill: float = 0.0) -> None:
        self.num_frames = check_int("num_frames", num_frames, minimum=1)
        self.fill = fill
        self.lookback_steps = self.num_frames - 1

    def get_config(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this piece (a saved policy's)."""
        return {"num_frames": self.num_frames, "fill": self.fill}

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
        batch[Columns.OBS] = self.running(episodes, shared_data).get_observations(self.num_frames, fill=self.fill)
        return batch

    def learner_piece(self) -> FrameStacking:
        return FrameStacking(num_frames=self.num_frames, fill=self.fill)

    def recompute_output_observation_space(self, observation_space: gym.Space) -> gym.Space:
        return stacked_space(observation_space, self.num_frames)

    def __repr__(self) -> str:
        return f"{self.name}(num_frames={self.num_frames})"
