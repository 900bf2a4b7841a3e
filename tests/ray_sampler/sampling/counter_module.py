"""CounterModule: a stateful module whose state counts the steps of the running episode."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.columns import Columns


class CounterModule:
    """``state_out = state_in + 1`` (initial 0), so at episode step t a correct runner passes
    ``state_in == t``; also outputs ``seen`` (the state_in it got) and ``vf_preds`` (the count) and
    acts 0/1 alternately. ``compute_values`` of a time-dim batch gives state_in + position."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, seed: int | None = 0) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def is_stateful(self) -> bool:
        return True

    def get_initial_state(self) -> dict[str, np.ndarray]:
        return {"count": np.zeros(1, np.float32)}

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        count = np.asarray(batch[Columns.STATE_IN]["count"], np.float32)
        n = len(count)
        return {
            Columns.ACTIONS: (count[:, 0].astype(np.int64) % 2),
            Columns.STATE_OUT: {"count": count + 1},
            Columns.VF_PREDS: count[:, 0].copy(),
            "seen": count[:, 0].copy(),
            Columns.ACTION_LOGP: np.zeros(n, np.float32),
        }

    forward_inference = forward_exploration

    def compute_values(self, batch: dict[str, Any]) -> np.ndarray:
        start = np.asarray(batch[Columns.STATE_IN]["count"], np.float64)[:, 0]
        steps = np.asarray(batch[Columns.OBS]).shape[1]
        return start[:, None] + np.arange(steps)[None, :]

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass
