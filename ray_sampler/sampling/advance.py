"""advance_cursors: every sub-env's cursor after a harvest, with arrays only (no per-sub-env episodes).

A sub-env's cursor (see ``cursors``) ends up in one of four states (``cursor_fates``):

- *going*: its last chunk goes on: the cursor is that chunk's tail (its last observation, up to
  ``h`` steps of lookback);
- *fresh*: a reset came that no transition followed yet: a new episode from that reset;
- *waiting*: its last chunk ended with no reset yet (NEXT_STEP): a placeholder awaiting the reset;
- *kept*: nothing happened to it: its old cursor.

``cursor_heads`` gives the cursors' first observations, ids and ``t_started``; ``lookback_plan``
says where each lookback row comes from (old cursor, new chunk data, or the new chunk's own
lookback); ``assemble_lookback`` and ``cursor_infos`` copy the rows and their infos.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, StepRows, row_offsets
from ray_sampler.sampling.cursors import CursorBatch
from ray_sampler.sampling.rows import gather_rows

__all__ = [
    "CursorFates",
    "LookbackPlan",
    "Resets",
    "advance_cursors",
    "assemble_lookback",
    "cursor_fates",
    "cursor_heads",
    "cursor_infos",
    "lookback_plan",
]

Resets = dict[int, list[tuple[Any, dict]]]
"""Each sub-env's resets in one harvest, in order: (observation, info)."""


@dataclasses.dataclass(frozen=True)
class CursorFates:
    """What a harvest did to each of the N sub-envs' cursors (masks of [N])."""

    last_chunk: np.ndarray
    """The sub-env's last chunk in the harvest, -1 if none."""
    going: np.ndarray
    waiting: np.ndarray
    kept: np.ndarray
    fresh: np.ndarray
    trailing: dict[int, tuple[Any, dict]]
    """The reset each fresh sub-env begins with."""


def cursor_fates(
    col: ColumnarEpisodes | None, num_envs: int, chunk_env: np.ndarray, resets: Resets, used: dict[int, int]
) -> CursorFates:
    """Each sub-env's state after the harvest's chunks (``chunk_env``: each chunk's sub-env, in order;
    ``used``: resets that began a chunk)."""
    last_chunk = np.full(num_envs, -1, np.int64)
    if len(chunk_env):
        last_chunk[chunk_env] = np.arange(len(chunk_env))  # later chunks of a sub-env overwrite earlier
    trailing = {i: events[-1] for i, events in resets.items() if used.get(i, 0) < len(events)}
    has = last_chunk >= 0
    ended = np.zeros(num_envs, dtype=bool)
    if col is not None:
        ended[has] = (col.terminated | col.truncated)[last_chunk[has]]
    fresh = np.zeros(num_envs, dtype=bool)
    fresh[list(trailing)] = True
    return CursorFates(
        last_chunk=last_chunk,
        going=has & ~ended & ~fresh,
        waiting=has & ended & ~fresh,
        kept=~has & ~fresh,
        fresh=fresh,
        trailing=trailing,
    )


def cursor_heads(
    col: ColumnarEpisodes | None, cb: ColumnarEpisodes, fates: CursorFates, *, new_id: Callable[[], str]
) -> tuple[Any, list[str], np.ndarray]:
    """The cursors' (first observations, ids, ``t_started``); fresh ones get new ids in sub-env order."""
    n = len(cb.ids)
    going, waiting, last_chunk, trailing = fates.going, fates.waiting, fates.last_chunk, fates.trailing
    first_obs = gather_rows(cb.data.observations, np.arange(n))
    if col is not None:
        last_row = col.obs_offsets[1:] - 1
        for mask in (going, waiting):
            rows = last_row[last_chunk[mask]]

            def put(out: np.ndarray, src: np.ndarray, mask: np.ndarray = mask, rows: np.ndarray = rows) -> None:
                out[mask] = src[rows]

            tree.map_structure(put, first_obs, col.data.observations)
    if trailing:
        order = sorted(trailing)
        stacked = tree.stack([trailing[i][0] for i in order])
        tree.map_structure(lambda out, src: out.__setitem__(np.array(order), src), first_obs, stacked)
    ids = list(cb.ids)
    t_started = cb.t_started.copy()
    if col is not None:
        for i in np.flatnonzero(going | waiting).tolist():
            ids[i] = col.ids[last_chunk[i]]
    for i in sorted(trailing):
        ids[i] = new_id()
    t_started[fates.fresh | waiting] = 0
    s = last_chunk[going]
    if col is not None and len(s):
        t_started[going] = col.t_started[s] + col.lens[s]
    return first_obs, ids, t_started


@dataclasses.dataclass(frozen=True)
class LookbackPlan:
    """Where each of the new cursors' lookback rows comes from."""

    keep: np.ndarray
    """Lookback length of each new cursor, [N]."""
    from_old: np.ndarray
    """Rows taken from the old cursors' lookback (kept sub-envs), [R]."""
    old_rows: np.ndarray
    """Their rows in the old cursors' lookback."""
    in_data: np.ndarray
    """Of the other rows (from the new chunks): those in the chunks' data, not their lookback."""
    obs_data_rows: np.ndarray
    """Rows of the chunks' data observations, for the rows ``in_data``."""
    step_data_rows: np.ndarray
    """Rows of the chunks' data steps (actions, rewards, ...), for the rows ``in_data``."""
    lookback_rows: np.ndarray
    """Rows of the chunks' own lookback, for the others."""

    @property
    def num_rows(self) -> int:
        return len(self.from_old)


def lookback_plan(col: ColumnarEpisodes | None, cb: ColumnarEpisodes, fates: CursorFates, h: int) -> LookbackPlan:
    """Going sub-envs take their chunk's last ``h`` steps (reaching into the chunk's lookback when
    the chunk is shorter); kept ones keep their old lookback; others have none."""
    n = len(cb.ids)
    kept, going, last_chunk = fates.kept, fates.going, fates.last_chunk
    s = last_chunk[going]
    keep = np.zeros(n, np.int64)
    keep[kept] = cb.lookback_lens[kept]
    if col is not None and len(s):
        keep[going] = np.minimum(h, col.lookback_lens[s] + col.lens[s])
    out_rows = int(keep.sum())
    out_off = row_offsets(keep)
    row_env = np.repeat(np.arange(n), keep)
    back = np.repeat(keep, keep) - (np.arange(out_rows) - np.repeat(out_off[:-1], keep))  # keep..1 per sub-env
    from_old = kept[row_env]
    old_rows = cb.lookback_offsets[row_env[from_old]] + (cb.lookback_lens[row_env[from_old]] - back[from_old])
    from_new = ~from_old
    if col is not None and from_new.any():
        chunk = last_chunk[row_env[from_new]]
        steps = col.lens[chunk]
        in_data = back[from_new] <= steps
        obs_data_rows = (col.obs_offsets[chunk + 1] - 1 - back[from_new])[in_data]
        step_data_rows = (col.step_offsets[chunk + 1] - back[from_new])[in_data]
        lb_rows = (col.lookback_offsets[chunk + 1] - (back[from_new] - steps))[~in_data]
    else:
        in_data = np.zeros(0, bool)
        obs_data_rows = step_data_rows = lb_rows = np.zeros(0, np.int64)
    return LookbackPlan(keep, from_old, old_rows, in_data, obs_data_rows, step_data_rows, lb_rows)


def assemble_lookback(col: ColumnarEpisodes | None, cb: ColumnarEpisodes, plan: LookbackPlan) -> StepRows:
    """The new cursors' lookback columns, rows copied as ``plan`` says (infos left empty: see
    ``cursor_infos``)."""
    from_old, old_rows, in_data = plan.from_old, plan.old_rows, plan.in_data
    from_new = ~from_old
    out_rows = plan.num_rows

    def assemble(old: Any, data: Any, lb: Any, data_rows: np.ndarray) -> Any:
        def leaf(o: np.ndarray, d: np.ndarray | None, lk: np.ndarray | None) -> np.ndarray:
            ref = d if d is not None else o
            out = np.empty((out_rows, *ref.shape[1:]), dtype=ref.dtype)
            out[from_old] = o[old_rows]
            if d is not None and lk is not None and from_new.any():
                sel = np.flatnonzero(from_new)
                out[sel[in_data]] = d[data_rows]
                out[sel[~in_data]] = lk[plan.lookback_rows]
            return out

        if data is None:  # nothing harvested: every row comes from the old cursors
            return tree.map_structure(lambda o: leaf(o, None, None), old)
        if old is None or not len(tree.first_leaf(old)):
            old = tree.map_structure(lambda d: np.zeros((0, *d.shape[1:]), d.dtype), data)
        if lb is None or not len(tree.first_leaf(lb)):
            lb = tree.map_structure(lambda d: np.zeros((0, *d.shape[1:]), d.dtype), data)
        return tree.map_structure(leaf, old, data, lb)

    old_lb = cb.lookback
    new_data = col.data if col is not None else None
    new_lb = col.lookback if col is not None else None

    def column(name: str, data_rows: np.ndarray) -> Any:
        return assemble(
            getattr(old_lb, name),
            getattr(new_data, name) if new_data is not None else None,
            getattr(new_lb, name) if new_lb is not None else None,
            data_rows,
        )

    keys = new_data.extra_model_outputs.keys() if new_data is not None else old_lb.extra_model_outputs.keys()
    return StepRows(
        observations=column("observations", plan.obs_data_rows),
        actions=column("actions", plan.step_data_rows),
        rewards=column("rewards", plan.step_data_rows),
        extra_model_outputs={
            k: assemble(
                old_lb.extra_model_outputs.get(k),
                new_data.extra_model_outputs[k] if new_data is not None else None,
                new_lb.extra_model_outputs[k] if new_lb is not None else None,
                plan.step_data_rows,
            )
            for k in keys
        },
        info_rows=np.zeros(0, np.int64),
        info_values=[],
    )


def cursor_infos(
    col: ColumnarEpisodes | None, cb: ColumnarEpisodes, fates: CursorFates, plan: LookbackPlan
) -> tuple[dict[int, dict], dict[int, dict]]:
    """Sparse infos of the new cursors: their first observation's (by sub-env) and their lookback
    observations' (by lookback row)."""
    old_first = dict(zip(cb.data.info_rows.tolist(), cb.data.info_values))
    old_lb = dict(zip(cb.lookback.info_rows.tolist(), cb.lookback.info_values))
    new_info = dict(zip(col.data.info_rows.tolist(), col.data.info_values)) if col is not None else {}
    new_lb = dict(zip(col.lookback.info_rows.tolist(), col.lookback.info_values)) if col is not None else {}
    first_infos: dict[int, dict] = {}
    obs_offsets = col.obs_offsets if col is not None else None  # once: a property that sums all chunk lengths
    for i in range(len(cb.ids)):
        if fates.kept[i]:
            info = old_first.get(i)
        elif fates.fresh[i]:
            info = fates.trailing[i][1]
        else:
            assert obs_offsets is not None, "a sub-env with a new chunk implies a harvest"
            info = new_info.get(int(obs_offsets[fates.last_chunk[i] + 1] - 1))
        if info:
            first_infos[i] = info
    lb_infos: dict[int, dict] = {}
    for r, old_row in zip(np.flatnonzero(plan.from_old).tolist(), plan.old_rows.tolist()):
        if old_row in old_lb:
            lb_infos[r] = old_lb[old_row]
    from_new = ~plan.from_old
    if from_new.any():
        sel = np.flatnonzero(from_new)
        for r, row in zip(sel[plan.in_data].tolist(), plan.obs_data_rows.tolist()):
            if row in new_info:
                lb_infos[r] = new_info[row]
        for r, row in zip(sel[~plan.in_data].tolist(), plan.lookback_rows.tolist()):
            if row in new_lb:
                lb_infos[r] = new_lb[row]
    return first_infos, lb_infos


def advance_cursors(
    col: ColumnarEpisodes | None,
    cursors: CursorBatch,
    *,
    chunk_env: np.ndarray,
    resets: Resets,
    used: dict[int, int],
    h: int,
    new_id: Callable[[], str],
) -> CursorBatch:
    """Each sub-env's cursor after the chunks ``col`` (None: no transition) of a harvest (see the
    module docstring)."""
    cb = cursors.chunks
    n = len(cb.ids)
    fates = cursor_fates(col, n, chunk_env, resets, used)
    first_obs, ids, t_started = cursor_heads(col, cb, fates, new_id=new_id)
    plan = lookback_plan(col, cb, fates, h)
    lookback = assemble_lookback(col, cb, plan)
    first_infos, lb_infos = cursor_infos(col, cb, fates, plan)
    first_rows = np.array(sorted(first_infos), np.int64)
    lb_info_rows = np.array(sorted(lb_infos), np.int64)
    empty_steps = col if col is not None else cb
    chunks = ColumnarEpisodes(
        ids=ids,
        t_started=t_started,
        lens=np.zeros(n, np.int64),
        lookback_lens=plan.keep,
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
        lookback=dataclasses.replace(
            lookback, info_rows=lb_info_rows, info_values=[lb_infos[r] for r in lb_info_rows.tolist()]
        ),
        observation_space=cb.observation_space,
        action_space=cb.action_space,
    )
    return CursorBatch(chunks, fates.waiting | (cursors.awaiting & fates.kept))
