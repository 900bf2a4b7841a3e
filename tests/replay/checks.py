"""Test fixtures for the replay storage: counting episode chunks and what a storage holds of them."""

from __future__ import annotations

import numpy as np

from ray_sampler.data.episode import SingleAgentEpisode
from replay.storage import EpisodeStorage

__all__ = ["episode", "segment_ids", "stored_obs"]


def episode(
    id_: str, steps: int, *, start: int = 0, terminated: bool = False, lookback: int = 0, logp: bool = True
) -> SingleAgentEpisode:
    """Obs t (float32[1]), reward t+1, for t in [start - lookback, start + steps]; lookback steps first."""
    ts = range(start - lookback, start + steps + 1)
    return SingleAgentEpisode(
        id_,
        observations=[np.array([t], np.float32) for t in ts],
        actions=[t % 2 for t in ts][:-1],
        rewards=[float(t + 1) for t in ts][:-1],
        extra_model_outputs={"logp": [np.float32(-t) for t in ts][:-1]} if logp else None,
        terminated=terminated,
        t_started=start,
        len_lookback_buffer=lookback,
    )


def stored_obs(storage: EpisodeStorage, id_: str) -> list[float]:
    """The stored observations of an episode, walking its segments (boundary obs once)."""
    out: list[float] = []
    view = storage.segment_view()
    for seg in storage.segments_of(id_):
        rows = np.arange(view.obs_start[seg], view.obs_start[seg] + view.num_steps[seg] + 1)
        values = storage.gather_observations(rows)[:, 0].tolist()
        out += values if not out else values[1:]
    return out


def segment_ids(storage: EpisodeStorage) -> list[str]:
    """The episode of every segment, dead ones included, in segment order."""
    return [storage.segment_episode(seg) for seg in range(len(storage.segment_view().num_steps))]
