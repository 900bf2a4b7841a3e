"""GeneralAdvantageEstimation: advantages and value targets with GAE(gamma, lambda), right across cuts."""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.learner.learner_piece import DEFAULT_MODULE_ID, LearnerPiece, columnar_of, step_index
from connectors.learner.sequences import sequence_values
from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.columns import Columns
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.validate import check_int, check_probability

__all__ = ["GeneralAdvantageEstimation", "gae", "step_values"]


class GeneralAdvantageEstimation(LearnerPiece):
    """``advantages`` and ``value_targets`` (and ``vf_preds`` recomputed) with GAE(gamma, lambda).

    Values come from ``rl_module.compute_values(observations)`` for every observation of every
    chunk in one call; the last observation of a chunk that did not terminate (cut, or truncated)
    gives its bootstrap value (the "add one timestep and truncate" step), so GAE is right across
    cuts; a terminal bootstraps 0. Values come from the stored observations (through
    ``shared_data["value_obs_transform"]``, which MeanStdFilter and FrameStacking set), not from
    ``batch["obs"]``, which holds no bootstrap observation.

    A stateful module gets them as sequences of at most ``max_seq_len`` observations with their
    ``state_in`` (``sequence_values``); its episodes must then hold ``state_out`` per step.
    """

    def __init__(
        self,
        *,
        gamma: float = 0.99,
        lambda_: float = 0.95,
        standardize_advantages: bool = True,
        max_seq_len: int = 20,
        module_id: str = DEFAULT_MODULE_ID,
    ) -> None:
        super().__init__(module_id=module_id)
        self.gamma = check_probability("gamma", gamma)
        self.lambda_ = check_probability("lambda_", lambda_)
        self.standardize = standardize_advantages
        self.max_seq_len = check_int("max_seq_len", max_seq_len, minimum=1)

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
        values, next_values = step_values(rl_module, col, shared_data, self.max_seq_len)
        deltas = col.data.rewards + self.gamma * next_values - values
        advantages = gae(deltas, col, self.gamma * self.lambda_)
        out = self.module_batch(batch)
        out[Columns.VF_PREDS] = values
        out[Columns.VALUE_TARGETS] = advantages + values
        if self.standardize and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / max(advantages.std(), 1e-8)
        out[Columns.ADVANTAGES] = advantages
        return batch


def step_values(
    rl_module: Any, col: ColumnarEpisodes, shared_data: dict[str, Any] | None, max_seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(V(x_t), V(x_{t+1})) for every step of ``col``'s chunks, V(x_{t+1}) 0 after a terminal and the
    bootstrap value after a cut or truncated chunk's last step (see ``GeneralAdvantageEstimation``)."""
    chunk, k = step_index(col)
    # Values of every stored observation (the bootstrap ones included); an observation transform
    # an earlier piece registered (e.g. MeanStdFilter) applies here too.
    transform = (shared_data or {}).get("value_obs_transform", lambda obs: obs)
    if is_stateful(rl_module):
        values_all = np.asarray(sequence_values(rl_module, col, max_seq_len, transform), np.float64)
    else:
        values_all = np.asarray(rl_module.compute_values(transform(col.data.observations)), np.float64)
    obs_row = col.obs_offsets[chunk] + k
    terminal = (k == col.lens[chunk] - 1) & col.terminated[chunk]
    return values_all[obs_row], np.where(terminal, 0.0, values_all[obs_row + 1])


def gae(deltas: np.ndarray, col: ColumnarEpisodes, decay: float | np.ndarray) -> np.ndarray:
    """Reverse discounted sums of ``deltas`` within each chunk: A_t = d_t + decay_t * A_{t+1}
    (``decay``: one number, or one per step, as V-trace's ``gamma * c_t``); A is 0 past a chunk's end."""
    mat, mask = _padded(deltas, col)
    decays = _padded(np.broadcast_to(np.asarray(decay, np.float64), deltas.shape), col)[0]
    acc = np.zeros(col.num_episodes)
    out = np.zeros_like(mat)
    for t in range(mat.shape[1] - 1, -1, -1):  # over time, vectorized over chunks
        acc = np.where(mask[:, t], mat[:, t] + decays[:, t] * acc, 0.0)
        out[:, t] = acc
    chunk, k = step_index(col)
    return out[chunk, k]


def _padded(values: np.ndarray, col: ColumnarEpisodes) -> tuple[np.ndarray, np.ndarray]:
    """Steps as a [chunks, max_len] matrix (zero padded) and the mask of real entries."""
    chunk, k = step_index(col)
    width = int(col.lens.max()) if col.num_episodes else 0
    mat = np.zeros((col.num_episodes, width), np.float64)
    mat[chunk, k] = values
    mask = np.zeros((col.num_episodes, width), bool)
    mask[chunk, k] = True
    return mat, mask
