"""AddObservationsFromEpisodesToBatch: the latest observation of each episode into the forward batch."""

from __future__ import annotations

from typing import Any

from connectors.connector_v2 import ConnectorV2
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns

__all__ = ["AddObservationsFromEpisodesToBatch"]


class AddObservationsFromEpisodesToBatch(ConnectorV2):
    """``batch["obs"]``: the last observation of each episode, stacked (kept if already set).

    Works on the whole vector of sub-envs at once: when the runner hands over the vector env's
    batched observation in ``shared_data["vector_obs"]`` no per-episode Python work is done.
    """

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
        if Columns.OBS in batch:
            return batch
        vector_obs = (shared_data or {}).get("vector_obs")
        if vector_obs is not None:
            batch[Columns.OBS] = vector_obs
        else:
            batch[Columns.OBS] = tree.stack([ep.get_observations(-1) for ep in episodes])
        return batch
