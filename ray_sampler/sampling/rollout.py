"""Columnar rollouts: whole vector steps recorded as arrays, cut into episode chunks in bulk.

The EnvRunner's columnar path (truncate mode, default connectors) records one ``StepRecord``
per vector step (O(1) Python work whatever the number of sub-envs), and ``harvest`` turns the
records of a ``sample()`` call into one ColumnarEpisodes with vectorized numpy: transitions in
sub-env-major time order, split into chunks at episode ends.

Between calls each sub-env's ongoing episode is a *cursor*: a zero-length chunk (its next
first observation, id, ``t_started`` and lookback), or a placeholder while a NEXT_STEP vector
env has yet to reset it. The cursors of all sub-envs are one ``CursorBatch`` (a
ColumnarEpisodes of N zero-length chunks), advanced with index arithmetic, not per-sub-env
Python; the episode path turns it into SingleAgentEpisode continuations and back.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import (
    ColumnarEpisodes,
    StepRows,
    columnar_to_episodes,
    episodes_to_columnar,
    row_offsets,
)
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.vector import VectorStep

__all__ = ["CursorBatch", "StepRecord", "awaiting_reset", "harvest"]


@dataclasses.dataclass
class StepRecord:
    """One vector step: what the env did and what the module chose."""

    step: VectorStep
    actions: Any
    extras: dict[str, Any]
    valid: np.ndarray
    """Transitions that belong to this harvest (the step's own mask, less carried ones)."""


def awaiting_reset(id_: str, last_obs: Any) -> SingleAgentEpisode:
    """Placeholder cursor of a sub-env whose reset comes with its next vector step."""
    return SingleAgentEpisode(id_, observations=[last_obs], terminated=True)


def _gather(struct: Any, index: np.ndarray) -> Any:
    return tree.map_structure(lambda a: a[index], struct)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each start ``s`` and length ``n``."""
    total = int(lengths.sum())
    return np.repeat(starts - row_offsets(lengths)[:-1], lengths) + np.arange(total)


@dataclasses.dataclass
class CursorBatch:
    """Every sub-env's cursor: chunk ``i`` of ``chunks`` (zero steps) belongs to sub-env ``i``."""

    chunks: ColumnarEpisodes
    awaiting: np.ndarray
    """Sub-envs whose chunk is a placeholder until a NEXT_STEP reset arrives."""

    @classmethod
    def from_episodes(cls, episodes: list[SingleAgentEpisode]) -> CursorBatch:
        """From zero-step continuations (or done episodes awaiting a reset), one per sub-env."""
        placeholders = [
            SingleAgentEpisode(
                ep.id_,
                observations=[ep.get_observations(-1)],
                observation_space=ep.observation_space,
                action_space=ep.action_space,
            )
            if ep.is_done
            else ep
            for ep in episodes
        ]
        return cls(episodes_to_columnar(placeholders), np.array([ep.is_done for ep in episodes], dtype=bool))

    def to_episodes(self) -> list[SingleAgentEpisode]:
        """List-form SingleAgentEpisode cursors (so the episode path can append to them cheaply)."""
        out = []
        for ep, waiting in zip(columnar_to_episodes(self.chunks), self.awaiting.tolist()):
            if waiting:
                out.append(awaiting_reset(ep.id_, ep.get_observations(-1)))
                continue
            out.append(ep.to_list())
        return out


def harvest(
    records: list[StepRecord], cursors: CursorBatch, *, lookback: int, new_id: Callable[[], str]
) -> tuple[ColumnarEpisodes | None, CursorBatch]:
    """Chunks of the transitions in ``records`` and the cursors after them (see module docstring)."""
    cb = cursors.chunks
    n = len(cb.ids)
    valid = np.stack([r.valid for r in records])  # [K, N]
    env_of, step_of = np.nonzero(valid.T)  # transitions, sub-env-major then time
    resets: dict[int, list[tuple[Any, dict]]] = defaultdict(list)
    for r in records:
        for i, reset in r.step.resets.items():
            resets[i].append(reset)
    m = len(env_of)
    if not m:
        return None, _advance(None, cursors, np.zeros(0, np.int64), resets, defaultdict(int), lookback, new_id)
    pos = np.full((n, len(records)), -1, np.int64)
    pos[env_of, step_of] = np.arange(m)

    def gather_steps(batches: list[Any]) -> Any:
        return tree.map_structure(lambda *xs: np.stack(xs)[step_of, env_of], *batches)

    next_obs = gather_steps([r.step.obs for r in records])
    trans_infos: dict[int, dict] = {}
    for k, r in enumerate(records):
        for i, obs in r.step.final_obs.items():
            if pos[i, k] >= 0:
                _set_row(next_obs, int(pos[i, k]), obs)
        for i, info in r.step.infos.items():
            if pos[i, k] >= 0:
                trans_infos[int(pos[i, k])] = info
    terminated = np.stack([r.step.terminated for r in records])[step_of, env_of]
    truncated = np.stack([r.step.truncated for r in records])[step_of, env_of]
    done = terminated | truncated

    # Chunks: a new one starts at a sub-env's first transition and after every episode end.
    starts = np.ones(m, dtype=bool)
    starts[1:] = (env_of[1:] != env_of[:-1]) | done[:-1]
    chunk_of = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    last = np.append(first[1:], m) - 1
    chunk_env = env_of[first]
    num_chunks = len(first)
    first_of_env = np.ones(num_chunks, dtype=bool)
    first_of_env[1:] = chunk_env[1:] != chunk_env[:-1]
    continues = first_of_env & ~cursors.awaiting[chunk_env]

    # A continuing chunk starts at its cursor (id, t, first observation, lookback); any other
    # chunk at the reset that began its episode.
    cont_env = chunk_env[continues]
    fresh_starts: list[tuple[Any, dict]] = []
    used: dict[int, int] = defaultdict(int)
    for i in chunk_env[~continues].tolist():
        fresh_starts.append(resets[i][used[i]])
        used[i] += 1
    cont_ids = [cb.ids[i] for i in cont_env.tolist()]
    fresh_ids = [new_id() for _ in fresh_starts]
    cont_at = np.cumsum(continues) - 1
    fresh_at = np.cumsum(~continues) - 1
    is_cont = continues.tolist()
    ids = [cont_ids[cont_at[s]] if is_cont[s] else fresh_ids[fresh_at[s]] for s in range(num_chunks)]
    t_started = np.zeros(num_chunks, np.int64)
    t_started[continues] = cb.t_started[cont_env]
    lookback_lens = np.zeros(num_chunks, np.int64)
    lookback_lens[continues] = cb.lookback_lens[cont_env]

    first_obs = _gather(cb.data.observations, np.zeros(num_chunks, np.int64))  # buffer of the right shape
    if len(cont_env):
        tree.map_structure(lambda out, src: out.__setitem__(continues, src[cont_env]), first_obs, cb.data.observations)
    if fresh_starts:
        fresh = tree.stack([o for o, _ in fresh_starts])
        tree.map_structure(lambda out, src: out.__setitem__(~continues, src), first_obs, fresh)

    # Observation rows: each chunk's first observation, then the observation of each transition.
    rows_total = num_chunks + m
    chunk_row = first + np.arange(num_chunks)
    trans_row = np.arange(m) + chunk_of + 1
    observations = tree.map_structure(
        lambda s, t: _interleave(s, t, chunk_row, trans_row, rows_total), first_obs, next_obs
    )
    infos = {int(trans_row[j]): info for j, info in trans_infos.items()}
    cursor_infos = dict(zip(cb.data.info_rows.tolist(), cb.data.info_values))
    for s, i in enumerate(chunk_env.tolist()):
        info = cursor_infos.get(i) if is_cont[s] else fresh_starts[fresh_at[s]][1]
        if info:
            infos[int(chunk_row[s])] = info
    info_rows = np.array(sorted(infos), dtype=np.int64)

    lb_rows = _ranges(cb.lookback_offsets[cont_env], cb.lookback_lens[cont_env])
    lb_rows_old = cb.lookback.info_rows
    lb_mask = np.isin(lb_rows, lb_rows_old)
    lb_old_infos = dict(zip(lb_rows_old.tolist(), cb.lookback.info_values))
    actions = gather_steps([r.actions for r in records])
    rewards = np.stack([r.step.rewards for r in records])[step_of, env_of]
    extras = {k: gather_steps([r.extras[k] for r in records]) for k in records[0].extras}
    col = ColumnarEpisodes(
        ids=ids,
        t_started=t_started,
        lens=last - first + 1,
        lookback_lens=lookback_lens,
        terminated=terminated[last],
        truncated=truncated[last],
        data=StepRows(
            observations=observations,
            actions=actions,
            rewards=rewards,
            extra_model_outputs=extras,
            info_rows=info_rows,
            info_values=[infos[r] for r in info_rows.tolist()],
        ),
        lookback=StepRows(
            observations=_gather(cb.lookback.observations, lb_rows),
            actions=_lookback_like(cb.lookback.actions, lb_rows, actions),
            rewards=_lookback_like(cb.lookback.rewards, lb_rows, rewards),
            extra_model_outputs={
                k: _lookback_like(cb.lookback.extra_model_outputs.get(k), lb_rows, v) for k, v in extras.items()
            },
            info_rows=np.flatnonzero(lb_mask).astype(np.int64),
            info_values=[lb_old_infos[r] for r in lb_rows[lb_mask].tolist()],
        ),
        observation_space=cb.observation_space,
        action_space=cb.action_space,
    )
    return col, _advance(col, cursors, chunk_env, resets, used, lookback, new_id)


def _lookback_like(source: Any, rows: np.ndarray, like: Any) -> Any:
    """``source`` rows, or no rows shaped like ``like`` when the cursors hold none of that field."""
    if source is not None and len(rows) and len(tree.first_leaf(source)):
        return _gather(source, rows)
    return tree.map_structure(lambda a: np.asarray(a)[:0], like)


def _advance(
    col: ColumnarEpisodes | None,
    cursors: CursorBatch,
    chunk_env: np.ndarray,
    resets: dict[int, list],
    used: dict[int, int],
    h: int,
    new_id: Callable[[], str],
) -> CursorBatch:
    """Each sub-env's cursor after a harvest (all arrays, no per-sub-env episode objects):

    - its last chunk went on: the chunk's tail (its last observation, up to ``h`` steps of lookback);
    - a reset came that no transition followed yet: a fresh episode from that reset;
    - its last chunk ended with no reset yet (NEXT_STEP): a placeholder awaiting the reset;
    - nothing happened to it: its old cursor.
    """
    cb = cursors.chunks
    n = len(cb.ids)
    last_chunk = np.full(n, -1, np.int64)
    if len(chunk_env):
        last_chunk[chunk_env] = np.arange(len(chunk_env))  # later chunks of a sub-env overwrite earlier
    trailing = {i: events[-1] for i, events in resets.items() if used[i] < len(events)}
    has = last_chunk >= 0
    ended = np.zeros(n, dtype=bool)
    if col is not None:
        ended[has] = (col.terminated | col.truncated)[last_chunk[has]]
    fresh = np.zeros(n, dtype=bool)
    fresh[list(trailing)] = True
    going = has & ~ended & ~fresh
    waiting = has & ended & ~fresh
    kept = ~has & ~fresh
    s = last_chunk[going]

    # First observations and ids.
    first_obs = _gather(cb.data.observations, np.arange(n))
    cb_lb_off = cb.lookback_offsets
    obs_off = col.obs_offsets if col is not None else None
    if col is not None:
        step_off, lb_off = col.step_offsets, col.lookback_offsets
        last_row = obs_off[1:] - 1
        for mask in (going, waiting):
            rows = last_row[last_chunk[mask]]
            tree.map_structure(lambda out, src: out.__setitem__(mask, src[rows]), first_obs, col.data.observations)
    if trailing:
        order = sorted(trailing)
        stacked = tree.stack([trailing[i][0] for i in order])
        tree.map_structure(lambda out, src: out.__setitem__(np.array(order), src), first_obs, stacked)
    ids = list(cb.ids)
    t_started = cb.t_started.copy()
    for i in np.flatnonzero(going | waiting).tolist():
        ids[i] = col.ids[last_chunk[i]]
    for i in sorted(trailing):
        ids[i] = new_id()
    t_started[fresh | waiting] = 0
    if len(s):
        t_started[going] = col.t_started[s] + col.lens[s]

    # Lookback: going sub-envs take their chunk's last steps; kept ones their old lookback.
    keep = np.zeros(n, np.int64)
    keep[kept] = cb.lookback_lens[kept]
    if len(s):
        keep[going] = np.minimum(h, col.lookback_lens[s] + col.lens[s])
    out_rows = int(keep.sum())
    out_off = row_offsets(keep)
    row_env = np.repeat(np.arange(n), keep)
    back = np.repeat(keep, keep) - (np.arange(out_rows) - np.repeat(out_off[:-1], keep))  # keep..1 per sub-env
    from_old = kept[row_env]
    old_rows = cb_lb_off[row_env[from_old]] + (cb.lookback_lens[row_env[from_old]] - back[from_old])
    g = ~from_old
    if col is not None and g.any():
        chunk = last_chunk[row_env[g]]
        steps = col.lens[chunk]
        in_data = back[g] <= steps
        obs_data_rows = (obs_off[chunk + 1] - 1 - back[g])[in_data]
        step_data_rows = (step_off[chunk + 1] - back[g])[in_data]
        lb_rows = (lb_off[chunk + 1] - (back[g] - steps))[~in_data]
    else:
        in_data = np.zeros(0, bool)
        obs_data_rows = step_data_rows = lb_rows = np.zeros(0, np.int64)

    def assemble(old: Any, data: Any, lb: Any, data_rows: np.ndarray) -> Any:
        """Lookback rows from the old cursors, the new chunks' data, or the chunks' own lookback."""

        def leaf(o: np.ndarray, d: np.ndarray | None, lk: np.ndarray | None) -> np.ndarray:
            ref = d if d is not None else o
            out = np.empty((out_rows, *ref.shape[1:]), dtype=ref.dtype)
            out[from_old] = o[old_rows]
            if d is not None and g.any():
                sel = np.flatnonzero(g)
                out[sel[in_data]] = d[data_rows]
                out[sel[~in_data]] = lk[lb_rows]
            return out

        if col is None:
            return tree.map_structure(lambda o: leaf(o, None, None), old)
        return tree.map_structure(leaf, old, data, lb)

    def lookback_of(old: Any, data: Any, lb: Any, data_rows: np.ndarray) -> Any:
        if data is None:  # nothing harvested: every row comes from the old cursors
            return assemble(old, None, None, data_rows)
        if old is None or not len(tree.first_leaf(old)):
            old = tree.map_structure(lambda d: np.zeros((0, *d.shape[1:]), d.dtype), data)
        if lb is None or not len(tree.first_leaf(lb)):
            lb = tree.map_structure(lambda d: np.zeros((0, *d.shape[1:]), d.dtype), data)
        return assemble(old, data, lb, data_rows)

    new_lb_obs = lookback_of(
        cb.lookback.observations,
        col.data.observations if col else None,
        col.lookback.observations if col else None,
        obs_data_rows,
    )
    new_lb_actions = lookback_of(
        cb.lookback.actions, col.data.actions if col else None, col.lookback.actions if col else None, step_data_rows
    )
    new_lb_rewards = lookback_of(
        cb.lookback.rewards, col.data.rewards if col else None, col.lookback.rewards if col else None, step_data_rows
    )
    keys = col.data.extra_model_outputs.keys() if col is not None else cb.lookback.extra_model_outputs.keys()
    new_lb_extras = {
        k: lookback_of(
            cb.lookback.extra_model_outputs.get(k),
            col.data.extra_model_outputs[k] if col else None,
            col.lookback.extra_model_outputs[k] if col else None,
            step_data_rows,
        )
        for k in keys
    }

    # Infos (sparse dicts): first observation's, then each lookback observation's.
    old_first = dict(zip(cb.data.info_rows.tolist(), cb.data.info_values))
    old_lb = dict(zip(cb.lookback.info_rows.tolist(), cb.lookback.info_values))
    new_info = dict(zip(col.data.info_rows.tolist(), col.data.info_values)) if col is not None else {}
    new_lb = dict(zip(col.lookback.info_rows.tolist(), col.lookback.info_values)) if col is not None else {}
    first_infos: dict[int, dict] = {}
    for i in range(n):
        if kept[i]:
            info = old_first.get(i)
        elif fresh[i]:
            info = trailing[i][1]
        else:
            info = new_info.get(int(obs_off[last_chunk[i] + 1] - 1))
        if info:
            first_infos[i] = info
    lb_infos: dict[int, dict] = {}
    for r, old_row in zip(np.flatnonzero(from_old).tolist(), old_rows.tolist()):
        if old_row in old_lb:
            lb_infos[r] = old_lb[old_row]
    if g.any():
        sel = np.flatnonzero(g)
        for r, row in zip(sel[in_data].tolist(), obs_data_rows.tolist()):
            if row in new_info:
                lb_infos[r] = new_info[row]
        for r, row in zip(sel[~in_data].tolist(), lb_rows.tolist()):
            if row in new_lb:
                lb_infos[r] = new_lb[row]
    first_rows = np.array(sorted(first_infos), np.int64)
    lb_info_rows = np.array(sorted(lb_infos), np.int64)
    empty_steps = col if col is not None else cb
    chunks = ColumnarEpisodes(
        ids=ids,
        t_started=t_started,
        lens=np.zeros(n, np.int64),
        lookback_lens=keep,
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        data=StepRows(
            observations=first_obs,
            actions=tree.map_structure(lambda a: a[:0], empty_steps.data.actions),
            rewards=empty_steps.data.rewards[:0],
            extra_model_outputs={
                k: tree.map_structure(lambda a: a[:0], v) for k, v in empty_steps.data.extra_model_outputs.items()
            },
            info_rows=first_rows,
            info_values=[first_infos[r] for r in first_rows.tolist()],
        ),
        lookback=StepRows(
            observations=new_lb_obs,
            actions=new_lb_actions,
            rewards=new_lb_rewards,
            extra_model_outputs=new_lb_extras,
            info_rows=lb_info_rows,
            info_values=[lb_infos[r] for r in lb_info_rows.tolist()],
        ),
        observation_space=cb.observation_space,
        action_space=cb.action_space,
    )
    return CursorBatch(chunks, waiting | (cursors.awaiting & kept))


def _set_row(struct: Any, j: int, item: Any) -> None:
    if isinstance(struct, dict):
        for k in struct:
            _set_row(struct[k], j, item[k])
    elif isinstance(struct, tuple):
        for part, sub in zip(struct, item):
            _set_row(part, j, sub)
    else:
        struct[j] = item


def _interleave(
    starts: np.ndarray, trans: np.ndarray, start_rows: np.ndarray, trans_rows: np.ndarray, total: int
) -> np.ndarray:
    out = np.empty((total, *trans.shape[1:]), dtype=np.result_type(starts, trans))
    out[start_rows] = starts
    out[trans_rows] = trans
    return out
