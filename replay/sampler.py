"""The sampler interface: a strategy that draws stored steps; the buffer gathers transitions there.

A sampler draws positions (segment, step within it) from an :class:`~replay.storage.EpisodeStorage`
with the buffer's RNG, and may add importance ``weights``. It is also the storage's
:class:`~replay.storage.StepRowListener`: the storage tells it about step rows added, evicted and
moved by compaction (a sampler with per-step state, such as priorities, follows them there), and
``reset`` forgets everything when the buffer swaps in a new storage.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from replay.storage import EpisodeStorage, StepRowListener

__all__ = ["Draw", "Sampler"]


@dataclasses.dataclass(frozen=True)
class Draw:
    """Drawn stored steps: step ``offsets[i]`` of segment ``segments[i]``."""

    segments: np.ndarray
    offsets: np.ndarray
    weights: np.ndarray | None = None
    """Importance weights of the draws (prioritized sampling), else None."""


class Sampler(StepRowListener, Protocol):
    """Draws stored steps (see the module docstring)."""

    def draw(self, storage: EpisodeStorage, batch_size_B: int, rng: np.random.Generator) -> Draw:
        """``batch_size_B`` stored steps; raises ReplayError if the storage holds none."""
        ...

    def reset(self) -> None:
        """Forgets all per-storage state (the buffer starts over with an empty storage)."""
        ...
