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
    ``connectors.env_to_module.FrameStackingEnvToModule``.

    Stacking ``obs`` also stacks what GAE computes values from (``shared_data["value_obs_transform"]``:
    every stored observation with the frames before it, the bootstrap ones included), so a value
    function sees the same inputs as the policy; a transform set by an earlier piece applies first."""

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
        if shared_data is not None and not self.as_next_obs:
            before = shared_data.get("value_obs_transform", lambda obs: obs)
            shared_data["value_obs_transform"] = lambda obs: self.stack_every_observation(
                col, before(obs), before(col.lookback.observations)
            )
        return batch

    def stack_every_observation(self, col: Any, observations: Any, lookback: Any) -> Any:
        """Each of ``observations``' rows (every stored observation of ``col``'s chunks, E + sum(lens)
        rows) with the ``num_frames - 1`` before it (from ``lookback``, ``col``'s lookback
        observations, before a chunk's start): [rows, num_frames, ...] per leaf."""
        per_chunk = col.lens + 1
        chunk = np.repeat(np.arange(col.num_episodes), per_chunk)
        position = np.arange(len(chunk)) - col.obs_offsets[chunk]
        rows = history_rows(col, chunk, position, np.arange(-self.num_frames + 1, 1), per_step_obs=True)
        return tree.map_structure(
            lambda data, lookback: gather_history(data, lookback, rows, self.fill),
            observations,
            lookback,
        )
