"""MultiAgentColumnar: many MultiAgentEpisode chunks as one object, the multi-agent transfer format.

Every agent's chunk goes into the single-agent columnar form (:mod:`ray_sampler.data.columnar`),
one ``ColumnarEpisodes`` per module (the agents a module acts for share its spaces; a module
whose agents' data do not stack together gets one per agent), so the bulk of the data is a few
contiguous arrays whatever the number of agents. Beside them, per multi-agent chunk: its id,
env-step span, lookback and flags, its agents in order (``agent_ids``, ``module_ids``, and where
each agent's chunk lies: ``groups`` key and row), every agent's ``env_t_to_agent_t`` (one int
array, chunk after chunk, agent after agent), and the small per-chunk rest (hanging actions and
rewards, agents done before they started, the agent-to-module mapping, ``custom_data``).

>>> from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
>>> ep = MultiAgentEpisode("e", agent_to_module_mapping_fn=lambda aid, episode: "m")
>>> ep.add_env_reset(observations={"a": 0, "b": 0})
>>> going = {"__all__": False}
>>> ep.add_env_step({"a": 1}, {"a": 0, "b": 1}, {"a": 1.0}, terminateds=going, truncateds=going)
>>> col = multi_agent_episodes_to_columnar([ep])
>>> sorted(col.groups), col.num_env_steps, col.num_agent_steps, col.groups["m"].ids
(['m'], 1, 1, ['e/a', 'e/b'])
>>> back = columnar_to_multi_agent_episodes(col)[0]
>>> back.get_hanging_action("b"), back.env_t_to_agent_t["b"].tolist()
(1, [0, -1])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

import numpy as np

from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, episodes_to_columnar, row_offsets
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import DataFormatError, EpisodeError

__all__ = [
    "MultiAgentColumnar",
    "columnar_to_multi_agent_episodes",
    "multi_agent_episodes_to_columnar",
    "pack_episodes",
    "unpack_columnar",
]


@dataclasses.dataclass(frozen=True, eq=False)
class MultiAgentColumnar:
    """Multi-agent chunks in columnar form (see the module docstring)."""

    ids: list[str]
    env_t_started: np.ndarray
    env_t: np.ndarray
    lookback_lens: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    agent_ids: list[list[Hashable]]
    """Per chunk, its agents (those with a chunk of their own), in order."""
    module_ids: list[list[str]]
    """Per chunk, each of its agents' module."""
    agent_rows: list[list[tuple[str, int]]]
    """Per chunk, where each of its agents' chunks is: (key of ``groups``, index there)."""
    maps: np.ndarray
    """Every agent's ``env_t_to_agent_t``, chunk after chunk, agent after agent (each ``lookback + len + 1``)."""
    groups: dict[str, ColumnarEpisodes]
    """The agents' chunks, by module (or by module and agent where a module's agents do not stack)."""
    rest: list[dict[str, Any]]
    """Per chunk: hanging actions, model outputs and rewards, rewards before a first observation,
    agents done before they started, the agent-to-module mapping and ``custom_data``."""
    observation_space: dict[Hashable, Any] = dataclasses.field(default_factory=dict)
    action_space: dict[Hashable, Any] = dataclasses.field(default_factory=dict)

    @property
    def num_episodes(self) -> int:
        return len(self.ids)

    @property
    def num_env_steps(self) -> int:
        """Env steps held (lookback excluded)."""
        return int((self.env_t - self.env_t_started).sum())

    @property
    def num_agent_steps(self) -> int:
        """Agent steps held (lookback excluded)."""
        return sum(g.num_env_steps for g in self.groups.values())


def multi_agent_episodes_to_columnar(episodes: list[MultiAgentEpisode]) -> MultiAgentColumnar:
    """Packs multi-agent chunks (with their lookback) into one MultiAgentColumnar."""
    if not isinstance(episodes, list | tuple) or not episodes:
        raise DataFormatError("'episodes' must be a non-empty list of MultiAgentEpisode")
    members: dict[str, list[SingleAgentEpisode]] = {}
    where: list[list[tuple[str, Hashable]]] = []
    for i, ep in enumerate(episodes):
        if not isinstance(ep, MultiAgentEpisode):
            raise DataFormatError(f"'episodes[{i}]' must be a MultiAgentEpisode (got {type(ep).__name__})")
        placed = []
        for aid, sa in ep.agent_episodes.items():
            mid = ep.module_for(aid)
            members.setdefault(mid, []).append(sa)
            placed.append((mid, aid))
        where.append(placed)
    groups: dict[str, ColumnarEpisodes] = {}
    split: set[str] = set()
    for mid, sas in members.items():
        try:
            groups[mid] = episodes_to_columnar(sas)
        except DataFormatError:  # agents of one module whose data do not stack: one group per agent
            split.add(mid)
    if split:
        per_agent: dict[str, list[SingleAgentEpisode]] = {}
        for ep, placed in zip(episodes, where):
            for mid, aid in placed:
                if mid in split:
                    per_agent.setdefault(_agent_key(mid, aid), []).append(ep.agent_episodes[aid])
        groups.update({key: episodes_to_columnar(sas) for key, sas in per_agent.items()})
    counters: dict[str, int] = {}
    agent_rows: list[list[tuple[str, int]]] = []
    for placed in where:
        rows = []
        for mid, aid in placed:
            key = _agent_key(mid, aid) if mid in split else mid
            rows.append((key, counters.get(key, 0)))
            counters[key] = counters.get(key, 0) + 1
        agent_rows.append(rows)
    maps = [np.asarray(m, np.int64) for ep in episodes for m in ep.env_t_to_agent_t.values()]
    first = episodes[0]
    return MultiAgentColumnar(
        ids=[ep.id_ for ep in episodes],
        env_t_started=np.array([ep.env_t_started for ep in episodes], np.int64),
        env_t=np.array([ep.env_t for ep in episodes], np.int64),
        lookback_lens=np.array([ep.len_lookback_buffer for ep in episodes], np.int64),
        terminated=np.array([ep.is_terminated for ep in episodes], bool),
        truncated=np.array([ep.is_truncated for ep in episodes], bool),
        agent_ids=[[aid for _, aid in placed] for placed in where],
        module_ids=[[mid for mid, _ in placed] for placed in where],
        agent_rows=agent_rows,
        maps=np.concatenate(maps) if maps else np.zeros(0, np.int64),
        groups=groups,
        rest=[_rest(ep) for ep in episodes],
        observation_space=dict(first.observation_space),
        action_space=dict(first.action_space),
    )


def _agent_key(mid: str, aid: Hashable) -> str:
    return f"{mid}/{aid}"


def _rest(ep: MultiAgentEpisode) -> dict[str, Any]:
    state = ep.get_state()
    keys = (
        "_hanging_actions_end",
        "_hanging_extra_model_outputs_end",
        "_hanging_rewards_end",
        "_hanging_rewards_begin",
    )
    out = {k: state[k] for k in keys if state[k]}
    done_unstarted = [a for a in state["done_agents"] if a not in ep.agent_episodes]
    if done_unstarted:
        out["done_agents"] = done_unstarted
    out["_agent_to_module_mapping"] = state["_agent_to_module_mapping"]
    if state["custom_data"]:
        out["custom_data"] = state["custom_data"]
    return out


def columnar_to_multi_agent_episodes(col: MultiAgentColumnar) -> list[MultiAgentEpisode]:
    """Unpacks into MultiAgentEpisodes (every agent's chunk numpy'd), each checked with ``validate``."""
    unpacked = {key: columnar_to_episodes(g) for key, g in col.groups.items()}
    sizes = [
        int(col.lookback_lens[i] + col.env_t[i] - col.env_t_started[i] + 1)
        for i, agents in enumerate(col.agent_ids)
        for _ in agents
    ]
    if sum(sizes) != len(col.maps):
        raise DataFormatError(f"'maps' holds {len(col.maps)} entries; the chunks' agents need {sum(sizes)}")
    offsets = row_offsets(np.asarray(sizes, np.int64))
    out, k = [], 0
    for i, id_ in enumerate(col.ids):
        rest = col.rest[i]
        agents: dict[Hashable, Any] = {}
        maps: dict[Hashable, list[int]] = {}
        for aid, (key, row) in zip(col.agent_ids[i], col.agent_rows[i]):
            agents[aid] = unpacked[key][row].get_state()
            maps[aid] = col.maps[offsets[k] : offsets[k + 1]].tolist()
            k += 1
        done = [a for a, s in agents.items() if s["terminated"] or s["truncated"]] + list(rest.get("done_agents", ()))
        state = {
            "id_": id_,
            "env_t_started": int(col.env_t_started[i]),
            "env_t": int(col.env_t[i]),
            "len_lookback_buffer": int(col.lookback_lens[i]),
            "is_terminated": bool(col.terminated[i]),
            "is_truncated": bool(col.truncated[i]),
            "agent_episodes": list(agents.items()),
            "env_t_to_agent_t": maps,
            "_hanging_actions_end": rest.get("_hanging_actions_end", {}),
            "_hanging_extra_model_outputs_end": rest.get("_hanging_extra_model_outputs_end", {}),
            "_hanging_rewards_end": rest.get("_hanging_rewards_end", {}),
            "_hanging_rewards_begin": rest.get("_hanging_rewards_begin", {}),
            "done_agents": done,
            "_agent_to_module_mapping": rest.get("_agent_to_module_mapping", {}),
            "custom_data": rest.get("custom_data", {}),
        }
        try:
            out.append(
                MultiAgentEpisode.from_state(
                    state, observation_space=col.observation_space, action_space=col.action_space
                )
            )
        except EpisodeError as e:
            raise DataFormatError(f"multi-agent chunk {i} (id_ {id_!r}) does not hold together: {e}") from e
    return out


def pack_episodes(episodes: list[Any]) -> ColumnarEpisodes | MultiAgentColumnar:
    """Single-agent chunks into a ColumnarEpisodes, multi-agent ones into a MultiAgentColumnar."""
    if episodes and isinstance(episodes[0], MultiAgentEpisode):
        return multi_agent_episodes_to_columnar(episodes)
    return episodes_to_columnar(episodes)


def unpack_columnar(col: ColumnarEpisodes | MultiAgentColumnar) -> list[Any]:
    """The chunks of either columnar form."""
    if isinstance(col, MultiAgentColumnar):
        return columnar_to_multi_agent_episodes(col)
    return columnar_to_episodes(col)
