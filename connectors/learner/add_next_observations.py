"""AddNextObservationsFromEpisodesToTrainBatch: the observation each step led to, never stored twice."""

from __future__ import annotations

from typing import Any

from connectors.learner.learner_piece import LearnerPiece, columnar_of, step_index
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns

__all__ = ["AddNextObservationsFromEpisodesToTrainBatch"]


class AddNextObservationsFromEpisodesToTrainBatch(LearnerPiece):
    """Per step: the observation it led to (gathered from the stored observations)."""

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
        self.module_batch(batch)[Columns.NEXT_OBS] = tree.map_structure(
            lambda a: a[col.obs_offsets[chunk] + k + 1], col.data.observations
        )
        return batch
