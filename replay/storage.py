"""EpisodeStorage: stored episode chunks in growing columnar arrays, evicted as whole episodes.

Layout: every added chunk becomes a *segment* (see :mod:`replay.segments`): its ``len + 1``
observations in observation rows and its ``len`` steps (action, reward, model outputs) in step
rows (see :mod:`replay.columns`), so a transition's next observation is simply the next
observation row (gathered when sampled, never stored twice). Segments of one episode are linked
in time order; a chunk that continues a stored episode is checked (same ``id_``, ``t_started``
equal to the episode's ``t``, its first observation equal to the stored last one, the episode not
done) and its lookback dropped, since the stored steps already hold it; a chunk whose episode is
not stored (new, or evicted) keeps its lookback. ``add`` is atomic: one bad chunk and nothing
changes (the segment table and the episode records are changed on copies, swapped in at the end;
the columns roll back). Capacity counts env steps (lookback never counts), optionally bytes too;
the oldest whole episodes go first, but the newest stored episode is always kept: an episode
longer than the whole capacity stays (alone) until the next one arrives, as in RLlib, so the
stored steps may exceed the capacity (by less than that one episode's length). Dead rows are
reclaimed by compaction once they pass a quarter of the live ones (or of ``capacity_bytes``).
``capacity_bytes`` bounds the stored steps' own bytes (observation, action, reward, model
outputs); allocation adds growth room and lookback rows on top.

A storage restored from a checkpoint (``mark_restored``) lets the episodes it held that were not
done go on after a gap: a replay actor restored from its last checkpoint lacks the chunks
acknowledged since, so the runners' next chunks start later than the stored episodes end. Such a
chunk starts a new stored episode under its id; the restored part stays, renamed
``<id>#<its end t>`` (two separate pieces, no transition across the gap). Any gap in a storage
not restored is refused.

A chunk whose steps the episode stores already is a re-send (the replay actor stored it, then died
before its ack reached the runner, and was restored from a checkpoint holding it): when its range
lies within the stored one and its first and last observations equal the stored ones there, it is
skipped (``num_duplicate_steps_skipped``) and adds nothing. Any other overlap (a chunk starting
before the stored end) is refused as a duplicate.

Everything else reads the storage through its read API (counts, episode records, an episode's
rows, a read-only segment view, column gathers, sizes). A :class:`StepRowListener` (the
prioritized sampler) is told about step rows added, evicted and moved by compaction.

>>> from ray_sampler.data.columnar import episodes_to_columnar
>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> storage = EpisodeStorage(capacity_env_steps=5)
>>> storage.add(episodes_to_columnar([SingleAgentEpisode("a", observations=[0, 1, 2], actions=[0, 0],
...                                                      rewards=[1.0, 2.0])]))
2
>>> storage.num_steps, storage.episodes["a"].t, storage.episode_rows("a").observations.tolist()
(2, 2, [0, 1, 2])
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from ray_sampler.validate import check_int, check_optional
from replay.columns import EpisodeMeta, StoredColumns
from replay.records import EpisodeRows, StepRowListener, StoredEpisode
from replay.rows import equal_rows
from replay.segments import SegmentTable, SegmentView, row_ranges

__all__ = ["EpisodeRows", "EpisodeStorage", "StepRowListener", "StoredEpisode"]


class EpisodeStorage:
    """Episode chunks in columnar arrays (see the module docstring)."""

    def __init__(
        self, *, capacity_env_steps: int, capacity_bytes: int | None = None, listener: StepRowListener | None = None
    ) -> None:
        self._capacity_env_steps = check_int("capacity_env_steps", capacity_env_steps, minimum=1, error=ReplayError)
        self._capacity_bytes: int | None = check_optional(
            check_int, "capacity_bytes", capacity_bytes, minimum=1, error=ReplayError
        )
        self._listener = listener
        self._columns = StoredColumns()
        self._segments = SegmentTable()
        self._episodes: dict[str, StoredEpisode] = {}  # insertion order: oldest first
        self._num_steps = 0
        self._live_obs_rows = 0
        self._next_order = 0
        self._num_evicted_episodes = 0
        self._num_evicted_steps = 0
        self._num_compactions = 0
        self._num_duplicate_steps_skipped = 0
        self._version = 0
        self._view: SegmentView | None = None
        self._view_version = -1
        self._restored_open: set[str] = set()

    # ---------------------------------------------------------------- counts
    @property
    def capacity_env_steps(self) -> int:
        return self._capacity_env_steps

    @property
    def capacity_bytes(self) -> int | None:
        return self._capacity_bytes

    @property
    def num_steps(self) -> int:
        """Stored env steps (lookback excluded)."""
        return self._num_steps

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    @property
    def num_evicted_episodes(self) -> int:
        return self._num_evicted_episodes

    @property
    def num_evicted_steps(self) -> int:
        return self._num_evicted_steps

    @property
    def num_compactions(self) -> int:
        return self._num_compactions

    @property
    def num_duplicate_steps_skipped(self) -> int:
        """Env steps of re-sent chunks skipped because they were stored already (see the module docstring)."""
        return self._num_duplicate_steps_skipped

    @property
    def num_obs_rows(self) -> int:
        """Observation rows in use, dead ones (not yet compacted) included."""
        return self._columns.num_obs_rows

    @property
    def num_step_rows(self) -> int:
        """Step rows in use, dead ones (not yet compacted) included."""
        return self._columns.num_step_rows

    @property
    def version(self) -> int:
        """Changes whenever stored rows or segments change."""
        return self._version

    @property
    def episodes(self) -> Mapping[str, StoredEpisode]:
        """Read-only: stored episode records by id, oldest (next evicted) first."""
        return types.MappingProxyType(self._episodes)

    # ---------------------------------------------------------------- adding
    def add(self, col: ColumnarEpisodes) -> int:
        """Stores the chunks of ``col`` (all or none); returns how many of their env steps are still
        stored after eviction (the newest episode always stays, see the module docstring)."""
        col.validate()
        plan, renames, num_duplicate_steps = self._plan(col)
        if not plan:
            self._num_duplicate_steps_skipped += num_duplicate_steps
            return 0
        self._make_room(col)
        mark = self._columns.mark()
        try:
            base_step = self._apply(col, plan, renames)
        except Exception:
            self._columns.rollback(mark)  # checked up front, but nothing half-written may stay
            raise
        del mark
        if self._listener is not None:
            self._listener.rows_added(base_step, self._columns.num_step_rows)
        self._restored_open.difference_update(col.ids[i] for i, _ in plan)
        self._num_duplicate_steps_skipped += num_duplicate_steps
        self._evict()
        self._version += 1
        return sum(int(col.lens[i]) for i, _ in plan if col.ids[i] in self._episodes)

    def mark_restored(self) -> None:
        """The stored episodes that are not done may go on after a gap (see the module docstring)."""
        self._restored_open = {id_ for id_, ep in self._episodes.items() if not ep.is_done}

    def _plan(self, col: ColumnarEpisodes) -> tuple[list[tuple[int, bool]], dict[str, str], int]:
        """(chunk, continues a stored episode) for every chunk with steps, the restored episodes to
        rename (old id -> new id) because a chunk goes on after a gap, and the steps of the re-sent
        chunks skipped; raises before any change."""
        self._columns.check_keys(col)
        obs_off = col.obs_offsets
        pending: dict[str, tuple[int, bool, Any]] = {}  # id -> (t, is_done, last obs) after earlier chunks
        plan = []
        renames: dict[str, str] = {}
        num_duplicate_steps = 0
        table = self._segments
        for i, id_ in enumerate(col.ids):
            if not col.lens[i]:
                continue
            stored = self._episodes.get(id_)
            t: int | None
            if id_ not in pending and stored is not None and self._is_resent(col, i, stored):
                num_duplicate_steps += int(col.lens[i])
                continue
            if id_ in pending:
                t, done, last_obs = pending[id_]
            elif stored is not None and id_ in self._restored_open and int(col.t_started[i]) > stored.t:
                renames[id_] = self._piece_id(id_, stored.t)  # a gap after a restore: a new piece
                t, done, last_obs = None, False, None
            elif stored is not None:
                t, done = stored.t, stored.is_done
                seg = stored.last_segment
                last_obs = self._columns.gather_observations(np.array([table.obs_start[seg] + table.num_steps[seg]]))
            else:
                t, done, last_obs = None, False, None
            first_rows, last_rows = slice(obs_off[i], obs_off[i] + 1), slice(obs_off[i + 1] - 1, obs_off[i + 1])
            first_obs = tree.map_structure(lambda a, rows=first_rows: a[rows], col.data.observations)
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
            last = tree.map_structure(lambda a, rows=last_rows: a[rows], col.data.observations)
            pending[id_] = (int(col.t_started[i]) + int(col.lens[i]), bool(col.terminated[i] or col.truncated[i]), last)
            plan.append((i, t is not None))
        if plan:
            with_lookback = any(not cont and col.lookback_lens[i] for i, cont in plan)
            self._columns.check_rows(col, with_lookback=with_lookback)
        return plan, renames, num_duplicate_steps

    def _is_resent(self, col: ColumnarEpisodes, i: int, stored: StoredEpisode) -> bool:
        """Whether chunk ``i`` is a re-send of steps ``stored`` holds already (its ack was lost): its
        range lies within the stored one, its first and last observations equal the stored ones at
        those timesteps, and if it ends its episode, the stored episode ends there the same way."""
        t0, t1 = int(col.t_started[i]), int(col.t_started[i]) + int(col.lens[i])
        if not stored.t_started <= t0 < t1 <= stored.t:
            return False
        if (bool(col.terminated[i]), bool(col.truncated[i])) != (
            (stored.terminated, stored.truncated) if t1 == stored.t else (False, False)
        ):
            return False
        rows = self.episode_rows(stored.id_).observations[[t0 - stored.t_started, t1 - stored.t_started]]
        first_last = np.array([col.obs_offsets[i], col.obs_offsets[i + 1] - 1])
        sent = tree.map_structure(lambda a: a[first_last], col.data.observations)
        return equal_rows(self._columns.gather_observations(rows), sent)

    def _piece_id(self, id_: str, t: int) -> str:
        new, k = f"{id_}#{t}", 1
        while new in self._episodes:
            new, k = f"{id_}#{t}.{k}", k + 1
        return new

    def _apply(self, col: ColumnarEpisodes, plan: list[tuple[int, bool]], renames: dict[str, str]) -> int:
        """Appends the planned chunks; returns the first new step row. Segments and episode records
        change on copies that replace the stored ones only at the end."""
        base_obs, base_step = self._columns.append(col)
        obs_off, step_off, lb_off = col.obs_offsets, col.step_offsets, col.lookback_offsets
        # Lookback rows are kept only for chunks that begin a stored episode.
        new_chunks = [i for i, continues in plan if not continues and col.lookback_lens[i]]
        lb_base: dict[int, int] = {}
        if new_chunks:
            lb_index = np.concatenate([np.arange(lb_off[i], lb_off[i + 1]) for i in new_chunks])
            at = self._columns.append_lookback(col, lb_index)
            for i in new_chunks:
                lb_base[i] = at
                at += int(col.lookback_lens[i])
        table, episodes = self._segments.copy(), dict(self._episodes)
        if renames:  # the restored pieces keep their place in eviction order under their new ids
            episodes = {renames.get(id_, id_): ep for id_, ep in episodes.items()}
            for new in renames.values():
                ep = episodes[new] = episodes[new]._replace(id_=new)
                seg = ep.first_segment
                while seg >= 0:
                    table.episode[seg] = new
                    seg = int(table.next[seg])
        next_order, num_steps, live_obs_rows = self._next_order, self._num_steps, self._live_obs_rows
        first, orders, links = len(table), [], []
        for k, (i, continues) in enumerate(plan):
            seg, id_, steps = first + k, col.ids[i], int(col.lens[i])
            terminated, truncated = bool(col.terminated[i]), bool(col.truncated[i])
            if continues:
                ep = episodes[id_]
                links.append((ep.last_segment, seg))
                ep = ep._replace(
                    last_segment=seg,
                    t=ep.t + steps,
                    num_steps=ep.num_steps + steps,
                    terminated=terminated,
                    truncated=truncated,
                )
            else:
                t0 = int(col.t_started[i])
                ep = StoredEpisode(id_, seg, seg, t0, t0 + steps, steps, next_order, terminated, truncated)
                next_order += 1
            episodes[id_] = ep
            orders.append(ep.order)
            num_steps += steps
            live_obs_rows += steps + 1
        index = np.array([i for i, _ in plan], np.int64)
        table.append(
            obs_start=base_obs + obs_off[index],
            step_start=base_step + step_off[index],
            num_steps=col.lens[index],
            lookback_start=[lb_base.get(i, 0) for i, _ in plan],
            lookback_len=[int(col.lookback_lens[i]) if i in lb_base else 0 for i, _ in plan],
            t_started=col.t_started[index],
            order=orders,
            episode=[col.ids[i] for i, _ in plan],
        )
        for prev, seg in links:
            table.link(prev, seg)
        self._segments, self._episodes = table, episodes
        self._next_order, self._num_steps, self._live_obs_rows = next_order, num_steps, live_obs_rows
        return base_step

    # ---------------------------------------------------------------- room, eviction and compaction
    def _reserve_rows(self, step_nbytes: int) -> int:
        """Rows a data column allocates at once: the capacity in steps (``capacity_bytes`` /
        ``step_nbytes`` where that is less), plus 1/16 for each segment's extra observation row
        and the dead rows awaiting compaction."""
        steps = self._capacity_env_steps
        if self._capacity_bytes is not None and step_nbytes:
            steps = min(steps, self._capacity_bytes // step_nbytes + 1)
        return steps + steps // 16 + 1

    def _make_room(self, col: ColumnarEpisodes) -> None:
        """Compacts (in place) first when ``col``'s rows would not fit in the allocated ones and
        dead rows can make room, so that the columns grow (a copy) only when the live rows need it."""
        self._columns.reserve(self._reserve_rows(self.step_nbytes() or StoredColumns.step_nbytes_of(col)))
        obs_room, step_room = self._columns.room()
        obs_needed = len(tree.first_leaf(col.data.observations))
        if self._columns.num_obs_rows > self._live_obs_rows and (
            obs_needed > obs_room or col.num_env_steps > step_room
        ):
            self.compact()

    def _over_capacity(self) -> bool:
        if self._num_steps > self._capacity_env_steps:
            return True
        return self._capacity_bytes is not None and self._num_steps * self.step_nbytes() > self._capacity_bytes

    def _evict(self) -> None:
        table = self._segments
        while len(self._episodes) > 1 and self._over_capacity():  # the newest episode always stays
            id_, ep = next(iter(self._episodes.items()))
            del self._episodes[id_]
            seg = ep.first_segment
            while seg >= 0:
                table.alive[seg] = False
                start, steps = int(table.step_start[seg]), int(table.num_steps[seg])
                if self._listener is not None:
                    self._listener.rows_evicted(start, start + steps)
                self._live_obs_rows -= steps + 1
                seg = int(table.next[seg])
            self._num_steps -= ep.num_steps
            self._num_evicted_episodes += 1
            self._num_evicted_steps += ep.num_steps
        dead = self._columns.num_obs_rows - self._live_obs_rows
        over_bytes = self._capacity_bytes is not None and dead * self.step_nbytes() > self._capacity_bytes // 4
        if dead > max(self._live_obs_rows // 4, 4096) or (dead and over_bytes):
            self.compact()

    def compact(self) -> None:
        """Drops dead segments' rows; row and segment numbers change (sampling keys do not)."""
        obs_rows, step_rows, lb_rows = self._segments.live_rows()
        self._columns.keep(obs_rows, step_rows, lb_rows)
        if self._listener is not None:
            self._listener.rows_moved(step_rows)
        self._segments, seg_map = self._segments.compacted()
        self._episodes = {
            id_: ep._replace(first_segment=int(seg_map[ep.first_segment]), last_segment=int(seg_map[ep.last_segment]))
            for id_, ep in self._episodes.items()
        }
        self._live_obs_rows = self._columns.num_obs_rows
        self._num_compactions += 1
        self._version += 1

    def set_capacity(self, capacity_env_steps: int, capacity_bytes: int | None = None) -> None:
        """New capacities; the oldest episodes go now if more is stored."""
        checked = check_int("capacity_env_steps", capacity_env_steps, minimum=1, error=ReplayError)
        self._capacity_bytes = check_optional(check_int, "capacity_bytes", capacity_bytes, minimum=1, error=ReplayError)
        self._capacity_env_steps = checked
        self._evict()
        reserve = self._reserve_rows(self.step_nbytes())
        self._columns.reserve(reserve)
        if self._columns.room()[0] + self._columns.num_obs_rows > reserve:  # a smaller capacity: give back room
            if self._columns.num_obs_rows > self._live_obs_rows:
                self.compact()
            self._columns.fit(reserve)
        self._version += 1

    def set_eviction_counts(self, *, num_evicted_episodes: int, num_evicted_steps: int) -> None:
        """The eviction counters (restoring a saved buffer carries them over)."""
        self._num_evicted_episodes = check_int(
            "num_evicted_episodes", num_evicted_episodes, minimum=0, error=ReplayError
        )
        self._num_evicted_steps = check_int("num_evicted_steps", num_evicted_steps, minimum=0, error=ReplayError)

    def first_order(self) -> int:
        """Insertion counter of the oldest stored episode (live counters are contiguous: eviction is FIFO)."""
        return next(iter(self._episodes.values())).order if self._episodes else self._next_order

    def start_order(self, order: int) -> None:
        """Numbers the next inserted episodes from ``order`` (restoring keeps sample keys stable)."""
        if self._episodes:
            raise ReplayError("start_order: only an empty storage can be renumbered")
        self._next_order = check_int("first_order", order, minimum=0, error=ReplayError)

    # ---------------------------------------------------------------- reading: keys and segments
    def step_row(self, order: int, t: int) -> int:
        """The step row of timestep ``t`` of the episode inserted as ``order``; -1 if not stored."""
        return int(self.step_rows(np.array([(order << 32) | t], np.int64))[0])

    def step_rows(self, keys: np.ndarray) -> np.ndarray:
        """Step rows of sampling keys (``order << 32 | t``, as ``sample`` gives them); -1 where not stored.

        Vectorized: live segments sorted by (order, first t), then one ``searchsorted``."""
        keys = np.asarray(keys, np.int64)
        table = self._segments
        live = np.flatnonzero(table.alive)
        if not len(live):
            return np.full(len(keys), -1, np.int64)
        starts = (table.order[live] << 32) | table.t_started[live]
        by_start = np.argsort(starts, kind="stable")
        live, starts = live[by_start], starts[by_start]
        at = np.maximum(np.searchsorted(starts, keys, side="right") - 1, 0)
        seg, offset = live[at], keys - starts[at]
        found = ((keys >> 32) == table.order[seg]) & (offset >= 0) & (offset < table.num_steps[seg])
        return np.where(found, table.step_start[seg] + offset, -1).astype(np.int64)

    def keys(self) -> np.ndarray:
        """The sampling keys of every stored step, in (insertion order, time) order."""
        table = self._segments
        live = np.flatnonzero(table.alive)
        live = live[np.lexsort((table.t_started[live], table.order[live]))]
        lens = table.num_steps[live]
        return np.repeat(table.order[live] << 32, lens) + row_ranges(table.t_started[live], lens)

    def locate_step_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(segment, step within it) of step ``rows``."""
        starts = self._segments.step_start
        seg = np.searchsorted(starts, rows, side="right") - 1
        return seg, rows - starts[seg]

    def segment_view(self) -> SegmentView:
        """Read-only segment arrays, the same object until the storage changes."""
        if self._view is None or self._view_version != self._version:
            n = len(self._segments)
            terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
            for ep in self._episodes.values():
                terminated[ep.last_segment] = ep.terminated
                truncated[ep.last_segment] = ep.truncated
            self._view = SegmentView.of(self._segments, ends_terminated=terminated, ends_truncated=truncated)
            self._view_version = self._version
        return self._view

    def segment_episode(self, seg: int) -> str:
        """The id of segment ``seg``'s episode."""
        return self._segments.episode[seg]

    def segments_of(self, id_: str) -> list[int]:
        """The live segments of episode ``id_`` in time order."""
        seg, out = self._episodes[id_].first_segment, []
        while seg >= 0:
            out.append(seg)
            seg = int(self._segments.next[seg])
        return out

    def episode_rows(self, id_: str) -> EpisodeRows:
        """Stored rows of episode ``id_``: observations (steps + 1), steps, and its stored lookback."""
        table = self._segments
        segs = self.segments_of(id_)
        first = segs[0]
        obs_start, lens = table.obs_start, table.num_steps
        obs = [np.arange(obs_start[first], obs_start[first] + lens[first] + 1)]
        obs += [np.arange(obs_start[g] + 1, obs_start[g] + lens[g] + 1) for g in segs[1:]]
        steps = [np.arange(table.step_start[g], table.step_start[g] + lens[g]) for g in segs]
        lb = np.arange(table.lookback_start[first], table.lookback_start[first] + table.lookback_len[first])
        return EpisodeRows(np.concatenate(obs).astype(np.int64), np.concatenate(steps).astype(np.int64), lb)

    # ---------------------------------------------------------------- reading: columns
    def gather_observations(self, rows: np.ndarray) -> Any:
        return self._columns.gather_observations(rows)

    def observation_leaves(self) -> tuple[Any, list[np.ndarray], list[np.ndarray]]:
        """(structure spec, data leaves, lookback leaves; empty when no lookback is stored) of the
        observation columns, for gathers that mix the two (``replay.frame_stacks``)."""
        return self._columns.observation_leaves()

    def gather_actions(self, rows: np.ndarray) -> Any:
        return self._columns.gather_actions(rows)

    def rewards_at(self, rows: np.ndarray) -> np.ndarray:
        return self._columns.rewards_at(rows)

    def gather_extra_model_outputs(self, rows: np.ndarray) -> dict[str, Any]:
        """Stored model outputs of step ``rows``, by key."""
        return self._columns.gather_extra_model_outputs(rows)

    def gather_infos(self, obs_rows: np.ndarray) -> np.ndarray:
        """Infos of observation ``obs_rows`` (``{}`` where none), as an object array of dicts."""
        return self._columns.gather_infos(obs_rows)

    def episodes_columnar(self, ids: list[str]) -> ColumnarEpisodes:
        """Stored episodes ``ids`` as one chunk each (segments joined, the first one's lookback kept)."""
        rows = [self.episode_rows(id_) for id_ in ids]
        eps = [self._episodes[i] for i in ids]
        meta = EpisodeMeta(
            ids=list(ids),
            t_started=np.array([ep.t_started for ep in eps], np.int64),
            lens=np.array([ep.num_steps for ep in eps], np.int64),
            lookback_lens=np.array([len(r.lookback) for r in rows], np.int64),
            terminated=np.array([ep.terminated for ep in eps], bool),
            truncated=np.array([ep.truncated for ep in eps], bool),
        )
        obs_rows, step_rows, lb_rows = (np.concatenate(x).astype(np.int64) for x in zip(*rows))
        return self._columns.to_columnar(meta, obs_rows, step_rows, lb_rows)

    def episode_chunk(
        self, id_: str, *, start: int, stop: int, lookback: int, rows: EpisodeRows | None = None
    ) -> SingleAgentEpisode:
        """Steps ``start .. stop`` (indices within the stored episode) of episode ``id_`` as a numpy'd
        chunk with up to ``lookback`` earlier steps as its lookback (from the stored steps, then the
        stored episode's own lookback); flags kept where it reaches the end of a done episode.
        ``rows``: the episode's ``episode_rows``, if the caller has them already."""
        obs_rows, step_rows, lb_rows = self.episode_rows(id_) if rows is None else rows
        ep = self._episodes[id_]
        from_data = min(lookback, start)
        from_lb = min(lookback - from_data, len(lb_rows))
        ends = stop == ep.num_steps
        return self._columns.chunk(
            id_,
            t_started=ep.t_started + start,
            lb_rows=lb_rows[len(lb_rows) - from_lb :],
            obs_rows=obs_rows[start - from_data : stop + 1],
            step_rows=step_rows[start - from_data : stop],
            lookback=from_data + from_lb,
            terminated=ends and ep.terminated,
            truncated=ends and ep.truncated,
        )

    # ---------------------------------------------------------------- sizes
    def step_nbytes(self) -> int:
        """Bytes of one stored step: its observation, action, reward and model outputs."""
        return self._columns.step_nbytes()

    def nbytes(self) -> int:
        """Bytes the arrays hold (allocated, room to grow included)."""
        return self._columns.nbytes() + self._segments.nbytes()
