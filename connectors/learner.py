"""Learner connector pieces: train batches from whole lists of episode chunks, vectorized.

Each piece reads the chunks through one ColumnarEpisodes packed once per pipeline call
(``shared_data["columnar"]``; the episodes themselves are never changed) and writes arrays with
one row per step into ``batch[module_id]`` (``DEFAULT_MODULE_ID`` for a single module; the key
is kept so multi-agent batches can come later). History (previous actions and rewards, stacked
frames) comes from each chunk's lookback; positions before the lookback are filled.

- ``AddColumnsFromEpisodesToTrainBatch``: obs, actions, rewards, terminateds, truncateds and
  chosen extra model outputs.
- ``AddNextObservationsFromEpisodesToTrainBatch``: next_obs, gathered from the stored
  observations (the observation after each step), never stored twice.
- ``GeneralAdvantageEstimation``: advantages and value targets. A chunk that ends without a
  terminal (cut, or truncated) bootstraps from the module's value of its last observation (the
  "add one timestep and truncate" step), so GAE is right across cuts; a terminal bootstraps 0.
  Values come from the stored observations (through ``shared_data["value_obs_transform"]``,
  which MeanStdFilter sets), not from ``batch["obs"]``: a FrameStacking piece does not reach them.
- ``NStepReturns``: discounted n-step returns within each chunk, the n used and the bootstrap
  observation.
- ``PrevActionsPrevRewards`` and ``FrameStacking``: the seed's trajectory views (``shift=-1``,
  ``shift=[-2,-1]``, ``"-50:-1"``) as pieces.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.connector_v2 import ConnectorV2
from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError

__all__ = [
    "DEFAULT_MODULE_ID",
    "AddColumnsFromEpisodesToTrainBatch",
    "AddNextObservationsFromEpisodesToTrainBatch",
    "FrameStacking",
    "GeneralAdvantageEstimation",
    "NStepReturns",
    "PrevActionsPrevRewards",
    "columnar_of",
    "step_index",
]

DEFAULT_MODULE_ID = "default_policy"


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


def _module_batch(batch: dict[str, Any], module_id: str) -> dict[str, Any]:
    return batch.setdefault(module_id, {})


class _LearnerPiece(ConnectorV2):
    def __init__(self, *, module_id: str = DEFAULT_MODULE_ID) -> None:
        self.module_id = module_id


class AddColumnsFromEpisodesToTrainBatch(_LearnerPiece):
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
        out = _module_batch(batch, self.module_id)
        out[Columns.OBS] = tree.map_structure(lambda a: a[col.obs_offsets[chunk] + k], col.observations)
        out[Columns.ACTIONS] = col.actions
        out["rewards"] = col.rewards
        out["terminateds"] = last & col.terminated[chunk]
        out["truncateds"] = last & col.truncated[chunk]
        for key in self.extra_model_outputs:
            if key not in col.extra_model_outputs:
                raise ConfigError(
                    f"extra model output {key!r} is not in the episodes (they have {sorted(col.extra_model_outputs)})"
                )
            out[key] = col.extra_model_outputs[key]
        return batch


class AddNextObservationsFromEpisodesToTrainBatch(_LearnerPiece):
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
        _module_batch(batch, self.module_id)["next_obs"] = tree.map_structure(
            lambda a: a[col.obs_offsets[chunk] + k + 1], col.observations
        )
        return batch


def _padded(values: np.ndarray, col: ColumnarEpisodes) -> tuple[np.ndarray, np.ndarray]:
    """Steps as a [chunks, max_len] matrix (zero padded) and the mask of real entries."""
    chunk, k = step_index(col)
    width = int(col.lens.max()) if col.num_episodes else 0
    mat = np.zeros((col.num_episodes, width), np.float64)
    mat[chunk, k] = values
    mask = np.zeros((col.num_episodes, width), bool)
    mask[chunk, k] = True
    return mat, mask


class GeneralAdvantageEstimation(_LearnerPiece):
    """``advantages`` and ``value_targets`` (and ``vf_preds`` recomputed) with GAE(gamma, lambda).

    Values come from ``rl_module.compute_values(observations)`` for every observation of every
    chunk in one call; the last observation of a chunk that did not terminate gives its
    bootstrap value.
    """

    def __init__(
        self,
        *,
        gamma: float = 0.99,
        lambda_: float = 0.95,
        standardize_advantages: bool = True,
        module_id: str = DEFAULT_MODULE_ID,
    ) -> None:
        super().__init__(module_id=module_id)
        for name, value in (("gamma", gamma), ("lambda_", lambda_)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"'{name}' must be in [0, 1] (got {value!r})")
        self.gamma, self.lambda_, self.standardize = gamma, lambda_, standardize_advantages

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
        # Values of every stored observation (the bootstrap ones included); an observation transform
        # an earlier piece registered (e.g. MeanStdFilter) applies here too.
        transform = (shared_data or {}).get("value_obs_transform", lambda obs: obs)
        values_all = np.asarray(rl_module.compute_values(transform(col.observations)), np.float64)
        obs_row = col.obs_offsets[chunk] + k
        values = values_all[obs_row]
        terminal = (k == col.lens[chunk] - 1) & col.terminated[chunk]
        next_values = np.where(terminal, 0.0, values_all[obs_row + 1])
        deltas = col.rewards + self.gamma * next_values - values
        advantages = gae(deltas, col, self.gamma * self.lambda_)
        out = _module_batch(batch, self.module_id)
        out[Columns.VF_PREDS] = values
        out["value_targets"] = advantages + values
        if self.standardize and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / max(advantages.std(), 1e-8)
        out["advantages"] = advantages
        return batch


def gae(deltas: np.ndarray, col: ColumnarEpisodes, decay: float) -> np.ndarray:
    """Reverse discounted sums of ``deltas`` within each chunk: A_t = d_t + decay * A_{t+1}."""
    mat, mask = _padded(deltas, col)
    acc = np.zeros(col.num_episodes)
    out = np.zeros_like(mat)
    for t in range(mat.shape[1] - 1, -1, -1):  # over time, vectorized over chunks
        acc = np.where(mask[:, t], mat[:, t] + decay * acc, 0.0)
        out[:, t] = acc
    chunk, k = step_index(col)
    return out[chunk, k]


class NStepReturns(_LearnerPiece):
    """``n_step_returns`` (discounted over up to n steps of the chunk), ``n_step`` (the n used: fewer
    at a chunk's end), ``n_step_terminated`` and ``n_step_next_obs`` (where to bootstrap)."""

    def __init__(self, *, n_step: int = 3, gamma: float = 0.99, module_id: str = DEFAULT_MODULE_ID) -> None:
        super().__init__(module_id=module_id)
        if not isinstance(n_step, int) or n_step < 1:
            raise ConfigError(f"'n_step' must be an int >= 1 (got {n_step!r})")
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"'gamma' must be in [0, 1] (got {gamma!r})")
        self.n_step, self.gamma = n_step, gamma

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
            returns[take] += self.gamma**i * col.rewards[np.flatnonzero(take) + i]
        out = _module_batch(batch, self.module_id)
        out["n_step_returns"] = returns
        out["n_step"] = used
        out["n_step_terminated"] = (used == remaining) & col.terminated[chunk]
        out["n_step_next_obs"] = tree.map_structure(lambda a: a[col.obs_offsets[chunk] + k + used], col.observations)
        return batch


def _history_rows(
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


def _gather_history(
    data: np.ndarray, lookback: np.ndarray, rows: tuple[np.ndarray, np.ndarray, np.ndarray], fill: float
) -> np.ndarray:
    data_rows, lb_rows, exists = rows
    fits = np.asarray(fill).astype(data.dtype) == fill  # keep the data's dtype when the fill fits it
    dtype = data.dtype if bool(np.all(fits)) else np.result_type(data, np.asarray(fill))
    out = np.full((*data_rows.shape, *data.shape[1:]), fill, dtype=dtype)
    use_data, use_lb = data_rows >= 0, lb_rows >= 0
    out[use_data] = data[data_rows[use_data]]
    if use_lb.any():
        out[use_lb] = lookback[lb_rows[use_lb]]
    return out


class PrevActionsPrevRewards(_LearnerPiece):
    """``prev_actions`` [N, n_prev_actions] and ``prev_rewards`` [N, n_prev_rewards]: the steps before
    each step (oldest first), from the chunk's data and lookback; ``fill`` before that."""

    def __init__(
        self, *, n_prev_actions: int = 1, n_prev_rewards: int = 1, fill: float = 0.0, module_id: str = DEFAULT_MODULE_ID
    ) -> None:
        super().__init__(module_id=module_id)
        for name, value in (("n_prev_actions", n_prev_actions), ("n_prev_rewards", n_prev_rewards)):
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"'{name}' must be an int >= 0 (got {value!r})")
        self.n_prev_actions, self.n_prev_rewards, self.fill = n_prev_actions, n_prev_rewards, fill

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
        if self.n_prev_actions and not isinstance(col.actions, np.ndarray):
            raise ConfigError("PrevActionsPrevRewards needs array actions (not a Dict/Tuple space)")
        chunk, k = step_index(col)
        out = _module_batch(batch, self.module_id)
        for name, n, data, lookback in (
            ("prev_actions", self.n_prev_actions, col.actions, col.lookback_actions),
            ("prev_rewards", self.n_prev_rewards, col.rewards, col.lookback_rewards),
        ):
            if n:
                rows = _history_rows(col, chunk, k, np.arange(-n, 0), per_step_obs=False)
                out[name] = _gather_history(np.asarray(data), np.asarray(lookback), rows, self.fill)
        return batch


class FrameStacking(_LearnerPiece):
    """``obs`` replaced by the last ``num_frames`` observations of each step, oldest first, shape
    [N, num_frames, ...], from the chunk's data and lookback (``fill`` before that); with
    ``as_next_obs`` the same for ``next_obs``."""

    def __init__(
        self, *, num_frames: int = 4, fill: float = 0.0, as_next_obs: bool = False, module_id: str = DEFAULT_MODULE_ID
    ) -> None:
        super().__init__(module_id=module_id)
        if not isinstance(num_frames, int) or num_frames < 1:
            raise ConfigError(f"'num_frames' must be an int >= 1 (got {num_frames!r})")
        self.num_frames, self.fill, self.as_next_obs = num_frames, fill, as_next_obs

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
        if not isinstance(col.observations, np.ndarray):
            raise ConfigError("FrameStacking needs array observations (not a Dict/Tuple space)")
        chunk, k = step_index(col)
        shift = 1 if self.as_next_obs else 0
        rows = _history_rows(col, chunk, k, np.arange(-self.num_frames + 1 + shift, 1 + shift), per_step_obs=True)
        _module_batch(batch, self.module_id)["next_obs" if self.as_next_obs else Columns.OBS] = _gather_history(
            col.observations, col.lookback_observations, rows, self.fill
        )
        return batch
