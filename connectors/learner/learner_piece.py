"""LearnerPiece, the base of the learner connector pieces, and the helpers they share.

Each learner piece reads the episode chunks through one ColumnarEpisodes packed once per pipeline
call (``columnar_of``, cached in ``shared_data["columnar"]``; the episodes themselves are never
changed) and writes arrays with one row per step into ``batch[module_id]`` (``DEFAULT_MODULE_ID``
for a single module; the key is kept so multi-agent batches can come later). History (previous
actions and rewards, stacked frames) comes from each chunk's lookback (``history_rows``,
``gather_history``); positions before the lookback are filled (the rule is in ``connectors.history``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.connector_v2 import ConnectorV2
from connectors.history import fill_dtype, fill_value
from ray_sampler.data.columnar import ColumnarEpisodes, episodes_to_columnar

__all__ = ["DEFAULT_MODULE_ID", "LearnerPiece", "columnar_of", "gather_history", "history_rows", "step_index"]

DEFAULT_MODULE_ID = "default_policy"


class LearnerPiece(ConnectorV2):
    """A learner piece: writes its columns into ``batch[module_id]``."""

    def __init__(self, *, module_id: str = DEFAULT_MODULE_ID) -> None:
        self.module_id = module_id

    def module_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch[module_id]``, created empty if missing."""
        return batch.setdefault(self.module_id, {})


def columnar_of(episodes: list[Any], shared_data: dict[str, Any] | None) -> ColumnarEpisodes:
    """The chunks packed once per pipeline call (cached in ``shared_data``)."""
    if shared_data is None:
        return episodes_to_columnar(episodes)
    if shared_data.get("columnar_of") is not episodes:  # a shared dict reused for other episodes
        shared_data["columnar"] = episodes_to_columnar(episodes)
        shared_data["columnar_of"] = episodes
    return shared_data["columnar"]


def step_index(col: ColumnarEpisodes) -> tuple[np.ndarray, np.ndarray]:
    """For every step: its chunk and its position in that chunk."""
    chunk = np.repeat(np.arange(col.num_episodes), col.lens)
    return chunk, np.arange(len(chunk)) - col.step_offsets[chunk]


def history_rows(
    col: ColumnarEpisodes, chunk: np.ndarray, k: np.ndarray, shifts: np.ndarray, per_step_obs: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each (step, shift) item lives: data rows, lookback rows, and which exist at all.

    ``shift`` 0 is the step itself (observations) and negative shifts go back in time.
    """
    pos = k[:, None] + shifts[None, :]  # position in the chunk; negative: lookback
    lb_len = col.lookback_lens[chunk][:, None]
    exists = pos >= -lb_len
    in_data = pos >= 0
    offsets = (col.obs_offsets if per_step_obs else col.step_offsets)[chunk][:, None]
    data_rows = offsets + np.maximum(pos, 0)
    lb_rows = col.lookback_offsets[chunk][:, None] + lb_len + np.minimum(pos, -1)
    return np.where(in_data, data_rows, -1), np.where(~in_data & exists, lb_rows, -1), exists


def gather_history(
    data: np.ndarray, lookback: np.ndarray, rows: tuple[np.ndarray, np.ndarray, np.ndarray], fill: float
) -> np.ndarray:
    """The items at ``rows`` (``history_rows``) from ``data`` and ``lookback``; ``fill`` where none exists."""
    data_rows, lb_rows, _ = rows
    dtype = fill_dtype(data.dtype, fill)
    out = np.full((*data_rows.shape, *data.shape[1:]), fill_value(dtype, fill), dtype=dtype)
    use_data, use_lb = data_rows >= 0, lb_rows >= 0
    out[use_data] = data[data_rows[use_data]]
    if use_lb.any():
        out[use_lb] = lookback[lb_rows[use_lb]]
    return out
