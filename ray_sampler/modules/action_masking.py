"""Action masking: the helpers the default modules mask with, and modules for masked envs.

PettingZoo's board games (tictactoe, connect four, chess) and many RLlib users' envs observe a
dict ``{"observation": ..., "action_mask": [n]}`` over ``Discrete(n)`` actions, and an illegal
action ends the game or is an error. A masking module gives the actions the mask forbids the logit
``MASKED_LOGIT``: they are never drawn, and have zero probability in the loss (the learner's
log-probabilities and entropy come from the same masked logits).

The default modules (``MLPModule``, ``QModule`` and their torch twins) mask by themselves where
``action_mask_slice`` finds a mask in their observation space: they read the flattened
observation (the whole dict, in gymnasium's flatten layout, as the env-to-module pipeline's
``FlattenObservations`` gives it), and the mask is the slice of it that ``action_mask_slice``
names; an entry > 0 allows its action. ``MaskedRandomModule`` is the random player of such envs
(uniform over the legal actions); ``TorchActionMaskingModule``
(``ray_sampler/modules/torch_action_masking.py``) is a trainable one that reads only
``observation`` as its input.

>>> import gymnasium as gym
>>> space = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (2,)), "action_mask": gym.spaces.MultiBinary(3)})
>>> module = MaskedRandomModule(space, gym.spaces.Discrete(3), seed=0)
>>> out = module.forward_inference({"obs": {"observation": np.zeros((4, 2)), "action_mask": np.array([[0, 1, 0]] * 4)}})
>>> out["actions"].tolist()
[1, 1, 1, 1]
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.errors import SpaceError

__all__ = [
    "MASKED_LOGIT",
    "MaskedRandomModule",
    "action_mask_slice",
    "check_masked_spaces",
    "legal_actions",
    "mask_logits",
]

MASKED_LOGIT = -1e9
"""The logit of a forbidden action: finite (no NaN in a softmax or an entropy), never drawn."""


def action_mask_slice(observation_space: gym.Space, action_space: gym.Space) -> slice | None:
    """Where the action mask lies in a flattened observation of ``observation_space`` (gymnasium's
    layout: a Dict's parts in key order); None where the spaces carry no mask: the observation space
    is not a Dict with an ``action_mask`` key, or the actions are not Discrete. SpaceError where the
    mask is not a Box or MultiBinary of one entry per action.

    >>> box = gym.spaces.Box(0, 1, (2,))
    >>> space = gym.spaces.Dict({"observation": box, "action_mask": gym.spaces.MultiBinary(3)})
    >>> action_mask_slice(space, gym.spaces.Discrete(3))  # the keys sorted: "action_mask" comes first
    slice(0, 3, None)
    >>> action_mask_slice(box, gym.spaces.Discrete(3)) is None
    True
    """
    if not isinstance(observation_space, gym.spaces.Dict) or "action_mask" not in observation_space.spaces:
        return None
    if not isinstance(action_space, gym.spaces.Discrete):
        return None
    mask, num_actions = observation_space["action_mask"], int(action_space.n)
    if not isinstance(mask, (gym.spaces.Box, gym.spaces.MultiBinary)) or gym.spaces.flatdim(mask) != num_actions:
        raise SpaceError(
            f"'action_mask' must be a Box or MultiBinary of {num_actions} entries, one per action (got {mask})"
        )
    start = 0
    for key, space in observation_space.spaces.items():
        if key == "action_mask":
            break
        start += gym.spaces.flatdim(space)
    return slice(start, start + num_actions)


def legal_actions(flat_obs: np.ndarray, mask_slice: slice) -> np.ndarray:
    """Which actions each row of flattened observations ``flat_obs[N, D]`` allows: bool [N, n]."""
    return np.asarray(flat_obs)[:, mask_slice] > 0


def mask_logits(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """``logits[N, n]`` with ``MASKED_LOGIT`` where ``legal[N, n]`` is False (a new array)."""
    return np.where(legal, logits, np.asarray(MASKED_LOGIT, logits.dtype))


def check_masked_spaces(owner: str, observation_space: gym.Space, action_space: gym.Space) -> int:
    """The number of actions, after checking the spaces are a Dict with ``observation`` and an
    ``action_mask`` of that many entries, over ``Discrete`` actions; SpaceError naming ``owner``."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise SpaceError(f"{owner} takes a Discrete action space (got {action_space})")
    keys = set(observation_space.spaces) if isinstance(observation_space, gym.spaces.Dict) else set()
    if not isinstance(observation_space, gym.spaces.Dict) or not {"observation", "action_mask"} <= keys:
        got = observation_space
        raise SpaceError(
            f"{owner} takes a Dict observation space with keys 'observation' and 'action_mask' (got {got})"
        )
    mask = observation_space["action_mask"]
    if gym.spaces.flatdim(mask) != int(action_space.n):
        raise SpaceError(
            f"{owner}: 'action_mask' has {gym.spaces.flatdim(mask)} entries for {int(action_space.n)} actions"
        )
    return int(action_space.n)


class MaskedRandomModule:
    """Uniformly random legal actions (see the module docstring); holds no weights."""

    needs_flat_observations = False

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, seed: int | None = None) -> None:
        self.num_actions = check_masked_spaces("MaskedRandomModule", observation_space, action_space)
        self.observation_space, self.action_space = observation_space, action_space
        self._start = int(action_space.start)  # type: ignore[attr-defined]  # Discrete, checked above
        self._rng = np.random.default_rng(seed)

    def _logits(self, batch: dict[str, Any]) -> np.ndarray:
        mask = np.asarray(batch[Columns.OBS]["action_mask"]).reshape(-1, self.num_actions)
        return np.where(mask > 0, 0.0, MASKED_LOGIT).astype(np.float32)

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        logits = self._logits(batch)
        keys = self._rng.random(logits.shape) + (logits < 0) * 2.0  # the smallest key is a random legal action
        return {Columns.ACTIONS: keys.argmin(axis=1) + self._start}

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._logits(batch)}

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"MaskedRandomModule holds no weights (got keys {sorted(state)})")
