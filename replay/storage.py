"""EpisodeStorage: stored episode chunks in growing columnar arrays, evicted as whole episodes.

Layout: every added chunk becomes a *segment* (see :mod:`replay.segments`): its ``len + 1``
observations in observation rows and its ``len`` steps (action, reward, model outputs) in step
rows (see :mod:`replay.columns`), so a transition's next observation is simply the next
observation row (gathered when sampled, never stored twice). Segments of one episode are linked
in time order. Before anything changes, ``add`` plans the chunks (see :mod:`replay.add_plan`): a
chunk that continues a stored episode is checked and its lookback dropped, since the stored steps
already hold it; a chunk whose episode is not stored (new, or evicted) keeps its lookback; a
re-sent chunk is skipped; after ``mark_restored`` an episode may go on after a gap as a new piece.
``add`` is atomic: one bad chunk and nothing changes (the segment table and the episode records
are changed on copies, swapped in at the end; the columns roll back). Capacity counts env steps
(lookback never counts), optionally bytes too; the oldest whole episodes go first, but the newest
stored episode is always kept: an episode longer than the whole capacity stays (alone) until the
next one arrives, as in RLlib, so the stored steps may exceed the capacity (by less than that one
episode's length). Dead rows are reclaimed by compaction once they pass a quarter of the live ones
(or of ``capacity_bytes``). ``capacity_bytes`` bounds the stored steps' own bytes (observation,
action, reward, model outputs); allocation adds growth room and lookback rows on top.

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
from replay.add_plan import AddPlan, plan_add
from replay.columns import EpisodeMeta, StoredColumns
from replay.keys import step_rows_of_keys, stored_keys
from replay.records import EpisodeRows, StepRowListener, StoredEpisode
from replay.segments import SegmentTable, SegmentView

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
        """Env steps of re-sent chunks skipped because they were stored already (see :mod:`replay.add_plan`)."""
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
        plan, renames, num_duplicate_steps = self._plan(col)
        if not plan:
            self._num_duplicate_steps_skipped += num_duplicate_steps
            return 0
        self._evict_first(col, plan, renames)
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

    def check_add(self, col: ColumnarEpisodes) -> None:
        """Raises what ``add(col)`` would raise for chunks that do not continue their stored episodes,
        changing nothing (an owner storing one chunk set across several storages checks all first)."""
        self._plan(col)

    def _plan(self, col: ColumnarEpisodes) -> AddPlan:
        col.validate()
        return plan_add(
            col,
            episodes=self._episodes,
            restored_open=self._restored_open,
            columns=self._columns,
            segments=self._segments,
            episode_rows=self.episode_rows,
        )

    def mark_restored(self) -> None:
        """The stored episodes that are not done may go on after a gap (see :mod:`replay.add_plan`)."""
        self._restored_open = {id_ for id_, ep in self._episodes.items() if not ep.is_done}

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

    def _evict_first(self, col: ColumnarEpisodes, plan: list[tuple[int, bool]], renames: dict[str, str]) -> None:
        """Drops now the oldest episodes that the eviction after this add would drop anyway, when
        the add's rows would not fit beside the live ones otherwise: growing the columns copies
        them all (a peak of twice the stored bytes). Only episodes the add does not touch go, in the
        order ``_evict`` takes them, so the stored episodes, rows' order and counts end the same;
        the add was planned (and checked) first, so a bad chunk still changes nothing."""
        obs_room = self._columns.observations.allocated_rows - self._live_obs_rows
        step_room = self._columns.actions.allocated_rows - self._num_steps
        if not self._columns.observations.is_set or (
            len(tree.first_leaf(col.data.observations)) <= obs_room and col.num_env_steps <= step_room
        ):
            return
        touched = {*col.ids, *renames, *renames.values()}
        num_steps = self._num_steps + sum(int(col.lens[i]) for i, _ in plan)
        drop = []
        for id_, ep in self._episodes.items():
            if id_ in touched or not self._over_capacity(num_steps):
                break
            drop.append(id_)
            num_steps -= ep.num_steps
        for id_ in drop:
            self._drop(id_)

    def _over_capacity(self, num_steps: int | None = None) -> bool:
        """Whether ``num_steps`` (default: the stored steps) are more than the capacity allows."""
        num_steps = self._num_steps if num_steps is None else num_steps
        if num_steps > self._capacity_env_steps:
            return True
        return self._capacity_bytes is not None and num_steps * self.step_nbytes() > self._capacity_bytes

    def _evict(self) -> None:
        while len(self._episodes) > 1 and self._over_capacity():  # the newest episode always stays
            self._drop(next(iter(self._episodes)))
        self._compact_if_sparse()

    def evict_episodes(self, ids: list[str]) -> None:
        """Evicts the stored episodes ``ids`` (counted as evicted; ids not stored are skipped): for an
        owner that evicts by its own rule, such as the multi-agent buffer's env-step capacity."""
        for id_ in ids:
            if id_ in self._episodes:
                self._drop(id_)
        self._compact_if_sparse()
        self._version += 1

    def _drop(self, id_: str) -> None:
        table = self._segments
        ep = self._episodes.pop(id_)
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

    def _compact_if_sparse(self) -> None:
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
        """Step rows of sampling keys (see :mod:`replay.keys`; ``sample`` gives them); -1 where not stored."""
        return step_rows_of_keys(self._segments, keys)

    def keys(self) -> np.ndarray:
        """The sampling keys of every stored step, in (insertion order, time) order."""
        return stored_keys(self._segments)

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
