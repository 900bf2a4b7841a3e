"""CursorBatch: where every sub-env's ongoing episode stands between vectorized sampling calls.

Each sub-env's ongoing episode is a *cursor*: a zero-length chunk (its next first observation,
id, ``t_started`` and lookback), or a placeholder while a NEXT_STEP vector env has yet to reset
it. The cursors of all sub-envs are one ColumnarEpisodes of N zero-length chunks, advanced with
index arithmetic (see ``advance``), not per-sub-env Python; the per-step engine turns them into
SingleAgentEpisode continuations and back.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode

__all__ = ["CursorBatch", "awaiting_reset"]


def awaiting_reset(id_: str, last_obs: object) -> SingleAgentEpisode:
    """Placeholder cursor of a sub-env whose reset comes with its next vector step."""
    return SingleAgentEpisode(id_, observations=[last_obs], terminated=True)


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
        """List-form SingleAgentEpisode cursors (so the per-step engine can append to them cheaply)."""
        out = []
        for ep, waiting in zip(columnar_to_episodes(self.chunks), self.awaiting.tolist()):
            if waiting:
                out.append(awaiting_reset(ep.id_, ep.get_observations(-1)))
                continue
            out.append(ep.to_list())
        return out
