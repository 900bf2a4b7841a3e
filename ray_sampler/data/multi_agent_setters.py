"""MultiAgentEpisode's setters: overwrite agents' data, each agent by its own steps (as RLlib).

``new_data`` maps agent ids to what that agent's ``SingleAgentEpisode.set_*`` takes, at the same
``at_indices`` for every agent (the index rules of :mod:`ray_sampler.data.lookback`). An agent
id that is not in the episode raises ``KeyError``, before any agent is changed.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray_sampler.data.episode import SingleAgentEpisode
    from ray_sampler.data.lookback import Indices

__all__ = ["MultiAgentSetters"]


class MultiAgentSetters:
    """``set_observations``, ``set_actions``, ``set_rewards``, ``set_extra_model_outputs``."""

    __slots__ = ()
    if TYPE_CHECKING:  # MultiAgentEpisode's own
        agent_episodes: dict[Hashable, SingleAgentEpisode]

    def set_observations(
        self, *, new_data: dict[Hashable, Any], at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        for sa, data in self._targets(new_data):
            sa.set_observations(new_data=data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_actions(
        self, *, new_data: dict[Hashable, Any], at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        for sa, data in self._targets(new_data):
            sa.set_actions(new_data=data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_rewards(
        self, *, new_data: dict[Hashable, Any], at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        for sa, data in self._targets(new_data):
            sa.set_rewards(new_data=data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_extra_model_outputs(
        self,
        *,
        key: str,
        new_data: dict[Hashable, Any],
        at_indices: Indices = None,
        neg_index_as_lookback: bool = False,
    ) -> None:
        for sa, data in self._targets(new_data):
            sa.set_extra_model_outputs(
                key=key, new_data=data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback
            )

    def _targets(self, new_data: dict[Hashable, Any]) -> list[tuple[SingleAgentEpisode, Any]]:
        missing = [aid for aid in new_data if aid not in self.agent_episodes]
        if missing:
            raise KeyError(f"agents {missing} are not in this episode (its agents: {list(self.agent_episodes)})")
        return [(self.agent_episodes[aid], data) for aid, data in new_data.items()]
