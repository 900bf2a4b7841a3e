"""The multi-agent runner's fast engine: a sub-env's full steps held as lists, recorded in bulk.

Most multi-agent envs step the same agents at every env step (``make_multi_agent``, most Parallel
PettingZoo envs, MPE). For a sub-env whose episode is in that state (``MultiAgentEpisode.
full_step_agents``), the runner keeps each env step's dicts as they came (the env's observations,
rewards and infos, its own actions and model outputs) in a ``FullSteps`` buffer instead of
recording them agent by agent, and hands them to the episode in one call
(``MultiAgentEpisode.add_full_steps``) when the episode is needed: it ends, a chunk is cut, a
sub-env fails, or a step does not fit (``fits``: an agent ends alone, joins, skips a turn, or gets
a reward or info without acting). Such a step goes the general way, and the episode stays there
until it ends or is cut. Both ways record the same episode: the bulk call is the per-step call
repeated, with the checks that a full step cannot fail left out.

The modules' forward passes are batched over the vector step either way; a sub-env in the
buffer's state also keeps its agents' module ids (``mapping``), so grouping the agents by module
reads no episode.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ray_sampler.data.multi_agent_episode import ALL, MultiAgentEpisode

__all__ = ["FullSteps", "fits"]


class FullSteps:
    """The full env steps of one episode not yet recorded in it, and its agents' modules."""

    __slots__ = ("actions", "agent_set", "agents", "extras", "infos", "mapping", "observations", "rewards")

    def __init__(self, episode: MultiAgentEpisode, agents: tuple[Hashable, ...]) -> None:
        self.agents = agents
        self.agent_set = frozenset(agents)
        self.mapping = tuple((aid, episode.module_for(aid)) for aid in agents)
        self.observations: list[dict[Hashable, Any]] = []
        self.actions: list[dict[Hashable, Any]] = []
        self.rewards: list[dict[Hashable, Any]] = []
        self.infos: list[dict[Hashable, Any]] = []
        self.extras: list[dict[Hashable, dict[str, Any]]] = []

    @classmethod
    def of(cls, episode: MultiAgentEpisode) -> FullSteps | None:
        """A buffer for ``episode`` if it can go on by full steps now, else None."""
        agents = episode.full_step_agents()
        return None if agents is None else cls(episode, agents)

    def __len__(self) -> int:
        return len(self.actions)

    def add(self, obs: dict, actions: dict, rewards: dict, infos: dict, extras: dict) -> None:
        """One step; the env's dicts are copied (an env may hand back the same dict, changed, every
        step), the runner's own (``actions``, ``extras``) are new every step."""
        self.observations.append(dict(obs))
        self.actions.append(actions)
        self.rewards.append(dict(rewards))
        self.infos.append(dict(infos))
        self.extras.append(extras)

    def flush(self, episode: MultiAgentEpisode, terminateds: Any = None, truncateds: Any = None) -> None:
        """Records the held steps in ``episode`` (the flags: the last one's, if it ended it) and empties the buffer."""
        if self.actions:
            episode.add_full_steps(
                self.observations, self.actions, self.rewards, self.infos, self.extras,
                terminateds=terminateds, truncateds=truncateds,
            )  # fmt: skip
            self.observations, self.actions, self.rewards, self.infos, self.extras = [], [], [], [], []


def fits(
    agents: frozenset[Hashable], obs: dict, rewards: dict, terminateds: dict, truncateds: dict, infos: dict
) -> bool:
    """Whether an env step of a buffer's ``agents`` is a full one: each got its next observation,
    rewards and infos went to none else, and no agent ended alone (the whole episode may end)."""
    if obs.keys() != agents or not (rewards.keys() <= agents and infos.keys() <= agents):
        return False
    if terminateds.get(ALL) or truncateds.get(ALL):
        return terminateds.keys() - agents <= {ALL} and truncateds.keys() - agents <= {ALL}
    return not (any(terminateds.values()) or any(truncateds.values())) and (
        terminateds.keys() - agents <= {ALL} and truncateds.keys() - agents <= {ALL}
    )
