"""Sequences for stateful (recurrent) modules: the plan, each sequence's state_in, time dim and zero padding.

A stateful module trains on sequences of at most ``max_seq_len`` (T) items. ``sequence_plan`` splits
each chunk's steps (with ``bootstrap=True``: its ``len + 1`` observations) into consecutive
sequences, in chunk order then time, so the items of a plan are exactly the rows of the per-step
columns (or of ``data.observations``) in their order. Each sequence gets one ``state_in``, the
module's state before its first item (``sequence_initial_states``); for the sequence starting at
position p of its chunk:

- p > 0: the stored ``state_out`` of step p - 1 of the chunk;
- p == 0 and the chunk has lookback: the ``state_out`` of its last lookback step;
- p == 0, no lookback and ``t_started == 0`` (the episode starts here): the module's initial state;
- otherwise (a continuation without lookback) the state is lost: ConfigError, asking for
  ``episode_lookback_horizon >= 1``.

``add_time_dim`` turns per-item rows into [S, T, ...] (zero padded; ``loss_mask`` is True at real
items) and ``remove_time_dim`` turns them back. Shape suffixes: ``_S`` one row per sequence,
``_ST`` per sequence and time step, ``_N`` one per item of the plan.

>>> from ray_sampler.data.columnar import episodes_to_columnar
>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> ep = SingleAgentEpisode(observations=[0, 1, 2, 3, 4, 5], actions=[0] * 5, rewards=[1.0] * 5)
>>> plan = sequence_plan(episodes_to_columnar([ep]), 2)
>>> plan.start.tolist(), plan.length.tolist()
([0, 2, 4], [2, 2, 1])
>>> add_time_dim(np.arange(5), plan, 2).tolist()
[[0, 1], [2, 3], [4, 0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from connectors.learner.learner_piece import DEFAULT_MODULE_ID, LearnerPiece, columnar_of
from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, row_offsets
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.rl_module import initial_state, is_stateful
from ray_sampler.validate import check_int

__all__ = [
    "AddStatesFromEpisodesToBatch",
    "AddTimeDimToBatchAndZeroPad",
    "SequencePlan",
    "add_time_dim",
    "loss_mask",
    "remove_time_dim",
    "sequence_initial_states",
    "sequence_plan",
    "sequence_values",
]


@dataclasses.dataclass(frozen=True, eq=False)
class SequencePlan:
    """Sequences over the chunks of a ColumnarEpisodes, in chunk order then time."""

    chunk: np.ndarray
    """Each sequence's chunk [S]."""
    start: np.ndarray
    """Each sequence's first position in its chunk [S]."""
    length: np.ndarray
    """Each sequence's number of real items, 1 to max_seq_len [S]."""

    @property
    def num_sequences(self) -> int:
        return len(self.length)

    @property
    def num_items(self) -> int:
        """Items (steps, or observations with ``bootstrap=True``) the sequences cover."""
        return int(self.length.sum())


def sequence_plan(col: ColumnarEpisodes, max_seq_len: int, *, bootstrap: bool = False) -> SequencePlan:
    """Each chunk's steps (``bootstrap``: its observations) cut into sequences of at most ``max_seq_len``."""
    t = check_int("max_seq_len", max_seq_len, minimum=1)
    sizes = col.lens.astype(np.int64) + (1 if bootstrap else 0)
    num_seq = -(-sizes // t)
    chunk = np.repeat(np.arange(col.num_episodes, dtype=np.int64), num_seq)
    start = (np.arange(len(chunk), dtype=np.int64) - row_offsets(num_seq)[chunk]) * t
    return SequencePlan(chunk=chunk, start=start, length=np.minimum(sizes[chunk] - start, t))


def loss_mask(plan: SequencePlan, max_seq_len: int) -> np.ndarray:
    """[S, T] bool: True at each sequence's real items, False at the zero padding."""
    t = check_int("max_seq_len", max_seq_len, minimum=1)
    return np.arange(t)[None, :] < plan.length[:, None]


def add_time_dim(values: Any, plan: SequencePlan, max_seq_len: int) -> Any:
    """Per-item rows (an array or a nested dict of arrays, ``plan.num_items`` rows) as [S, T, ...], zero padded."""
    t = check_int("max_seq_len", max_seq_len, minimum=1)
    if plan.num_sequences and int(plan.length.max()) > t:
        raise ConfigError(f"'max_seq_len' must be >= the plan's longest sequence {int(plan.length.max())} (got {t})")
    seq_N, pos_N = _item_index(plan)

    def pad(leaf: Any) -> np.ndarray:
        leaf = np.asarray(leaf)
        if leaf.ndim == 0 or len(leaf) != len(seq_N):
            raise ConfigError(
                f"add_time_dim: values must have {len(seq_N)} rows, one per item (got shape {leaf.shape})"
            )
        out_ST = np.zeros((plan.num_sequences, t, *leaf.shape[1:]), leaf.dtype)
        out_ST[seq_N, pos_N] = leaf
        return out_ST

    return tree.map_structure(pad, values)


def remove_time_dim(values_ST: Any, plan: SequencePlan) -> Any:
    """The inverse of ``add_time_dim``: [S, T, ...] rows back to [N, ...] (the padding dropped)."""
    seq_N, pos_N = _item_index(plan)
    longest = int(plan.length.max()) if plan.num_sequences else 0

    def unpad(leaf: Any) -> np.ndarray:
        leaf = np.asarray(leaf)
        if leaf.ndim < 2 or leaf.shape[0] != plan.num_sequences or leaf.shape[1] < longest:
            raise ConfigError(
                f"remove_time_dim: values must have shape [{plan.num_sequences}, >= {longest}, ...] (got {leaf.shape})"
            )
        return leaf[seq_N, pos_N]

    return tree.map_structure(unpad, values_ST)


def sequence_initial_states(col: ColumnarEpisodes, plan: SequencePlan, initial: Mapping[str, Any]) -> Any:
    """Each sequence's ``state_in`` (the rules are in the module docstring): the state's structure, arrays [S, ...]."""
    stored = col.data.extra_model_outputs
    if Columns.STATE_OUT not in stored:
        raise ConfigError(
            f"a stateful module needs {Columns.STATE_OUT!r} stored per step in the episodes' "
            f"extra_model_outputs (they have {sorted(stored)})"
        )
    c, p = plan.chunk, plan.start
    lb_lens = col.lookback_lens[c]
    from_data = p > 0
    from_lookback = ~from_data & (lb_lens >= 1)
    from_initial = ~from_data & ~from_lookback & (col.t_started[c] == 0)
    lost = ~(from_data | from_lookback | from_initial)
    if lost.any():
        i = int(c[np.argmax(lost)])
        raise ConfigError(
            f"chunk {i} (id_ {col.ids[i]!r}, t_started={int(col.t_started[i])}) continues an episode without "
            f"lookback, so its state_in is lost: a stateful module needs 'episode_lookback_horizon' >= 1 "
            f"(the chunk has no lookback)"
        )
    data_rows = (col.step_offsets[c] + p - 1)[from_data]
    lb_rows = (col.lookback_offsets[c] + lb_lens - 1)[from_lookback]
    states_out = stored[Columns.STATE_OUT]
    use_initial = bool(from_initial.any())
    if use_initial and _key_paths(initial) != _key_paths(states_out):
        raise ConfigError(
            f"the module's initial state must have the keys of the stored {Columns.STATE_OUT!r} "
            f"({sorted(_key_paths(states_out), key=repr)}; got {sorted(_key_paths(initial), key=repr)})"
        )
    init = initial if use_initial else tree.map_structure(lambda _: None, states_out)

    def gather(data: np.ndarray, lookback: np.ndarray, start: Any) -> np.ndarray:
        out_S = np.zeros((plan.num_sequences, *data.shape[1:]), data.dtype)
        out_S[from_data] = data[data_rows]
        out_S[from_lookback] = lookback[lb_rows]
        if use_initial:
            if np.shape(start) != data.shape[1:]:
                raise ConfigError(
                    f"the module's initial state must have the shape of a stored {Columns.STATE_OUT!r} "
                    f"row {data.shape[1:]} (got {np.shape(start)})"
                )
            out_S[from_initial] = start
        return out_S

    return tree.map_structure(gather, states_out, col.lookback.extra_model_outputs[Columns.STATE_OUT], init)


def sequence_values(
    rl_module: Any,
    col: ColumnarEpisodes,
    max_seq_len: int,
    transform: Callable[[Any], Any] = lambda obs: obs,
) -> np.ndarray:
    """A stateful module's value of every stored observation, in the order of ``col.data.observations``.

    The observations run through the module as sequences (``sequence_plan(..., bootstrap=True)``):
    ``rl_module.compute_values(batch)`` gets ``obs`` [S, T, ...] (from ``transform(observations)``),
    ``state_in`` [S, ...], ``seq_lens`` [S] and ``loss_mask`` [S, T], and returns values [S, T].
    """
    t = check_int("max_seq_len", max_seq_len, minimum=1)
    plan = sequence_plan(col, t, bootstrap=True)
    batch = {
        Columns.OBS: add_time_dim(transform(col.data.observations), plan, t),
        Columns.STATE_IN: sequence_initial_states(col, plan, initial_state(rl_module)),
        Columns.SEQ_LENS: plan.length.copy(),
        Columns.LOSS_MASK: loss_mask(plan, t),
    }
    values_ST = np.asarray(rl_module.compute_values(batch))
    if values_ST.shape != (plan.num_sequences, t):
        raise ConfigError(
            f"a stateful module's compute_values must return values of shape [S, T] = "
            f"[{plan.num_sequences}, {t}] (got {values_ST.shape})"
        )
    return remove_time_dim(values_ST, plan)


class AddStatesFromEpisodesToBatch(LearnerPiece):
    """``state_in``: for a stateful module, the state before each step sequence (one row per sequence).

    The sequences are ``sequence_plan(col, max_seq_len)``'s, the same as AddTimeDimToBatchAndZeroPad's
    with the same ``max_seq_len``. A module that is not stateful gets the batch back unchanged.
    """

    def __init__(self, max_seq_len: int = 20, *, module_id: str = DEFAULT_MODULE_ID) -> None:
        super().__init__(module_id=module_id)
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
        if not is_stateful(rl_module):
            return batch
        col = columnar_of(episodes, shared_data)
        plan = sequence_plan(col, self.max_seq_len)
        self.module_batch(batch)[Columns.STATE_IN] = sequence_initial_states(col, plan, initial_state(rl_module))
        return batch


class AddTimeDimToBatchAndZeroPad(LearnerPiece):
    """For a stateful module: every per-step column as [S, max_seq_len, ...] zero padded, plus
    ``loss_mask`` [S, T] and ``seq_lens`` [S].

    Every column of ``batch[module_id]`` except ``state_in`` (already one row per sequence) must be
    per step: each of its arrays (nested dicts and tuples included) with one row per step of the
    episodes. A column with another leading size (or not an array) raises ConfigError naming it
    rather than being guessed at: run this piece after every piece that writes per-step columns
    (GeneralAdvantageEstimation included), and once. A module that is not stateful gets the batch
    back unchanged.
    """

    def __init__(self, max_seq_len: int = 20, *, module_id: str = DEFAULT_MODULE_ID) -> None:
        super().__init__(module_id=module_id)
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
        if not is_stateful(rl_module):
            return batch
        col = columnar_of(episodes, shared_data)
        plan = sequence_plan(col, self.max_seq_len)
        out = self.module_batch(batch)
        num_steps = col.num_env_steps
        for key, value in out.items():
            leaves = tree.flatten(value)
            if key != Columns.STATE_IN and (not leaves or any(not _has_rows(leaf, num_steps) for leaf in leaves)):
                shapes = [getattr(leaf, "shape", type(leaf).__name__) for leaf in leaves]
                raise ConfigError(
                    f"AddTimeDimToBatchAndZeroPad: column {key!r} must hold arrays with one row per step "
                    f"({num_steps}) (got {shapes}); run it after every piece that writes per-step columns, once"
                )
        for key in [k for k in out if k != Columns.STATE_IN]:
            out[key] = add_time_dim(out[key], plan, self.max_seq_len)
        out[Columns.LOSS_MASK] = loss_mask(plan, self.max_seq_len)
        out[Columns.SEQ_LENS] = plan.length.astype(np.int64)
        return batch


def _item_index(plan: SequencePlan) -> tuple[np.ndarray, np.ndarray]:
    """For every item of the plan: its sequence and its position in that sequence."""
    seq_N = np.repeat(np.arange(plan.num_sequences), plan.length)
    return seq_N, np.arange(len(seq_N)) - row_offsets(plan.length)[seq_N]


def _has_rows(leaf: Any, num_rows: int) -> bool:
    return isinstance(leaf, np.ndarray) and leaf.ndim >= 1 and len(leaf) == num_rows


def _key_paths(struct: Any, prefix: tuple = ()) -> set[tuple]:
    """The paths to a structure's leaves (dict keys, tuple positions), order aside."""
    if isinstance(struct, Mapping):
        return {p for k, v in struct.items() for p in _key_paths(v, (*prefix, k))}
    if isinstance(struct, tuple):
        return {p for i, v in enumerate(struct) for p in _key_paths(v, (*prefix, i))}
    return {prefix}
