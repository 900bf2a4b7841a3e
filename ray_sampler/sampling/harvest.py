"""harvest: the vector steps of a sampling call, recorded as arrays, cut into episode chunks in bulk.

The vectorized engine records one ``StepRecord`` per vector step (O(1) Python work whatever the
number of sub-envs); ``harvest`` turns a call's records into one ColumnarEpisodes with vectorized
numpy, in named steps:

1. ``order_transitions``: the transitions in sub-env-major, then time order;
2. ``chunk_bounds``: a chunk starts at a sub-env's first transition and after every episode end;
3. ``chunk_starts``: each chunk's id, ``t_started``, first observation and its info: from the
   sub-env's cursor when it continues an episode, else from the reset that began it;
4. ``interleave_observations`` / ``chunk_infos``: observation rows (each chunk's first, then one
   per transition) and their sparse infos;
5. ``chunk_lookback``: each continuing chunk takes its cursor's lookback;

and then ``advance_cursors`` (module ``advance``) moves every sub-env's cursor past the chunks.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, StepRows
from ray_sampler.sampling.advance import Resets, advance_cursors
from ray_sampler.sampling.cursors import CursorBatch
from ray_sampler.sampling.recorder import StepRecord
from ray_sampler.sampling.rows import concat_ranges, gather_rows, interleave_rows, set_row

__all__ = [
    "ChunkBounds",
    "ChunkStarts",
    "Transitions",
    "chunk_bounds",
    "chunk_infos",
    "chunk_lookback",
    "chunk_starts",
    "harvest",
    "interleave_observations",
    "order_transitions",
    "resets_by_env",
]


@dataclasses.dataclass(frozen=True)
class Transitions:
    """Where the M valid transitions of K records of N sub-envs are, in sub-env-major then time order."""

    env_of: np.ndarray
    """Sub-env of each transition, [M]."""
    step_of: np.ndarray
    """Record (vector step) of each transition, [M]."""
    position: np.ndarray
    """Transition index of (sub-env, record), -1 where that sub-env made none, [N, K]."""
    flat: np.ndarray
    """Row of each transition in the records' batches stacked and flattened ([K * N]), [M]."""

    def gather(self, batches: list[Any]) -> Any:
        """Per-record batches (each [N, ...]) -> the transitions' rows ([M, ...]): per leaf, one
        concatenate (record k's rows at k * N, faster than ``np.stack`` for many small batches) and one take."""
        return tree.map_structure(lambda *xs: np.take(np.concatenate(xs), self.flat, axis=0), *batches)


def order_transitions(records: list[StepRecord], num_envs: int) -> Transitions:
    """The valid transitions of ``records``, ordered by sub-env, then time."""
    valid = np.concatenate([r.valid for r in records]).reshape(len(records), num_envs)  # [K, N]
    env_of, step_of = np.nonzero(valid.T)
    position = np.full((num_envs, len(records)), -1, np.int64)
    position[env_of, step_of] = np.arange(len(env_of))
    return Transitions(env_of, step_of, position, step_of * num_envs + env_of)


def resets_by_env(records: list[StepRecord]) -> Resets:
    """Each sub-env's resets across ``records``, in order: (observation, info)."""
    resets: Resets = defaultdict(list)
    for r in records:
        for i, reset in r.step.resets.items():
            resets[i].append(reset)
    return resets


def next_observations(records: list[StepRecord], order: Transitions) -> tuple[Any, dict[int, dict]]:
    """The observation each transition led to (a sub-env's real last one where it reset in the same
    step) and the transitions' non-empty infos, by transition index."""
    next_obs = order.gather([r.step.obs for r in records])
    infos: dict[int, dict] = {}
    for k, r in enumerate(records):
        for i, obs in r.step.final_obs.items():
            if order.position[i, k] >= 0:
                set_row(next_obs, int(order.position[i, k]), obs)
        for i, info in r.step.infos.items():
            if order.position[i, k] >= 0:
                infos[int(order.position[i, k])] = info
    return next_obs, infos


@dataclasses.dataclass(frozen=True)
class ChunkBounds:
    """The chunks the transitions divide into (C chunks)."""

    first: np.ndarray
    """Each chunk's first transition, [C]."""
    last: np.ndarray
    """Each chunk's last transition, [C]."""
    chunk_of: np.ndarray
    """Each transition's chunk, [M]."""
    chunk_env: np.ndarray
    """Each chunk's sub-env, [C]."""


def chunk_bounds(env_of: np.ndarray, done: np.ndarray) -> ChunkBounds:
    """A chunk starts at a sub-env's first transition and after every episode end.

    >>> b = chunk_bounds(np.array([0, 0, 0, 1]), np.array([False, True, False, False]))
    >>> b.first.tolist(), b.last.tolist(), b.chunk_env.tolist()
    ([0, 2, 3], [1, 2, 3], [0, 0, 1])
    """
    m = len(env_of)
    starts = np.ones(m, dtype=bool)
    starts[1:] = (env_of[1:] != env_of[:-1]) | done[:-1]
    first = np.flatnonzero(starts)
    return ChunkBounds(first, np.append(first[1:], m) - 1, np.cumsum(starts) - 1, env_of[first])


@dataclasses.dataclass(frozen=True)
class ChunkStarts:
    """How each chunk begins: continuing its sub-env's cursor, or fresh from a reset."""

    continues: np.ndarray
    """Whether chunk ``s`` continues its sub-env's cursor, [C]."""
    ids: list[str]
    t_started: np.ndarray
    lookback_lens: np.ndarray
    first_obs: Any
    """Each chunk's first observation, [C, ...]."""
    first_infos: list[dict | None]
    """Each chunk's first observation's info (None or empty: none)."""
    used: dict[int, int]
    """Resets of each sub-env that began a chunk (the rest come after the last transition)."""


def chunk_starts(
    chunk_env: np.ndarray, cursors: CursorBatch, resets: Resets, *, new_id: Callable[[], str]
) -> ChunkStarts:
    """A sub-env's first chunk continues its cursor unless the cursor awaits a reset; every other
    chunk begins at the sub-env's next reset, with a new id."""
    cb = cursors.chunks
    num_chunks = len(chunk_env)
    first_of_env = np.ones(num_chunks, dtype=bool)
    first_of_env[1:] = chunk_env[1:] != chunk_env[:-1]
    continues = first_of_env & ~cursors.awaiting[chunk_env]
    cont_env = chunk_env[continues]
    fresh_starts: list[tuple[Any, dict]] = []
    used: dict[int, int] = defaultdict(int)
    for i in chunk_env[~continues].tolist():
        fresh_starts.append(resets[i][used[i]])
        used[i] += 1
    is_cont = continues.tolist()
    cont_ids = iter([cb.ids[i] for i in cont_env.tolist()])
    fresh_ids = iter([new_id() for _ in fresh_starts])
    ids = [next(cont_ids) if c else next(fresh_ids) for c in is_cont]  # chunk order, each list in turn
    t_started = np.zeros(num_chunks, np.int64)
    t_started[continues] = cb.t_started[cont_env]
    lookback_lens = np.zeros(num_chunks, np.int64)
    lookback_lens[continues] = cb.lookback_lens[cont_env]

    first_obs = gather_rows(cb.data.observations, np.zeros(num_chunks, np.int64))  # buffer of the right shape
    if len(cont_env):
        tree.map_structure(lambda out, src: out.__setitem__(continues, src[cont_env]), first_obs, cb.data.observations)
    if fresh_starts:
        fresh = tree.stack([o for o, _ in fresh_starts])
        tree.map_structure(lambda out, src: out.__setitem__(~continues, src), first_obs, fresh)
    cursor_infos = dict(zip(cb.data.info_rows.tolist(), cb.data.info_values))
    fresh_infos = iter([info for _, info in fresh_starts])
    first_infos = [
        cursor_infos.get(i) if c else next(fresh_infos) for c, i in zip(is_cont, chunk_env.tolist(), strict=True)
    ]
    return ChunkStarts(continues, ids, t_started, lookback_lens, first_obs, first_infos, used)


def interleave_observations(first_obs: Any, next_obs: Any, bounds: ChunkBounds) -> tuple[Any, np.ndarray, np.ndarray]:
    """Observation rows: each chunk's first observation, then the observation of each of its
    transitions; with the row of each chunk's first observation and of each transition's."""
    num_chunks, m = len(bounds.first), len(bounds.chunk_of)
    chunk_row = bounds.first + np.arange(num_chunks)
    trans_row = np.arange(m) + bounds.chunk_of + 1
    observations = tree.map_structure(
        lambda s, t: interleave_rows(s, t, chunk_row, trans_row, num_chunks + m), first_obs, next_obs
    )
    return observations, chunk_row, trans_row


def chunk_infos(
    trans_infos: dict[int, dict], first_infos: list[dict | None], chunk_row: np.ndarray, trans_row: np.ndarray
) -> tuple[np.ndarray, list[dict]]:
    """Sparse infos of the observation rows: (rows, values), rows increasing."""
    infos = {int(trans_row[j]): info for j, info in trans_infos.items()}
    for s, info in enumerate(first_infos):
        if info:
            infos[int(chunk_row[s])] = info
    info_rows = np.array(sorted(infos), dtype=np.int64)
    return info_rows, [infos[r] for r in info_rows.tolist()]


def chunk_lookback(cb: ColumnarEpisodes, cont_env: np.ndarray, actions: Any, rewards: Any, extras: Any) -> StepRows:
    """The continuing chunks' lookback: their cursors' (``cb``) lookback rows, in chunk order;
    columns the cursors lack come empty, shaped like the new steps'."""
    lb_rows = concat_ranges(cb.lookback_offsets[cont_env], cb.lookback_lens[cont_env])
    lb_rows_old = cb.lookback.info_rows
    lb_mask = np.isin(lb_rows, lb_rows_old)
    lb_old_infos = dict(zip(lb_rows_old.tolist(), cb.lookback.info_values))
    return StepRows(
        observations=gather_rows(cb.lookback.observations, lb_rows),
        actions=_lookback_like(cb.lookback.actions, lb_rows, actions),
        rewards=_lookback_like(cb.lookback.rewards, lb_rows, rewards),
        extra_model_outputs={
            k: _lookback_like(cb.lookback.extra_model_outputs.get(k), lb_rows, v) for k, v in extras.items()
        },
        info_rows=np.flatnonzero(lb_mask).astype(np.int64),
        info_values=[lb_old_infos[r] for r in lb_rows[lb_mask].tolist()],
    )


def _lookback_like(source: Any, rows: np.ndarray, like: Any) -> Any:
    """``source`` rows, or no rows shaped like ``like`` when the cursors hold none of that field."""
    if source is not None and len(rows) and len(tree.first_leaf(source)):
        return gather_rows(source, rows)
    return tree.map_structure(lambda a: np.asarray(a)[:0], like)


def harvest(
    records: list[StepRecord], cursors: CursorBatch, *, lookback: int, new_id: Callable[[], str]
) -> tuple[ColumnarEpisodes | None, CursorBatch]:
    """Chunks of the transitions in ``records`` and the cursors after them (see the module docstring)."""
    cb = cursors.chunks
    order = order_transitions(records, len(cb.ids))
    resets = resets_by_env(records)
    if not len(order.env_of):
        empty = np.zeros(0, np.int64)
        return None, advance_cursors(None, cursors, chunk_env=empty, resets=resets, used={}, h=lookback, new_id=new_id)
    next_obs, trans_infos = next_observations(records, order)
    terminated = order.gather([r.step.terminated for r in records])
    truncated = order.gather([r.step.truncated for r in records])
    bounds = chunk_bounds(order.env_of, terminated | truncated)
    starts = chunk_starts(bounds.chunk_env, cursors, resets, new_id=new_id)
    observations, chunk_row, trans_row = interleave_observations(starts.first_obs, next_obs, bounds)
    info_rows, info_values = chunk_infos(trans_infos, starts.first_infos, chunk_row, trans_row)
    actions = order.gather([r.actions for r in records])
    rewards = order.gather([r.step.rewards for r in records])
    extras = {k: order.gather([r.extras[k] for r in records]) for k in records[0].extras}
    col = ColumnarEpisodes(
        ids=starts.ids,
        t_started=starts.t_started,
        lens=bounds.last - bounds.first + 1,
        lookback_lens=starts.lookback_lens,
        terminated=terminated[bounds.last],
        truncated=truncated[bounds.last],
        data=StepRows(
            observations=observations,
            actions=actions,
            rewards=rewards,
            extra_model_outputs=extras,
            info_rows=info_rows,
            info_values=info_values,
        ),
        lookback=chunk_lookback(cb, bounds.chunk_env[starts.continues], actions, rewards, extras),
        observation_space=cb.observation_space,
        action_space=cb.action_space,
    )
    cursors = advance_cursors(
        col, cursors, chunk_env=bounds.chunk_env, resets=resets, used=starts.used, h=lookback, new_id=new_id
    )
    return col, cursors
