"""PrevActionsPrevRewards: the actions and rewards before each step, from the chunk's data and lookback."""

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
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.validate import check_int

__all__ = ["PrevActionsPrevRewards"]


class PrevActionsPrevRewards(LearnerPiece):
    """``prev_actions`` [N, n_prev_actions] and ``prev_rewards`` [N, n_prev_rewards]: the steps before
    each step (oldest first), from the chunk's data and lookback; ``fill`` before that (the seed's
    trajectory view ``shift=-1`` or ``shift=[-2,-1]`` as a piece)."""

    def __init__(
        self, *, n_prev_actions: int = 1, n_prev_rewards: int = 1, fill: float = 0.0, module_id: str = DEFAULT_MODULE_ID
    ) -> None:
        super().__init__(module_id=module_id)
        self.n_prev_actions = check_int("n_prev_actions", n_prev_actions, minimum=0)
        self.n_prev_rewards = check_int("n_prev_rewards", n_prev_rewards, minimum=0)
        self.fill = fill

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
        if self.n_prev_actions and not isinstance(col.data.actions, np.ndarray):
            raise ConfigError("PrevActionsPrevRewards needs array actions (not a Dict/Tuple space)")
        chunk, k = step_index(col)
        out = self.module_batch(batch)
        for name, n, data, lookback in (
            (Columns.PREV_ACTIONS, self.n_prev_actions, col.data.actions, col.lookback.actions),
            (Columns.PREV_REWARDS, self.n_prev_rewards, col.data.rewards, col.lookback.rewards),
        ):
            if n:
                rows = history_rows(col, chunk, k, np.arange(-n, 0), per_step_obs=False)
                out[name] = gather_history(np.asarray(data), np.asarray(lookback), rows, self.fill)
        return batch
