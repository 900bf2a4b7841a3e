"""default_env_to_module: user pieces first, then the defaults, flattening only where needed."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.env_to_module import default_env_to_module
from tests.helpers import SPACES


def test_default_pipeline_flattens_only_when_needed() -> None:
    assert [p.name for p in default_env_to_module(gym.spaces.Box(-1, 1, (4,), np.float32))] == [
        "AddObservationsFromEpisodesToBatch"
    ]
    assert [p.name for p in default_env_to_module(SPACES["dict"])] == [
        "AddObservationsFromEpisodesToBatch",
        "FlattenObservations",
    ]


def test_user_pieces_come_first() -> None:
    def user_piece(*, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        return batch

    pipe = default_env_to_module(gym.spaces.Box(-1, 1, (4,), np.float32), (user_piece,))
    assert pipe.name == "EnvToModulePipeline"
    assert pipe[0] is user_piece and len(pipe) == 2
