"""MultiAgentEpisode's state: ``get_state`` / ``from_state`` as plain Python and numpy data.

The keys are RLlib's where the concept is the same (``id_``, ``env_t_started``, ``env_t``,
``agent_t_started``, ``env_t_to_agent_t``, ``_hanging_*``, ``is_terminated``, ``is_truncated``,
``_agent_to_module_mapping``, ``agent_episodes`` as a list of ``(agent_id, state)`` pairs,
``custom_data``), plus ``len_lookback_buffer`` and ``done_agents``, which RLlib keeps elsewhere
or not at all. Nothing in it is pickled: the mapping function and the spaces (gymnasium objects)
are left out, also from each agent's state, and ``from_state`` takes them as arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EpisodeError

if TYPE_CHECKING:
    from ray_sampler.data.multi_agent_episode import MultiAgentEpisode

__all__ = ["episode_from_state", "episode_state"]

_SPACE_KEYS = ("observation_space", "action_space")


def episode_state(ep: MultiAgentEpisode) -> dict[str, Any]:
    """``ep``'s state (see the module docstring); hanging data and custom data are copies."""
    agents = []
    for aid, sa in ep.agent_episodes.items():
        sa_state = sa.get_state()
        agents.append((aid, {k: v for k, v in sa_state.items() if k not in _SPACE_KEYS}))
    return {
        "id_": ep.id_,
        "env_t_started": ep.env_t_started,
        "env_t": ep.env_t,
        "len_lookback_buffer": ep.len_lookback_buffer,
        "agent_t_started": ep.agent_t_started,
        "is_terminated": ep.is_terminated,
        "is_truncated": ep.is_truncated,
        "agent_episodes": agents,
        "env_t_to_agent_t": {aid: list(m) for aid, m in ep._maps.items()},  # noqa: SLF001
        "_hanging_actions_end": copy.deepcopy(ep._hanging_actions_end),  # noqa: SLF001
        "_hanging_extra_model_outputs_end": copy.deepcopy(ep._hanging_extra_model_outputs_end),  # noqa: SLF001
        "_hanging_rewards_end": dict(ep._hanging_rewards_end),  # noqa: SLF001
        "_hanging_rewards_begin": dict(ep._hanging_rewards_begin),  # noqa: SLF001
        "done_agents": sorted(ep._done_agents, key=str),  # noqa: SLF001
        "_agent_to_module_mapping": ep.agent_to_module_mapping,
        "custom_data": copy.deepcopy(ep.custom_data),
    }


def episode_from_state(
    cls: type[MultiAgentEpisode],
    state: dict[str, Any],
    *,
    observation_space: dict[Hashable, gym.Space] | gym.spaces.Dict | None,
    action_space: dict[Hashable, gym.Space] | gym.spaces.Dict | None,
    agent_to_module_mapping_fn: Callable[..., str] | None,
) -> MultiAgentEpisode:
    """Rebuilds a chunk from ``episode_state`` output, then ``validate()``s it."""
    ep = cls(
        state["id_"], observation_space=observation_space, action_space=action_space,
        env_t_started=state["env_t_started"], agent_module_ids=state["_agent_to_module_mapping"],
        agent_to_module_mapping_fn=agent_to_module_mapping_fn,
    )  # fmt: skip
    ep.env_t = state["env_t"]
    ep._map_lookback = state["len_lookback_buffer"]
    ep.is_terminated, ep.is_truncated = state["is_terminated"], state["is_truncated"]
    spaces = (ep.observation_space, ep.action_space)
    ep.agent_episodes = {
        aid: SingleAgentEpisode.from_state(
            {**s, **{k: s.get(k, space.get(aid)) for k, space in zip(_SPACE_KEYS, spaces, strict=True)}}
        )
        for aid, s in state["agent_episodes"]
    }
    ep._maps = {aid: list(m) for aid, m in state["env_t_to_agent_t"].items()}
    ep._hanging_actions_end = copy.deepcopy(state["_hanging_actions_end"])
    ep._hanging_extra_model_outputs_end = copy.deepcopy(state["_hanging_extra_model_outputs_end"])
    ep._hanging_rewards_end = dict(state["_hanging_rewards_end"])
    ep._hanging_rewards_begin = dict(state["_hanging_rewards_begin"])
    ep._done_agents = set(state["done_agents"])
    ep._custom_data = copy.deepcopy(state["custom_data"])
    ep._is_started = True
    ep._to_act = None
    ep.validate()
    want = {aid: sa.t_started for aid, sa in ep.agent_episodes.items()}
    if "agent_t_started" in state and dict(state["agent_t_started"]) != want:
        raise EpisodeError(f"from_state: 'agent_t_started' {state['agent_t_started']} differs from the agents' {want}")
    return ep
