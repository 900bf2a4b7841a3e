"""Columnar rollouts: whole vector steps recorded as arrays, cut into episode chunks in bulk.

The EnvRunner's fast path (truncate mode, default connectors) records one ``StepRecord`` per
vector step (O(1) Python work, whatever the number of sub-envs) and ``harvest`` turns the
records of a ``sample()`` call into one ColumnarEpisodes with vectorized numpy: transitions
in sub-env-major time order, split into chunks at episode ends. Each sub-env's ongoing
episode lives between calls as a ``cursor``: a length-0 SingleAgentEpisode continuation (list
form, its lookback the last steps) or, for a sub-env waiting for a NEXT_STEP reset, a done
placeholder. The episode path uses the same cursors, so both paths can take turns.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from ray_sampler import tree
from ray_sampler.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.episode import SingleAgentEpisode
from ray_sampler.lookback import LookbackBuffer, _unstack
from ray_sampler.vector import VectorStep

__all__ = ["StepRecord", "awaiting_reset", "harvest", "is_awaiting_reset"]


@dataclasses.dataclass
class StepRecord:
    """One vector step: what the env did and what the module chose."""

    step: VectorStep
    actions: Any
    extras: dict[str, Any]
    valid: np.ndarray
    """Transitions that belong to this harvest (the step's own mask, less carried ones)."""


def awaiting_reset(id_: str) -> SingleAgentEpisode:
    """Placeholder cursor of a sub-env whose reset comes with its next vector step."""
    return SingleAgentEpisode(id_, observations=[0], terminated=True)


def is_awaiting_reset(cursor: SingleAgentEpisode) -> bool:
    return cursor.is_done


def harvest(
    records: list[StepRecord],
    cursors: list[SingleAgentEpisode],
    *,
    lookback: int,
    new_id: Callable[[], str],
    new_episode: Callable[[Any, dict], SingleAgentEpisode],
) -> ColumnarEpisodes | None:
    """Chunks of the transitions in ``records``; updates ``cursors`` in place (see module docstring)."""
    n = len(cursors)
    valid = np.stack([r.valid for r in records])  # [K, N]
    env_of, step_of = np.nonzero(valid.T)  # transitions, sub-env-major then time
    resets: dict[int, list[tuple[Any, dict]]] = defaultdict(list)
    for r in records:
        for i, reset in r.step.resets.items():
            resets[i].append(reset)
    if not len(env_of):
        for i, events in resets.items():
            cursors[i] = new_episode(*events[-1])
        return None
    m = len(env_of)
    pos = np.full((n, len(records)), -1, np.int64)
    pos[env_of, step_of] = np.arange(m)

    def gather(batches: list[Any]) -> Any:
        return tree.map_structure(lambda *xs: np.stack(xs)[step_of, env_of], *batches)

    next_obs = gather([r.step.obs for r in records])
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
    first_of_env = np.ones(len(first), dtype=bool)
    first_of_env[1:] = chunk_env[1:] != chunk_env[:-1]
    continues = first_of_env & np.array([not is_awaiting_reset(cursors[i]) for i in chunk_env.tolist()], dtype=bool)

    # Where each chunk's first observation comes from: its cursor, or the reset that began it.
    continuing = [cursors[i] for i in chunk_env[continues].tolist()]
    head = episodes_to_columnar(continuing) if continuing else None
    fresh_starts: list[tuple[Any, dict]] = []
    used = defaultdict(int)
    for i in chunk_env[~continues].tolist():
        fresh_starts.append(resets[i][used[i]])
        used[i] += 1
    num_chunks = len(first)
    ids, t_started, lookback_lens = [], np.zeros(num_chunks, np.int64), np.zeros(num_chunks, np.int64)
    start_rows: list[Any] = []
    c = f = 0
    for s, cont in enumerate(continues.tolist()):
        if cont:
            ids.append(head.ids[c])
            t_started[s], lookback_lens[s] = head.t_started[c], head.lookback_lens[c]
            start_rows.append(("head", c))
            c += 1
        else:
            ids.append(new_id())
            start_rows.append(("fresh", f))
            f += 1
    fresh_obs = tree.stack([o for o, _ in fresh_starts]) if fresh_starts else None
    start_sources = [x for x in (head.observations if head else None, fresh_obs) if x is not None]
    start_obs = tree.concat(start_sources)
    offset = len(tree.first_leaf(head.observations)) if head else 0
    start_index = np.array([i if kind == "head" else offset + i for kind, i in start_rows], dtype=np.int64)

    # Observation rows: each chunk's first observation, then the observation of each transition.
    rows_total = num_chunks + m
    chunk_start_row = first + np.arange(num_chunks)
    trans_row = np.arange(m) + chunk_of + 1
    observations = tree.map_structure(
        lambda s, t: _interleave(s[start_index], t, chunk_start_row, trans_row, rows_total), start_obs, next_obs)
    infos = {int(r): info for r, info in zip((trans_row[j] for j in trans_infos), trans_infos.values())}
    head_infos = dict(zip(head.info_rows.tolist(), head.info_values)) if head else {}
    for s, (kind, i) in enumerate(start_rows):
        info = head_infos.get(i) if kind == "head" else fresh_starts[i][1]
        if info:
            infos[int(chunk_start_row[s])] = info
    info_rows = np.array(sorted(infos), dtype=np.int64)
    extras_keys = list(records[0].extras)
    empty = np.zeros(0, np.int64)
    col = ColumnarEpisodes(
        ids=ids,
        t_started=t_started,
        lens=last - first + 1,
        lookback_lens=lookback_lens,
        terminated=terminated[last],
        truncated=truncated[last],
        observations=observations,
        actions=gather([r.actions for r in records]),
        rewards=np.stack([r.step.rewards for r in records])[step_of, env_of],
        extra_model_outputs={k: gather([r.extras[k] for r in records]) for k in extras_keys},
        info_rows=info_rows,
        info_values=[infos[r] for r in info_rows.tolist()],
        lookback_observations=_lookback(head, "lookback_observations", start_obs),
        lookback_actions=_lookback(head, "lookback_actions", records[0].actions),
        lookback_rewards=_lookback(head, "lookback_rewards", records[0].step.rewards),
        lookback_extra_model_outputs={k: _lookback(head, "lookback_extra_model_outputs", v, k)
                                      for k, v in records[0].extras.items()},
        lookback_info_rows=head.lookback_info_rows if head else empty,
        lookback_info_values=head.lookback_info_values if head else [],
        observation_space=cursors[0].observation_space,
        action_space=cursors[0].action_space,
    )
    _advance_cursors(col, cursors, chunk_env, resets, used, lookback, new_id, new_episode)
    return col


def _rows(struct: Any, start: int, stop: int) -> list[Any]:
    """Items ``start:stop`` of a (nested) array, as views of one small copy (nothing pins ``struct``)."""
    if isinstance(struct, np.ndarray):
        return list(struct[start:stop].copy())
    return _unstack(tree.map_structure(lambda a: a[start:stop], struct))


def _set_row(struct: Any, j: int, item: Any) -> None:
    if isinstance(struct, dict):
        for k in struct:
            _set_row(struct[k], j, item[k])
    elif isinstance(struct, tuple):
        for part, sub in zip(struct, item):
            _set_row(part, j, sub)
    else:
        struct[j] = item


def _interleave(starts: np.ndarray, trans: np.ndarray, start_rows: np.ndarray, trans_rows: np.ndarray,
                total: int) -> np.ndarray:
    out = np.empty((total, *trans.shape[1:]), dtype=np.result_type(starts, trans))
    out[start_rows] = starts
    out[trans_rows] = trans
    return out


def _empty_like(batch: Any) -> Any:
    return tree.map_structure(lambda a: np.asarray(a)[:0], batch)


def _lookback(head: ColumnarEpisodes | None, field: str, like: Any, key: str | None = None) -> Any:
    """The cursors' lookback rows of ``field``, or no rows shaped like ``like`` when there are none."""
    if head is not None:
        value = getattr(head, field)
        if key is not None:
            value = value.get(key)
        if value is not None and len(tree.first_leaf(value)):
            return value
    return _empty_like(like)


def _advance_cursors(col: ColumnarEpisodes, cursors: list[SingleAgentEpisode], chunk_env: np.ndarray,
                     resets: dict[int, list], used: dict[int, int], h: int, new_id: Callable[[], str],
                     new_episode: Callable[[Any, dict], SingleAgentEpisode]) -> None:
    """Each sub-env's cursor after the harvest: the tail of its last chunk, a fresh episode from a
    reset that no transition followed yet, or a placeholder awaiting a NEXT_STEP reset."""
    last_chunk = {int(i): s for s, i in enumerate(chunk_env.tolist())}
    for i, events in resets.items():
        if used[i] < len(events):  # a reset with no transition after it (yet)
            cursors[i] = new_episode(*events[-1])
            last_chunk.pop(i, None)
    if not last_chunk:
        return
    infos = dict(zip(col.info_rows.tolist(), col.info_values))
    lb_infos = dict(zip(col.lookback_info_rows.tolist(), col.lookback_info_values))
    obs_off, step_off, lb_off = col.obs_offsets, col.step_offsets, col.lookback_offsets
    for i, s in last_chunk.items():
        if col.terminated[s] or col.truncated[s]:
            cursors[i] = awaiting_reset(col.ids[s])
            continue
        o1, s0, s1, l0, l1 = obs_off[s + 1], step_off[s], step_off[s + 1], lb_off[s], lb_off[s + 1]
        steps, old = int(s1 - s0), int(l1 - l0)
        keep = min(h, old + steps)
        from_data, from_lb = min(keep, steps), keep - min(keep, steps)

        def tail(lb: Any, data: Any, data_end: int, n_data: int, n_lb: int) -> list[Any]:
            return (_rows(lb, l1 - n_lb, l1) if n_lb else []) + _rows(data, data_end - n_data, data_end)

        obs_rows = list(range(int(l1) - from_lb, int(l1))), list(range(int(o1) - from_data - 1, int(o1)))
        cursor = SingleAgentEpisode._from_buffers(
            col.ids[s],
            LookbackBuffer(tail(col.lookback_observations, col.observations, int(o1), from_data + 1, from_lb),
                           lookback=keep, space=col.observation_space),
            LookbackBuffer(tail(col.lookback_actions, col.actions, int(s1), from_data, from_lb), lookback=keep,
                           space=col.action_space),
            LookbackBuffer(tail(col.lookback_rewards, col.rewards, int(s1), from_data, from_lb), lookback=keep),
            LookbackBuffer([lb_infos.get(r) or {} for r in obs_rows[0]] + [infos.get(r) or {} for r in obs_rows[1]],
                           lookback=keep),
            {k: LookbackBuffer(tail(col.lookback_extra_model_outputs[k], v, int(s1), from_data, from_lb),
                               lookback=keep) for k, v in col.extra_model_outputs.items()},
            t_started=int(col.t_started[s]) + steps, terminated=False, truncated=False,
            observation_space=col.observation_space, action_space=col.action_space,
        )
        cursors[i] = cursor
