"""NStepReturns: discounted n-step returns within each chunk, the n used and where to bootstrap."""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.learner.learner_piece import DEFAULT_MODULE_ID, LearnerPiece, columnar_of, step_index
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.validate import check_int, check_probability

__all__ = ["NStepReturns"]


class NStepReturns(LearnerPiece):
    """``n_step_returns`` (discounted over up to n steps of the chunk), ``n_step`` (the n used: fewer
    at a chunk's end), ``n_step_terminated`` and ``n_step_next_obs`` (where to bootstrap)."""

    def __init__(self, *, n_step: int = 3, gamma: float = 0.99, module_id: str = DEFAULT_MODULE_ID) -> None:
        super().__init__(module_id=module_id)
        self.n_step = check_int("n_step", n_step, minimum=1)
        self.gamma = check_probability("gamma", gamma)

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
        remaining = col.lens[chunk] - k
        used = np.minimum(self.n_step, remaining)
        returns = np.zeros(len(chunk))
        for i in range(self.n_step):
            take = i < used
            returns[take] += self.gamma**i * col.data.rewards[np.flatnonzero(take) + i]
        out = self.module_batch(batch)
        out[Columns.N_STEP_RETURNS] = returns
        out[Columns.N_STEP] = used
        out[Columns.N_STEP_TERMINATED] = (used == remaining) & col.terminated[chunk]
        out[Columns.N_STEP_NEXT_OBS] = tree.map_structure(
            lambda a: a[col.obs_offsets[chunk] + k + used], col.data.observations
        )
        return batch
