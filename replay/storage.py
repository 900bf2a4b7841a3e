"""EpisodeStorage: stored episode chunks in growing columnar arrays, evicted as whole episodes.

Layout: every added chunk becomes a *segment*: its ``len + 1`` observations in ``obs`` rows and
its ``len`` steps (action, reward, model outputs) in step rows, so a transition's next
observation is simply the next ``obs`` row (gathered when sampled, never stored twice).
Segments of one episode are linked in time order; a chunk that continues a stored episode is
checked (same ``id_``, ``t_started`` equal to the episode's ``t``, its first observation equal
to the stored last one, the episode not done) and its lookback dropped, since the stored steps
already hold it; a chunk whose episode is not stored (new, or evicted) keeps its lookback.
``add`` is atomic: one bad chunk and nothing changes. Capacity counts env steps (lookback
never counts), optionally bytes too; the oldest whole episodes go first. Dead rows are
reclaimed by compaction once they pass a quarter of the live ones (or of ``capacity_bytes``).
``capacity_bytes`` bounds the stored steps' own bytes (observation, action, reward, model
outputs); allocation adds growth room and lookback rows on top.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, StepRows
from ray_sampler.errors import ReplayError
from replay.rows import Rows, equal_rows, remap_rows

__all__ = ["EpisodeStorage", "StoredEpisode"]


@dataclasses.dataclass
class StoredEpisode:
    """Bookkeeping of one stored episode: its segments and where it stands."""

    id_: str
    first_segment: int
    last_segment: int
    t_started: int
    """Global timestep of the first stored step."""
    t: int
    """Global timestep after the last stored step."""
    num_steps: int
    order: int
    """Insertion counter: sampling and eviction follow it, whatever the physical layout."""
    terminated: bool = False
    truncated: bool = False

    @property
    def is_done(self) -> bool:
        return self.terminated or self.truncated


class EpisodeStorage:
    """Episode chunks in columnar arrays (see the module docstring)."""

    def __init__(self, *, capacity_env_steps: int, capacity_bytes: int | None = None) -> None:
        if not isinstance(capacity_env_steps, int) or isinstance(capacity_env_steps, bool) or capacity_env_steps < 1:
            raise ReplayError(f"'capacity_env_steps' must be an int >= 1 (got {capacity_env_steps!r})")
        if capacity_bytes is not None and (
            not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool) or capacity_bytes < 1
        ):
            raise ReplayError(f"'capacity_bytes' must be an int >= 1 or None (got {capacity_bytes!r})")
        self.capacity_env_steps = capacity_env_steps
        self.capacity_bytes = capacity_bytes
        self.obs, self.actions, self.rewards = Rows(), Rows(), Rows()
        self.extras: dict[str, Rows] | None = None
        self.lb_obs, self.lb_actions, self.lb_rewards = Rows(), Rows(), Rows()
        self.lb_extras: dict[str, Rows] = {}
        self.infos: dict[int, dict] = {}
        self.lb_infos: dict[int, dict] = {}
        # Segment table: one entry per stored chunk; dead segments keep their slot until compaction.
        self.seg_obs = np.zeros(0, np.int64)
        self.seg_step = np.zeros(0, np.int64)
        self.seg_len = np.zeros(0, np.int64)
        self.seg_lb = np.zeros(0, np.int64)
        self.seg_lb_len = np.zeros(0, np.int64)
        self.seg_next = np.zeros(0, np.int64)
        self.seg_t = np.zeros(0, np.int64)
        self.seg_prev = np.zeros(0, np.int64)
        self.seg_order = np.zeros(0, np.int64)
        self.seg_alive = np.zeros(0, bool)
        self.seg_episode: list[str] = []
        self.episodes: dict[str, StoredEpisode] = {}  # insertion order: oldest first
        self.priorities: np.ndarray | None = None
        """Per step row (prioritized buffers only): the row's priority; 0 once evicted."""
        self.new_priority = 1.0
        self.order_to_id: dict[int, str] = {}
        self.num_compactions = 0
        self.num_steps = 0
        self.version = 0
        self._next_order = 0
        self.num_evicted_episodes = 0
        self.num_evicted_steps = 0
        self._live_obs_rows = 0

    # ---------------------------------------------------------------- adding
    def add(self, col: ColumnarEpisodes) -> int:
        """Stores the chunks of ``col`` (all or none); returns how many of their env steps are still
        stored after eviction (an episode longer than the capacity is evicted on arrival)."""
        col.validate()
        plan = self._plan(col)
        if not plan:
            return 0
        snapshot = self._snapshot({col.ids[i] for i, _ in plan})
        try:
            self._apply(col, plan)
        except Exception:
            self._restore(snapshot)  # checked up front, but nothing half-written may stay
            raise
        self._evict()
        self.version += 1
        return sum(int(col.lens[i]) for i, _ in plan if col.ids[i] in self.episodes)

    def _snapshot(self, touched: set[str]) -> dict[str, Any]:
        """What ``_restore`` needs to undo an add of the episodes ``touched``. Arrays are replaced, not
        written, before any in-place change; only the touched episodes' records are copied."""
        rows = {name: (r, r.rows, r.leaves, r.spec) for name, r in self._all_rows().items()}
        tables = {k: v for k, v in vars(self).items() if k.startswith("seg_") and k != "seg_episode"}
        episodes = (
            dict(self.episodes),
            {k: dataclasses.replace(self.episodes[k]) for k in touched if k in self.episodes},
        )
        return {
            "rows": rows,
            "tables": tables,
            "episodes": episodes,
            "num_segments": len(self.seg_episode),
            "extras": self.extras,
            "lb_extras": dict(self.lb_extras),
            "infos": dict(self.infos),
            "lb_infos": dict(self.lb_infos),
            "counters": (self.num_steps, self._live_obs_rows, self._next_order, dict(self.order_to_id)),
            "priorities": self.priorities,
        }

    def _restore(self, snap: dict[str, Any]) -> None:
        for r, n, leaves, spec in snap["rows"].values():
            r.rows, r.leaves, r.spec = n, leaves, spec
        for k, v in snap["tables"].items():
            setattr(self, k, v)
        self.episodes, records = snap["episodes"]
        self.episodes.update(records)  # the touched records as they were
        del self.seg_episode[snap["num_segments"] :]
        self.extras, self.lb_extras = snap["extras"], snap["lb_extras"]
        self.infos, self.lb_infos, self.priorities = snap["infos"], snap["lb_infos"], snap["priorities"]
        self.num_steps, self._live_obs_rows, self._next_order, self.order_to_id = snap["counters"]

    def _all_rows(self) -> dict[str, Rows]:
        out = {
            "obs": self.obs,
            "actions": self.actions,
            "rewards": self.rewards,
            "lb_obs": self.lb_obs,
            "lb_actions": self.lb_actions,
            "lb_rewards": self.lb_rewards,
        }
        out.update({f"extras.{k}": r for k, r in (self.extras or {}).items()})
        out.update({f"lb_extras.{k}": r for k, r in self.lb_extras.items()})
        return out

    def _plan(self, col: ColumnarEpisodes) -> list[tuple[int, bool]]:
        """(chunk, continues a stored episode) for every chunk with steps; raises before any change."""
        keys = set(col.data.extra_model_outputs)
        if self.extras is not None and col.num_env_steps and keys != set(self.extras):
            raise ReplayError(
                f"chunks must carry the stored extra_model_outputs keys {sorted(self.extras)} (got {sorted(keys)})"
            )
        obs_off = col.obs_offsets
        pending: dict[str, tuple[int, bool, Any]] = {}  # id -> (t, is_done, last obs) after earlier chunks
        plan = []
        for i, id_ in enumerate(col.ids):
            if not col.lens[i]:
                continue
            stored = self.episodes.get(id_)
            if id_ in pending:
                t, done, last_obs = pending[id_]
            elif stored is not None:
                t, done = stored.t, stored.is_done
                seg = stored.last_segment
                last_obs = self.obs.gather(np.array([self.seg_obs[seg] + self.seg_len[seg]]))
            else:
                t = done = last_obs = None
            first_obs = tree.map_structure(lambda a: a[obs_off[i] : obs_off[i] + 1], col.data.observations)
            if t is not None:
                where = f"chunk {i} (id_ {id_!r})"
                if done:
                    raise ReplayError(f"{where} continues an episode that is already done; nothing was added")
                if int(col.t_started[i]) != t:
                    raise ReplayError(
                        f"{where} starts at t={int(col.t_started[i])} but the stored episode is at "
                        f"t={t} (a gap or a duplicate); nothing was added"
                    )
                if not equal_rows(first_obs, last_obs):
                    raise ReplayError(
                        f"{where} does not start with the stored episode's last observation; nothing was added"
                    )
            last = tree.map_structure(lambda a: a[obs_off[i + 1] - 1 : obs_off[i + 1]], col.data.observations)
            pending[id_] = (int(col.t_started[i]) + int(col.lens[i]), bool(col.terminated[i] or col.truncated[i]), last)
            plan.append((i, t is not None))
        if plan:
            self._check_columns(col, plan)
        return plan

    def _check_columns(self, col: ColumnarEpisodes, plan: list[tuple[int, bool]]) -> None:
        """Every column's structure, shape and dtype, before anything is written."""
        self.obs.check(col.data.observations, "observations")
        self.actions.check(col.data.actions, "actions")
        self.rewards.check(col.data.rewards, "rewards")
        for k, rows in (self.extras or {}).items():
            rows.check(col.data.extra_model_outputs[k], f"extra_model_outputs[{k!r}]")
        if any(not cont and col.lookback_lens[i] for i, cont in plan):
            for rows, data, stored, name in (
                (self.lb_obs, col.lookback.observations, self.obs, "lookback observations"),
                (self.lb_actions, col.lookback.actions, self.actions, "lookback actions"),
                (self.lb_rewards, col.lookback.rewards, self.rewards, "lookback rewards"),
            ):
                rows.check(data, name)
                stored.check(data, name)  # lookback rows sit beside data rows in sampled chunks
            for k, rows in self.lb_extras.items():
                rows.check(col.lookback.extra_model_outputs[k], f"lookback extra_model_outputs[{k!r}]")

    def _apply(self, col: ColumnarEpisodes, plan: list[tuple[int, bool]]) -> None:
        base_obs = self.obs.append(col.data.observations, "observations")
        base_step = self.actions.append(col.data.actions, "actions")
        if self.priorities is not None:
            grown = np.zeros(max(len(self.priorities), self.actions.rows), np.float64)
            grown[: len(self.priorities)] = self.priorities
            grown[base_step : self.actions.rows] = self.new_priority
            self.priorities = grown
        self.rewards.append(col.data.rewards, "rewards")
        if self.extras is None:
            self.extras = {k: Rows() for k in col.data.extra_model_outputs}
            self.lb_extras = {k: Rows() for k in col.data.extra_model_outputs}
        for k, rows in self.extras.items():
            rows.append(col.data.extra_model_outputs[k], f"extra_model_outputs[{k!r}]")
        for r, info in zip(col.data.info_rows.tolist(), col.data.info_values):
            self.infos[base_obs + r] = info
        obs_off, step_off, lb_off = col.obs_offsets, col.step_offsets, col.lookback_offsets
        # Lookback rows are kept only for chunks that begin a stored episode.
        new_chunks = [i for i, continues in plan if not continues and col.lookback_lens[i]]
        lb_index = np.concatenate([np.arange(lb_off[i], lb_off[i + 1]) for i in new_chunks]) if new_chunks else None
        lb_base: dict[int, int] = {}
        if lb_index is not None:
            base = self.lb_obs.append(tree.map_structure(lambda a: a[lb_index], col.lookback.observations), "lookback")
            self.lb_actions.append(tree.map_structure(lambda a: a[lb_index], col.lookback.actions), "lookback")
            self.lb_rewards.append(col.lookback.rewards[lb_index], "lookback")
            for k, rows in self.lb_extras.items():
                rows.append(tree.map_structure(lambda a: a[lb_index], col.lookback.extra_model_outputs[k]), "lookback")
            row_of = {int(old): base + j for j, old in enumerate(lb_index.tolist())}
            for r, info in zip(col.lookback.info_rows.tolist(), col.lookback.info_values):
                if r in row_of:
                    self.lb_infos[row_of[r]] = info
            at = base
            for i in new_chunks:
                lb_base[i] = at
                at += int(col.lookback_lens[i])
        n0 = len(self.seg_len)
        count = len(plan)
        index = np.array([i for i, _ in plan], np.int64)
        self.seg_obs = np.concatenate([self.seg_obs, base_obs + obs_off[index]])
        self.seg_step = np.concatenate([self.seg_step, base_step + step_off[index]])
        self.seg_len = np.concatenate([self.seg_len, col.lens[index]])
        self.seg_lb = np.concatenate([self.seg_lb, np.array([lb_base.get(i, 0) for i, _ in plan], np.int64)])
        self.seg_lb_len = np.concatenate(
            [self.seg_lb_len, np.array([int(col.lookback_lens[i]) if i in lb_base else 0 for i, _ in plan], np.int64)]
        )
        self.seg_next = np.concatenate([self.seg_next, np.full(count, -1, np.int64)])
        self.seg_t = np.concatenate([self.seg_t, col.t_started[index]])
        self.seg_prev = np.concatenate([self.seg_prev, np.full(count, -1, np.int64)])
        self.seg_order = np.concatenate([self.seg_order, np.zeros(count, np.int64)])
        self.seg_alive = np.concatenate([self.seg_alive, np.ones(count, bool)])
        for k, (i, continues) in enumerate(plan):
            seg = n0 + k
            id_ = col.ids[i]
            self.seg_episode.append(id_)
            steps = int(col.lens[i])
            if continues:
                ep = self.episodes[id_]
                self.seg_next[ep.last_segment] = seg
                self.seg_prev[seg] = ep.last_segment
                ep.last_segment, ep.t, ep.num_steps = seg, ep.t + steps, ep.num_steps + steps
            else:
                ep = StoredEpisode(
                    id_, seg, seg, int(col.t_started[i]), int(col.t_started[i]) + steps, steps, self._next_order
                )
                self.order_to_id[self._next_order] = id_
                self._next_order += 1
                self.episodes[id_] = ep
            self.seg_order[seg] = ep.order
            ep.terminated, ep.truncated = bool(col.terminated[i]), bool(col.truncated[i])
            self.num_steps += steps
            self._live_obs_rows += steps + 1

    # ---------------------------------------------------------------- eviction and compaction
    def _over_capacity(self) -> bool:
        if self.num_steps > self.capacity_env_steps:
            return True
        return self.capacity_bytes is not None and self.num_steps * self.step_nbytes() > self.capacity_bytes

    def _evict(self) -> None:
        while self.episodes and self._over_capacity():
            id_, ep = next(iter(self.episodes.items()))
            del self.episodes[id_]
            del self.order_to_id[ep.order]
            seg = ep.first_segment
            while seg >= 0:
                self.seg_alive[seg] = False
                if self.priorities is not None:
                    self.priorities[self.seg_step[seg] : self.seg_step[seg] + self.seg_len[seg]] = 0.0
                self._live_obs_rows -= int(self.seg_len[seg]) + 1
                seg = int(self.seg_next[seg])
            self.num_steps -= ep.num_steps
            self.num_evicted_episodes += 1
            self.num_evicted_steps += ep.num_steps
        dead = self.obs.rows - self._live_obs_rows
        over_bytes = self.capacity_bytes is not None and dead * self.step_nbytes() > self.capacity_bytes // 4
        if dead > max(self._live_obs_rows // 4, 4096) or (dead and over_bytes):
            self.compact()

    def compact(self) -> None:
        """Drops dead segments' rows; row and segment numbers change."""
        alive = np.flatnonzero(self.seg_alive)
        lens = self.seg_len[alive]
        lb_lens = self.seg_lb_len[alive]

        def ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
            total = int(sizes.sum())
            offsets = (np.cumsum(sizes) - sizes).astype(np.int64)
            return (np.repeat(starts - offsets, sizes) + np.arange(total)).astype(np.int64)

        obs_rows = ranges(self.seg_obs[alive], lens + 1)
        step_rows = ranges(self.seg_step[alive], lens)
        lb_rows = ranges(self.seg_lb[alive], lb_lens)
        self.infos = remap_rows(self.infos, obs_rows)
        self.lb_infos = remap_rows(self.lb_infos, lb_rows)
        if self.priorities is not None:
            self.priorities = self.priorities[step_rows]
        for rows, index in (
            (self.obs, obs_rows),
            (self.actions, step_rows),
            (self.rewards, step_rows),
            *((r, step_rows) for r in (self.extras or {}).values()),
            (self.lb_obs, lb_rows),
            (self.lb_actions, lb_rows),
            (self.lb_rewards, lb_rows),
            *((r, lb_rows) for r in self.lb_extras.values()),
        ):
            if rows.is_set:
                rows.keep(index)
        seg_map = np.full(len(self.seg_len), -1, np.int64)
        seg_map[alive] = np.arange(len(alive))
        self.seg_obs = (np.cumsum(lens + 1) - (lens + 1)).astype(np.int64)  # empty when nothing is alive
        self.seg_step = (np.cumsum(lens) - lens).astype(np.int64)
        self.seg_lb = (np.cumsum(lb_lens) - lb_lens).astype(np.int64)
        self.seg_len, self.seg_lb_len = lens, lb_lens
        nxt, prev = self.seg_next[alive], self.seg_prev[alive]
        self.seg_next = np.where(nxt >= 0, seg_map[np.maximum(nxt, 0)], -1)
        self.seg_prev = np.where(prev >= 0, seg_map[np.maximum(prev, 0)], -1)
        self.seg_t = self.seg_t[alive]
        self.seg_order = self.seg_order[alive]
        self.seg_alive = np.ones(len(alive), bool)
        self.seg_episode = [self.seg_episode[i] for i in alive.tolist()]
        for ep in self.episodes.values():
            ep.first_segment, ep.last_segment = int(seg_map[ep.first_segment]), int(seg_map[ep.last_segment])
        self._live_obs_rows = self.obs.rows
        self.num_compactions += 1
        self.version += 1

    def first_order(self) -> int:
        """Insertion counter of the oldest stored episode (live counters are contiguous: eviction is FIFO)."""
        return next(iter(self.episodes.values())).order if self.episodes else self._next_order

    def start_order(self, order: int) -> None:
        """Numbers the next inserted episodes from ``order`` (restoring keeps sample keys stable)."""
        if self.episodes:
            raise ReplayError("start_order: only an empty storage can be renumbered")
        self._next_order = order

    def step_row(self, order: int, t: int) -> int:
        """The step row of timestep ``t`` of the episode inserted as ``order``; -1 if not stored."""
        return int(self.step_rows(np.array([(order << 32) | t], np.int64))[0])

    def step_rows(self, keys: np.ndarray) -> np.ndarray:
        """Step rows of sampling keys (``order << 32 | t``, as ``sample`` gives them); -1 where not stored.

        Vectorized: live segments sorted by (order, first t), then one ``searchsorted``."""
        keys = np.asarray(keys, np.int64)
        live = np.flatnonzero(self.seg_alive)
        if not len(live):
            return np.full(len(keys), -1, np.int64)
        starts = (self.seg_order[live] << 32) | self.seg_t[live]
        by_start = np.argsort(starts, kind="stable")
        live, starts = live[by_start], starts[by_start]
        at = np.maximum(np.searchsorted(starts, keys, side="right") - 1, 0)
        seg, offset = live[at], keys - starts[at]
        found = ((keys >> 32) == self.seg_order[seg]) & (offset >= 0) & (offset < self.seg_len[seg])
        return np.where(found, self.seg_step[seg] + offset, -1).astype(np.int64)

    def segments_of(self, id_: str) -> list[int]:
        """The live segments of episode ``id_`` in time order."""
        seg, out = self.episodes[id_].first_segment, []
        while seg >= 0:
            out.append(seg)
            seg = int(self.seg_next[seg])
        return out

    def episodes_columnar(self, ids: list[str]) -> ColumnarEpisodes:
        """Stored episodes ``ids`` as one chunk each (segments joined, the first one's lookback kept)."""
        obs_idx, step_idx, lb_idx, lb_lens = [], [], [], []
        for id_ in ids:
            segs = self.segments_of(id_)
            first = segs[0]
            obs_idx.append(np.arange(self.seg_obs[first], self.seg_obs[first] + self.seg_len[first] + 1))
            obs_idx += [np.arange(self.seg_obs[g] + 1, self.seg_obs[g] + self.seg_len[g] + 1) for g in segs[1:]]
            step_idx += [np.arange(self.seg_step[g], self.seg_step[g] + self.seg_len[g]) for g in segs]
            lb_idx.append(np.arange(self.seg_lb[first], self.seg_lb[first] + self.seg_lb_len[first]))
            lb_lens.append(int(self.seg_lb_len[first]))
        obs_rows, step_rows, lb_rows = (np.concatenate(x).astype(np.int64) for x in (obs_idx, step_idx, lb_idx))

        def sparse(store: dict[int, dict], rows: np.ndarray) -> tuple[np.ndarray, list[dict]]:
            keys = np.fromiter(store, np.int64, len(store))
            hits = np.flatnonzero(np.isin(rows, keys))
            return hits.astype(np.int64), [store[int(r)] for r in rows[hits].tolist()]

        def lookback(rows: Rows, data: Rows) -> Any:
            return rows.gather(lb_rows) if rows.is_set else data.gather(lb_rows[:0])

        info_rows, info_values = sparse(self.infos, obs_rows)
        lb_info_rows, lb_info_values = sparse(self.lb_infos, lb_rows)
        eps = [self.episodes[i] for i in ids]
        extras = self.extras or {}
        return ColumnarEpisodes(
            ids=list(ids),
            t_started=np.array([ep.t_started for ep in eps], np.int64),
            lens=np.array([ep.num_steps for ep in eps], np.int64),
            lookback_lens=np.array(lb_lens, np.int64),
            terminated=np.array([ep.terminated for ep in eps], bool),
            truncated=np.array([ep.truncated for ep in eps], bool),
            data=StepRows(
                observations=self.obs.gather(obs_rows),
                actions=self.actions.gather(step_rows),
                rewards=self.rewards.gather(step_rows),
                extra_model_outputs={k: rows.gather(step_rows) for k, rows in extras.items()},
                info_rows=info_rows,
                info_values=info_values,
            ),
            lookback=StepRows(
                observations=lookback(self.lb_obs, self.obs),
                actions=lookback(self.lb_actions, self.actions),
                rewards=lookback(self.lb_rewards, self.rewards),
                extra_model_outputs={k: lookback(self.lb_extras[k], rows) for k, rows in extras.items()},
                info_rows=lb_info_rows,
                info_values=lb_info_values,
            ),
        )

    # ---------------------------------------------------------------- sizes
    def step_nbytes(self) -> int:
        """Bytes of one stored step: its observation, action, reward and model outputs."""
        if not self.obs.is_set:
            return 0
        return (
            self.obs.row_nbytes()
            + self.actions.row_nbytes()
            + self.rewards.row_nbytes()
            + sum(r.row_nbytes() for r in (self.extras or {}).values())
        )

    def nbytes(self) -> int:
        """Bytes the arrays hold (allocated, room to grow included)."""
        rows = [
            self.obs,
            self.actions,
            self.rewards,
            *(self.extras or {}).values(),
            self.lb_obs,
            self.lb_actions,
            self.lb_rewards,
            *self.lb_extras.values(),
        ]
        tables = (
            self.seg_obs,
            self.seg_step,
            self.seg_len,
            self.seg_lb,
            self.seg_lb_len,
            self.seg_next,
            self.seg_t,
            self.seg_prev,
            self.seg_order,
            self.seg_alive,
        )
        return sum(r.nbytes() for r in rows if r.is_set) + sum(a.nbytes for a in tables)
