"""The storage's records: a stored episode's bookkeeping, its rows, and the step-row listener protocol."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

__all__ = ["EpisodeRows", "StepRowListener", "StoredEpisode"]


class StoredEpisode(NamedTuple):
    """Bookkeeping of one stored episode: its segments and where it stands (replaced, never changed;
    a named tuple because compaction renumbers every record: 3x cheaper than a frozen dataclass)."""

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


class EpisodeRows(NamedTuple):
    """Stored rows of one episode, in time order."""

    observations: np.ndarray
    """Observation rows (steps + 1; the boundary observation of joined chunks once)."""
    steps: np.ndarray
    """Step rows."""
    lookback: np.ndarray
    """Rows of the episode's stored lookback (its first chunk's)."""


class StepRowListener(Protocol):
    """Told about step rows as the storage changes them (after an add has fully succeeded)."""

    def rows_added(self, start: int, stop: int) -> None:
        """Step rows ``start .. stop`` were added."""

    def rows_evicted(self, start: int, stop: int) -> None:
        """Step rows ``start .. stop`` belong to an evicted episode (dead until compaction)."""

    def rows_moved(self, kept: np.ndarray) -> None:
        """Compaction: new step row ``i`` is old step row ``kept[i]``; the others are gone."""
