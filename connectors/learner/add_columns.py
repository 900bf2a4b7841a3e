"""AddColumnsFromEpisodesToTrainBatch: obs, actions, rewards, terminal flags and model outputs per step."""

from __future__ import annotations

from typing import Any

from connectors.learner.learner_piece import DEFAULT_MODULE_ID, LearnerPiece, columnar_of, step_index
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError

__all__ = ["AddColumnsFromEpisodesToTrainBatch"]


class AddColumnsFromEpisodesToTrainBatch(LearnerPiece):
    """Per step: obs, actions, rewards, terminateds, truncateds and the chosen model outputs."""

    def __init__(
        self, extra_model_outputs: tuple[str, ...] = (Columns.ACTION_LOGP,), *, module_id: str = DEFAULT_MODULE_ID
    ) -> None:
        super().__init__(module_id=module_id)
        self.extra_model_outputs = tuple(extra_model_outputs)

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
        last = k == col.lens[chunk] - 1
        out = self.module_batch(batch)
        out[Columns.OBS] = tree.map_structure(lambda a: a[col.obs_offsets[chunk] + k], col.data.observations)
        out[Columns.ACTIONS] = col.data.actions
        out[Columns.REWARDS] = col.data.rewards
        out[Columns.TERMINATEDS] = last & col.terminated[chunk]
        out[Columns.TRUNCATEDS] = last & col.truncated[chunk]
        outputs = col.data.extra_model_outputs
        for key in self.extra_model_outputs:
            if key not in outputs:
                raise ConfigError(f"extra model output {key!r} is not in the episodes (they have {sorted(outputs)})")
            out[key] = outputs[key]
        return batch
