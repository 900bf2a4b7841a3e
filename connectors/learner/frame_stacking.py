"""FrameStacking: each step's last few observations, from the chunk's data and lookback."""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.learner.learner_piece import (
    DEFAULT_MODULE_ID,
    LearnerPiece,
    columnar_of,
    gather_history,
    history_rows,
    step_index,
)
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.validate import check_int

__all__ = ["FrameStacking"]


class FrameStacking(LearnerPiece):
    """``obs`` replaced by the last ``num_frames`` observations of each step, oldest first, shape
    [N, num_frames, ...] (per leaf of a Dict/Tuple observation), from the chunk's data and lookback
    (``fill`` before that, see ``connectors.history``); with ``as_next_obs`` the same for
    ``next_obs`` (the seed's trajectory view ``"-50:-1"`` as a piece). Its runner-side twin is
    ``connectors.env_to_module.FrameStackingEnvToModule``."""

    def __init__(
        self, *, num_frames: int = 4, fill: float = 0.0, as_next_obs: bool = False, module_id: str = DEFAULT_MODULE_ID
    ) -> None:
        super().__init__(module_id=module_id)
        self.num_frames = check_int("num_frames", num_frames, minimum=1)
        self.fill, self.as_next_obs = fill, as_next_obs

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
        col = columnar_of(episodes, shared_data)
        chunk, k = step_index(col)
        shift = 1 if self.as_next_obs else 0
        rows = history_rows(col, chunk, k, np.arange(-self.num_frames + 1 + shift, 1 + shift), per_step_obs=True)
        self.module_batch(batch)[Columns.NEXT_OBS if self.as_next_obs else Columns.OBS] = tree.map_structure(
            lambda data, lookback: gather_history(data, lookback, rows, self.fill),
            col.data.observations,
            col.lookback.observations,
        )
        return batch
