"""SegmentTable: the replay storage's per-segment arrays, one entry per stored chunk.

A *segment* is one added chunk: its ``num_steps + 1`` observation rows start at ``obs_start``,
its step rows at ``step_start``, its stored lookback rows (only for a chunk that began a stored
episode) at ``lookback_start``. Segments of one episode are linked in time order by ``next`` and
``prev`` (-1: none). A dead (evicted) segment keeps its slot, ``alive`` False, until compaction.
The table is changed on a :meth:`SegmentTable.copy`, which the storage swaps in once an add has
fully succeeded: that is what makes ``add`` atomic.

>>> table = SegmentTable()
>>> table.append(obs_start=[0, 3], step_start=[0, 2], num_steps=[2, 4], lookback_start=[0, 0],
...              lookback_len=[0, 0], t_started=[0, 0], order=[0, 1], episode=["a", "b"])
0
>>> grown = table.copy()
>>> grown.link(1, grown.append(obs_start=[8], step_start=[6], num_steps=[1], lookback_start=[0],
...            lookback_len=[0], t_started=[4], order=[1], episode=["b"]))
>>> len(table), len(grown), grown.next.tolist(), table.next.tolist()
(2, 3, [-1, 2, -1], [-1, -1])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["SegmentTable", "SegmentView", "row_ranges"]

_INT_COLUMNS = (
    "obs_start",
    "step_start",
    "num_steps",
    "lookback_start",
    "lookback_len",
    "next",
    "prev",
    "t_started",
    "order",
)


def _empty() -> np.ndarray:
    return np.zeros(0, np.int64)


@dataclasses.dataclass
class SegmentTable:
    """Parallel per-segment arrays (see the module docstring)."""

    obs_start: np.ndarray = dataclasses.field(default_factory=_empty)
    """First observation row."""
    step_start: np.ndarray = dataclasses.field(default_factory=_empty)
    """First step row (actions, rewards, model outputs)."""
    num_steps: np.ndarray = dataclasses.field(default_factory=_empty)
    """Steps of the segment (its observation rows: one more)."""
    lookback_start: np.ndarray = dataclasses.field(default_factory=_empty)
    """First stored lookback row (meaningful where ``lookback_len`` > 0)."""
    lookback_len: np.ndarray = dataclasses.field(default_factory=_empty)
    """Stored lookback steps (only a segment that began a stored episode has any)."""
    next: np.ndarray = dataclasses.field(default_factory=_empty)
    """The episode's next segment, -1 for its last."""
    prev: np.ndarray = dataclasses.field(default_factory=_empty)
    """The episode's previous segment, -1 for its first."""
    t_started: np.ndarray = dataclasses.field(default_factory=_empty)
    """Global timestep of the segment's first step."""
    order: np.ndarray = dataclasses.field(default_factory=_empty)
    """Insertion counter of the segment's episode."""
    alive: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))
    """False once the segment's episode was evicted."""
    episode: list[str] = dataclasses.field(default_factory=list)
    """The segment's episode id."""

    def __len__(self) -> int:
        return len(self.episode)

    def copy(self) -> SegmentTable:
        """An independent copy: changing it leaves this table as it is."""
        return SegmentTable(
            **{name: getattr(self, name).copy() for name in _INT_COLUMNS},
            alive=self.alive.copy(),
            episode=list(self.episode),
        )

    def append(
        self,
        *,
        obs_start: Sequence[int] | np.ndarray,
        step_start: Sequence[int] | np.ndarray,
        num_steps: Sequence[int] | np.ndarray,
        lookback_start: Sequence[int] | np.ndarray,
        lookback_len: Sequence[int] | np.ndarray,
        t_started: Sequence[int] | np.ndarray,
        order: Sequence[int] | np.ndarray,
        episode: Sequence[str],
    ) -> int:
        """Adds live, unlinked segments; returns the first new segment's index."""
        first, count = len(self), len(episode)
        values = {
            "obs_start": obs_start,
            "step_start": step_start,
            "num_steps": num_steps,
            "lookback_start": lookback_start,
            "lookback_len": lookback_len,
            "next": np.full(count, -1, np.int64),
            "prev": np.full(count, -1, np.int64),
            "t_started": t_started,
            "order": order,
        }
        for name, new in values.items():
            setattr(self, name, np.concatenate([getattr(self, name), np.asarray(new, np.int64)]))
        self.alive = np.concatenate([self.alive, np.ones(count, bool)])
        self.episode.extend(episode)
        return first

    def link(self, prev: int, seg: int) -> None:
        """Makes ``seg`` follow ``prev`` in their episode."""
        self.next[prev] = seg
        self.prev[seg] = prev

    def live_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Observation, step and lookback rows of the live segments, in segment order."""
        alive = np.flatnonzero(self.alive)
        lens, lb_lens = self.num_steps[alive], self.lookback_len[alive]
        return (
            row_ranges(self.obs_start[alive], lens + 1),
            row_ranges(self.step_start[alive], lens),
            row_ranges(self.lookback_start[alive], lb_lens),
        )

    def compacted(self) -> tuple[SegmentTable, np.ndarray]:
        """The live segments alone, their rows packed in segment order (as ``live_rows`` keeps them),
        and the map from old segment numbers to new ones (-1: dropped)."""
        alive = np.flatnonzero(self.alive)
        lens, lb_lens = self.num_steps[alive], self.lookback_len[alive]
        seg_map = np.full(len(self), -1, np.int64)
        seg_map[alive] = np.arange(len(alive))
        nxt, prev = self.next[alive], self.prev[alive]
        table = SegmentTable(
            obs_start=(np.cumsum(lens + 1) - (lens + 1)).astype(np.int64),  # empty when nothing is alive
            step_start=(np.cumsum(lens) - lens).astype(np.int64),
            num_steps=lens,
            lookback_start=(np.cumsum(lb_lens) - lb_lens).astype(np.int64),
            lookback_len=lb_lens,
            next=np.where(nxt >= 0, seg_map[np.maximum(nxt, 0)], -1),
            prev=np.where(prev >= 0, seg_map[np.maximum(prev, 0)], -1),
            t_started=self.t_started[alive],
            order=self.order[alive],
            alive=np.ones(len(alive), bool),
            episode=[self.episode[i] for i in alive.tolist()],
        )
        return table, seg_map

    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in _INT_COLUMNS) + self.alive.nbytes


@dataclasses.dataclass(frozen=True)
class SegmentView:
    """Read-only per-segment arrays for samplers and the n-step gather (valid until the storage
    changes), plus, per segment, whether it ends a terminated or truncated episode."""

    obs_start: np.ndarray
    step_start: np.ndarray
    num_steps: np.ndarray
    lookback_start: np.ndarray
    lookback_len: np.ndarray
    next: np.ndarray
    t_started: np.ndarray
    order: np.ndarray
    alive: np.ndarray
    ends_terminated: np.ndarray
    ends_truncated: np.ndarray

    @classmethod
    def of(cls, table: SegmentTable, *, ends_terminated: np.ndarray, ends_truncated: np.ndarray) -> SegmentView:
        def frozen(a: np.ndarray) -> np.ndarray:
            view = a.view()
            view.flags.writeable = False
            return view

        return cls(
            obs_start=frozen(table.obs_start),
            step_start=frozen(table.step_start),
            num_steps=frozen(table.num_steps),
            lookback_start=frozen(table.lookback_start),
            lookback_len=frozen(table.lookback_len),
            next=frozen(table.next),
            t_started=frozen(table.t_started),
            order=frozen(table.order),
            alive=frozen(table.alive),
            ends_terminated=frozen(ends_terminated),
            ends_truncated=frozen(ends_truncated),
        )


def row_ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The rows ``starts[i] .. starts[i] + sizes[i]`` of every range, concatenated.

    >>> row_ranges(np.array([5, 0]), np.array([2, 3])).tolist()
    [5, 6, 0, 1, 2]
    """
    total = int(sizes.sum())
    offsets = (np.cumsum(sizes) - sizes).astype(np.int64)
    return (np.repeat(starts - offsets, sizes) + np.arange(total)).astype(np.int64)
