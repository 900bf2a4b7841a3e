"""MultiAgentEpisode: one multi-agent episode chunk, a SingleAgentEpisode per agent on one env-step clock.

Env steps are counted from the reset (env step 0 holds the reset observations). An agent takes
part only in the env steps where it receives an observation: ``env_t_to_agent_t[agent]`` maps
each env step of the chunk (its lookback first) to the agent's own observation index there, or
``SKIP_ENV_TS`` (-1) where it got none. An agent acts on every observation it gets; if the env
sends no observation back after the action (turn-based play), the action *hangs* with the rewards
that arrive meanwhile, and the agent's step is completed, with those rewards summed, at its next
observation. Rewards that arrive before an agent's first observation are kept apart
(``get_return(include_hanging_rewards=True)`` counts them) and are never part of a step.

The episode ends when the env sets ``"__all__"`` in its terminateds or truncateds. A time limit
(``truncateds["__all__"]``) leaves the episode and every agent still running *truncated* and not
terminated, so a learner can bootstrap; an agent's own flags win over ``"__all__"``'s.

``cut(len_lookback_buffer=H)`` returns the continuation: the same ``id_``, ``env_t_started`` at
this chunk's end, each running agent's chunk cut so that its lookback holds the agent's steps of
the last H env steps (and always its last observation, however old: a hanging agent needs it), and
the hanging actions and rewards carried over. A hanging agent's step belongs to the chunk in which
its next observation arrives, so concatenating the chunks gives back the whole episode with
nothing counted twice.

>>> ep = MultiAgentEpisode()
>>> ep.add_env_reset(observations={"a": 0, "b": 0})
>>> ep.add_env_step({"a": 1}, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.5},
...                 terminateds={"__all__": False}, truncateds={"__all__": False})
>>> sorted(ep.get_agents_to_act()), ep.env_t_to_agent_t["b"].tolist(), ep.get_return(include_hanging_rewards=True)
(['a'], [0, -1], 1.5)
>>> cont = ep.cut()
>>> cont.add_env_step({"a": 2, "b": 1}, {"a": 1}, {"a": 1.0, "b": 2.0},
...                   terminateds={"__all__": False}, truncateds={"__all__": True})
>>> cont.is_truncated, cont.is_terminated, cont.agent_episodes["b"].get_rewards(), cont.agent_steps()
(True, False, [2.5], 2)
>>> ep.concat_episode(cont)
>>> ep.env_steps(), ep.agent_steps(), ep.get_return()
(2, 3, 4.5)
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.multi_agent_getters import MultiAgentGetters
from ray_sampler.data.multi_agent_setters import MultiAgentSetters
from ray_sampler.data.multi_agent_slicing import MultiAgentSlicing, record_data
from ray_sampler.data.multi_agent_state import episode_from_state, episode_state
from ray_sampler.errors import EpisodeError, MultiAgentEnvError
from ray_sampler.validate import check_int

__all__ = ["ALL", "DEFAULT_MODULE_ID", "SKIP_ENV_TS", "AgentID", "ModuleID", "MultiAgentEpisode"]

AgentID = Hashable
ModuleID = str
ALL = "__all__"
"""The key of terminateds and truncateds that ends the whole episode."""
SKIP_ENV_TS = -1
"""``env_t_to_agent_t``'s value at an env step where the agent got no observation (RLlib's ``"S"``)."""
DEFAULT_MODULE_ID = "default_policy"
"""The module every agent maps to when no mapping function says otherwise (RLlib's name)."""


class MultiAgentEpisode(MultiAgentGetters, MultiAgentSetters, MultiAgentSlicing):
    """A multi-agent episode chunk (see the module docstring for its rules).

    ``observation_space`` and ``action_space`` are per-agent dicts (or ``gymnasium.spaces.Dict``)
    handed to each agent's SingleAgentEpisode. ``agent_to_module_mapping_fn(agent_id, episode)``
    picks an agent's module once per episode (``module_for``); it is not part of the episode's state,
    the mapping it made is. The constructor records data given as lists of per-env-step dicts
    (``observations`` one longer than ``actions`` and ``rewards``) by replaying them, the first
    ``len_lookback_buffer`` env steps (``"auto"``: all of them, RLlib's default; ours is 0) becoming
    lookback; :mod:`ray_sampler.data.multi_agent_slicing` has the rules, RLlib's, for
    ``env_t_started``, ``agent_t_started`` and agents that end or skip env steps.
    """

    __slots__ = (
        "_agent_to_module_mapping",
        "_custom_data",
        "_done_agents",
        "_hanging_actions_end",
        "_hanging_extra_model_outputs_end",
        "_hanging_rewards_begin",
        "_hanging_rewards_end",
        "_is_started",
        "_map_lookback",
        "_maps",
        "_to_act",
        "action_space",
        "agent_episodes",
        "agent_to_module_mapping_fn",
        "env_t",
        "env_t_started",
        "id_",
        "is_terminated",
        "is_truncated",
        "observation_space",
    )

    def __init__(
        self,
        id_: str | None = None,
        *,
        observations: list[dict[AgentID, Any]] | None = None,
        observation_space: dict[AgentID, gym.Space] | gym.spaces.Dict | None = None,
        infos: list[dict[AgentID, Any]] | None = None,
        actions: list[dict[AgentID, Any]] | None = None,
        action_space: dict[AgentID, gym.Space] | gym.spaces.Dict | None = None,
        rewards: list[dict[AgentID, Any]] | None = None,
        terminateds: dict[AgentID, bool] | bool = False,
        truncateds: dict[AgentID, bool] | bool = False,
        extra_model_outputs: list[dict[AgentID, dict[str, Any]]] | None = None,
        env_t_started: int = 0,
        agent_t_started: dict[AgentID, int] | None = None,
        len_lookback_buffer: int | str = 0,
        agent_module_ids: dict[AgentID, ModuleID] | None = None,
        agent_to_module_mapping_fn: Callable[..., ModuleID] | None = None,
    ) -> None:
        self.id_ = uuid.uuid4().hex if id_ is None else id_
        self.observation_space = dict(observation_space or {})
        self.action_space = dict(action_space or {})
        self.agent_to_module_mapping_fn = agent_to_module_mapping_fn
        self.env_t_started = self.env_t = check_int("env_t_started", env_t_started, minimum=0, error=EpisodeError)
        self.is_terminated = self.is_truncated = False
        self.agent_episodes: dict[AgentID, SingleAgentEpisode] = {}
        self._maps: dict[AgentID, list[int]] = {}
        self._map_lookback = 0
        self._hanging_actions_end: dict[AgentID, Any] = {}
        self._hanging_extra_model_outputs_end: dict[AgentID, dict[str, Any]] = {}
        self._hanging_rewards_end: dict[AgentID, float] = {}
        self._hanging_rewards_begin: dict[AgentID, float] = {}
        self._done_agents: set[AgentID] = set()
        self._agent_to_module_mapping: dict[AgentID, ModuleID] = dict(agent_module_ids or {})
        self._custom_data: dict[str, Any] = {}
        self._to_act: frozenset[AgentID] | None = None  # get_agents_to_act's, until the next change
        self._is_started = False  # add_env_reset was called (or this is a cut's continuation)
        if observations:
            record_data(
                self, observations, infos=infos, actions=actions, rewards=rewards, terminateds=terminateds,
                truncateds=truncateds, extra_model_outputs=extra_model_outputs,
                len_lookback_buffer=len_lookback_buffer, env_t_started=env_t_started, agent_t_started=agent_t_started,
            )  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"MultiAgentEpisode(id_={self.id_!r}, env_t_started={self.env_t_started}, len={len(self)}, "
            f"agents={list(self.agent_episodes)}, terminated={self.is_terminated}, truncated={self.is_truncated})"
        )

    # ---------------------------------------------------------------- state
    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    @property
    def is_reset(self) -> bool:
        return self._is_started or bool(self._maps) or self.env_t > self.env_t_started

    @property
    def is_numpy(self) -> bool:
        return bool(self.agent_episodes) and all(sa.is_numpy for sa in self.agent_episodes.values())

    @property
    def len_lookback_buffer(self) -> int:
        """Env steps of lookback before this chunk's first env step (its ``env_t_to_agent_t`` covers them)."""
        return self._map_lookback

    @property
    def agent_t_started(self) -> dict[AgentID, int]:
        """Each agent's own timestep at this chunk's start (its chunk's ``t_started``)."""
        return {aid: sa.t_started for aid, sa in self.agent_episodes.items()}

    @property
    def agent_ids(self) -> list[AgentID]:
        """Agents that have received an observation in this chunk or its lookback, or carry on into it."""
        return list(self.agent_episodes)

    @property
    def env_t_to_agent_t(self) -> dict[AgentID, np.ndarray]:
        """Per agent, its observation index at each env step of the lookback and the chunk
        (``len_lookback_buffer + len + 1`` entries), ``SKIP_ENV_TS`` where it got none (copies)."""
        return {aid: np.asarray(m, dtype=np.int64) for aid, m in self._maps.items()}

    @property
    def custom_data(self) -> dict[str, Any]:
        return self._custom_data

    def __len__(self) -> int:
        return self.env_t - self.env_t_started

    def env_steps(self) -> int:
        """Env steps in this chunk (lookback excluded)."""
        return len(self)

    def agent_steps(self) -> int:
        """Agent steps (actions whose step completed) in this chunk, all agents together."""
        return sum(len(sa) for sa in self.agent_episodes.values())

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        """The sum of every agent's step rewards in this chunk; with ``include_hanging_rewards``, also
        the rewards waiting for an agent's next observation and those that came before its first."""
        total = sum(sa.get_return() for sa in self.agent_episodes.values())
        if include_hanging_rewards:
            total += sum(self._hanging_rewards_end.values()) + sum(self._hanging_rewards_begin.values())
        return float(total)

    def get_agents_to_act(self) -> frozenset[AgentID]:
        """Agents that got an observation at the latest env step and must act on it."""
        if self._to_act is None:
            done = self._done_agents
            self._to_act = frozenset(aid for aid, m in self._maps.items() if m[-1] != SKIP_ENV_TS and aid not in done)
        return self._to_act

    def get_agents_that_stepped(self) -> set[AgentID]:
        """Agents that got an observation at the latest env step (done ones included)."""
        return {aid for aid, m in self._maps.items() if m[-1] != SKIP_ENV_TS}

    def get_hanging_action(self, agent_id: AgentID) -> Any:
        """The action ``agent_id`` took that still waits for its next observation (KeyError if none)."""
        return self._hanging_actions_end[agent_id]

    def module_for(self, agent_id: AgentID) -> ModuleID:
        """The module that acts for ``agent_id`` in this episode: decided once, by
        ``agent_to_module_mapping_fn(agent_id, episode)`` (``"default_policy"`` without one)."""
        mid = self._agent_to_module_mapping.get(agent_id)
        if mid is None:
            fn = self.agent_to_module_mapping_fn
            mid = DEFAULT_MODULE_ID if fn is None else fn(agent_id, self)
            self._agent_to_module_mapping[agent_id] = mid
        return mid

    @property
    def agent_to_module_mapping(self) -> dict[AgentID, ModuleID]:
        return dict(self._agent_to_module_mapping)

    # ---------------------------------------------------------------- growing
    def add_env_reset(self, *, observations: dict[AgentID, Any], infos: dict[AgentID, Any] | None = None) -> None:
        """The reset's observations (and infos), one per agent that acts first."""
        if self.is_reset:
            raise EpisodeError(f"add_env_reset: episode {self.id_!r} already holds data; start a new episode")
        infos = infos or {}
        self._to_act = None
        self._is_started = True
        for aid, obs in observations.items():
            self._start_agent(aid, obs, infos.get(aid), num_skips=0)

    def _start_agent(self, aid: AgentID, obs: Any, info: Any, *, num_skips: int) -> SingleAgentEpisode:
        if aid == ALL:
            raise MultiAgentEnvError(f"an observation for {ALL!r} at env step {self.env_t}: it is not an agent id")
        sa = SingleAgentEpisode(
            f"{self.id_}/{aid}",
            observation_space=self.observation_space.get(aid),
            action_space=self.action_space.get(aid),
        )
        sa.add_env_reset(obs, info if info is not None else {})
        self.agent_episodes[aid] = sa
        self._maps[aid] = [SKIP_ENV_TS] * num_skips + [0]
        self.module_for(aid)
        return sa

    def add_env_step(
        self,
        observations: dict[AgentID, Any],
        actions: dict[AgentID, Any],
        rewards: dict[AgentID, Any],
        infos: dict[AgentID, Any] | None = None,
        *,
        terminateds: dict[AgentID, bool] | None = None,
        truncateds: dict[AgentID, bool] | None = None,
        extra_model_outputs: dict[AgentID, dict[str, Any]] | None = None,
    ) -> None:
        """One env step: the actions the agents to act took, and what the env returned for it.

        MultiAgentEnvError, naming the agent and the env step, for an action from an agent that got
        no observation to act on (or none from one that did), data for an agent that is done, and a
        truncated agent whose last action got no observation to bootstrap from. Nothing is changed
        when it is raised.
        """
        if self.is_done:
            raise EpisodeError(f"add_env_step: episode {self.id_!r} is done (terminated or truncated)")
        if not self.is_reset:
            raise EpisodeError("add_env_step: call add_env_reset first")
        terminateds, truncateds = terminateds or {}, truncateds or {}
        infos, emos = infos or {}, extra_model_outputs or {}
        if self._is_full_step(observations, actions, rewards, terminateds, truncateds, infos):
            self._add_full_step(observations, actions, rewards, infos, terminateds, truncateds, emos)
            self._to_act = None
            return
        t = self.env_t + 1
        self._check_step(t, observations, actions, rewards, terminateds, truncateds)
        all_term, all_trunc = bool(terminateds.get(ALL, False)), bool(truncateds.get(ALL, False))
        ending = all_term or all_trunc
        agents = dict.fromkeys([*observations, *actions, *rewards, *terminateds, *truncateds, *infos])
        agents.pop(ALL, None)
        if ending:  # every running agent ends with the episode
            agents.update(dict.fromkeys(a for a in self.agent_episodes if a not in self._done_agents))
        num_maps = len(self._map_lookback_list())
        for aid in agents:
            reward = float(rewards.get(aid, 0.0))
            term, trunc = bool(terminateds.get(aid, False)), bool(truncateds.get(aid, False))
            if ending and not (term or trunc):
                term, trunc = not all_trunc, all_trunc
            sa = self.agent_episodes.get(aid)
            got_obs = aid in observations
            if aid in actions:
                assert sa is not None, "checked: only agents to act act"
                if got_obs:
                    sa.add_env_step(
                        observations[aid], actions[aid], reward, infos.get(aid),
                        terminated=term, truncated=trunc and not term, extra_model_outputs=emos.get(aid),
                    )  # fmt: skip
                else:
                    self._hanging_actions_end[aid] = actions[aid]
                    if aid in emos:
                        self._hanging_extra_model_outputs_end[aid] = emos[aid]
                    self._hanging_rewards_end[aid] = reward
                    if term or trunc:
                        got_obs = self._finish_hanging(aid, t, term, infos.get(aid))
            elif aid in self._hanging_actions_end:
                assert sa is not None, "a hanging action belongs to a started agent"
                self._hanging_rewards_end[aid] += reward
                if got_obs:
                    sa.add_env_step(
                        observations[aid], self._hanging_actions_end.pop(aid), self._hanging_rewards_end.pop(aid),
                        infos.get(aid), terminated=term, truncated=trunc and not term,
                        extra_model_outputs=self._hanging_extra_model_outputs_end.pop(aid, None),
                    )  # fmt: skip
                elif term or trunc:
                    got_obs = self._finish_hanging(aid, t, term, infos.get(aid))
            elif sa is None:  # not started: rewards before the first observation are never learned from
                if reward or aid in self._hanging_rewards_begin:
                    self._hanging_rewards_begin[aid] = self._hanging_rewards_begin.get(aid, 0.0) + reward
                if got_obs:
                    sa = self._start_agent(aid, observations[aid], infos.get(aid), num_skips=num_maps)
                    self._maps[aid].pop()  # the shared append below adds its entry
                if term or trunc:
                    self._done_agents.add(aid)
                    if sa is not None:
                        sa.is_terminated, sa.is_truncated = term, trunc and not term
            if sa is not None and sa.is_done:
                self._done_agents.add(aid)
            if sa is not None and got_obs:
                self._maps.setdefault(aid, [SKIP_ENV_TS] * num_maps).append(sa.t)
        for m in self._maps.values():
            if len(m) == num_maps:
                m.append(SKIP_ENV_TS)
        self.env_t = t
        if ending:
            self.is_truncated = all_trunc
            self.is_terminated = all_term and not all_trunc
        self._to_act = None

    def _is_full_step(
        self, observations: dict, actions: dict, rewards: dict, terminateds: dict, truncateds: dict, infos: dict
    ) -> bool:
        """Whether this step is the common case: every agent to act acted and got its next observation,
        nothing hangs, no agent joins, and no other agent gets data. Such a step breaks no rule the
        full path checks, so the fast path records it without them (same result)."""
        if self._hanging_actions_end:
            return False
        to_act = self.get_agents_to_act()
        if actions.keys() != to_act or observations.keys() != to_act:
            return False
        if not (rewards.keys() <= to_act and infos.keys() <= to_act):
            return False
        for flags in (terminateds, truncateds):
            if any(a not in to_act and a != ALL for a in flags):
                return False
        return len(self._maps) == len(to_act) + len(self._done_agents & self._maps.keys())

    def _add_full_step(
        self,
        observations: dict,
        actions: dict,
        rewards: dict,
        infos: dict,
        terminateds: dict,
        truncateds: dict,
        emos: dict,
    ) -> None:
        all_term, all_trunc = bool(terminateds.get(ALL, False)), bool(truncateds.get(ALL, False))
        ending = all_term or all_trunc
        for aid, m in self._maps.items():
            if aid not in observations:
                m.append(SKIP_ENV_TS)
                continue
            term, trunc = bool(terminateds.get(aid, False)), bool(truncateds.get(aid, False))
            if ending and not (term or trunc):
                term, trunc = not all_trunc, all_trunc
            sa = self.agent_episodes[aid]
            sa.add_env_step(
                observations[aid], actions[aid], float(rewards.get(aid, 0.0)), infos.get(aid),
                terminated=term, truncated=trunc and not term, extra_model_outputs=emos.get(aid),
            )  # fmt: skip
            if term or trunc:
                self._done_agents.add(aid)
            m.append(sa.t)
        self.env_t += 1
        if ending:
            self.is_truncated = all_trunc
            self.is_terminated = all_term and not all_trunc

    def full_step_agents(self) -> tuple[AgentID, ...] | None:
        """The agents, in order, if the episode can go on by full steps (``add_full_steps``): it
        runs, nothing hangs, and every agent that started and is not done is to act; else None."""
        if self.is_done or self._hanging_actions_end:
            return None
        to_act = self.get_agents_to_act()
        if not to_act or len(to_act) + len(self._done_agents) != len(self._maps):
            return None
        return tuple(to_act)  # the general way's order: the modules get the same batches

    def add_full_steps(
        self,
        observations: list[dict[AgentID, Any]],
        actions: list[dict[AgentID, Any]],
        rewards: list[dict[AgentID, Any]],
        infos: list[dict[AgentID, Any]],
        extra_model_outputs: list[dict[AgentID, dict[str, Any]]],
        *,
        terminateds: dict[AgentID, bool] | None = None,
        truncateds: dict[AgentID, bool] | None = None,
    ) -> None:
        """Several env steps at once, recorded as ``add_env_step`` once per step records them, for
        steps the caller checked are full: the episode's ``full_step_agents()`` acted and got their
        next observation at each, rewards and infos went to no other agent, and no flag was set
        before the last step (``terminateds`` and ``truncateds`` are the last step's). Agents done
        earlier skip the steps."""
        n = len(actions)
        if not n:
            return
        terminateds, truncateds = terminateds or {}, truncateds or {}
        all_term, all_trunc = bool(terminateds.get(ALL, False)), bool(truncateds.get(ALL, False))
        ending = all_term or all_trunc
        done = self._done_agents
        for aid, m in self._maps.items():
            if aid in done:  # ended earlier: it skips these env steps
                m.extend([SKIP_ENV_TS] * n)
                continue
            term, trunc = bool(terminateds.get(aid, False)), bool(truncateds.get(aid, False))
            if ending and not (term or trunc):
                term, trunc = not all_trunc, all_trunc
            sa = self.agent_episodes[aid]
            t = sa.t
            sa.add_env_steps(
                [o[aid] for o in observations], [a[aid] for a in actions],
                [float(r.get(aid, 0.0)) for r in rewards], [i.get(aid) for i in infos],
                [e.get(aid) for e in extra_model_outputs], terminated=term, truncated=trunc and not term,
            )  # fmt: skip
            if term or trunc:
                self._done_agents.add(aid)
            m.extend(range(t + 1, t + n + 1))
        self.env_t += n
        if ending:
            self.is_truncated = all_trunc
            self.is_terminated = all_term and not all_trunc
        self._to_act = None

    def _map_lookback_list(self) -> list[int]:
        return next(iter(self._maps.values()), [SKIP_ENV_TS] * (self._map_lookback + len(self) + 1))

    def _finish_hanging(self, aid: AgentID, t: int, terminated: bool, info: Any) -> bool:
        """An agent whose action hangs ends without an observation: terminated, its step completes on
        its last observation repeated (nothing bootstraps from it); truncated, it cannot."""
        assert terminated, f"_check_step refuses agent {aid!r} truncated without an observation at env step {t}"
        sa = self.agent_episodes[aid]
        sa.add_env_step(
            sa.get_observations(-1), self._hanging_actions_end.pop(aid), self._hanging_rewards_end.pop(aid),
            info, terminated=True, extra_model_outputs=self._hanging_extra_model_outputs_end.pop(aid, None),
        )  # fmt: skip
        return True

    def _check_step(
        self, t: int, observations: dict, actions: dict, rewards: dict, terminateds: dict, truncateds: dict
    ) -> None:
        to_act = self.get_agents_to_act()
        for aid in actions:
            if aid not in to_act:
                raise MultiAgentEnvError(
                    f"an action for agent {aid!r} at env step {t - 1}: it got no observation to act on "
                    f"(agents to act: {sorted(map(str, to_act))})"
                )
        for aid in to_act:
            if aid not in actions:
                raise MultiAgentEnvError(
                    f"no action for agent {aid!r} at env step {t - 1}: it got an observation and must act on it"
                )
        for name, data in (("an observation", observations), ("a reward", rewards)):
            for aid in data:
                if aid in self._done_agents and (name != "a reward" or data[aid]):
                    raise MultiAgentEnvError(f"{name} for agent {aid!r} at env step {t}, which is already done")
        for name, flags in (("terminateds", terminateds), ("truncateds", truncateds)):
            for aid, flag in flags.items():
                if aid != ALL and flag and aid in self._done_agents:
                    raise MultiAgentEnvError(f"{name}[{aid!r}] at env step {t}: agent {aid!r} is already done")
        all_trunc = bool(truncateds.get(ALL, False))
        for aid in [*(a for a in actions if a not in observations), *self._hanging_actions_end]:
            if aid in observations or terminateds.get(aid):
                continue
            if truncateds.get(aid) or all_trunc:
                raise MultiAgentEnvError(
                    f"agent {aid!r} was truncated at env step {t} without a last observation after its action: "
                    f"a truncated agent needs one to bootstrap from; send it with the truncation"
                )

    # ---------------------------------------------------------------- chunks
    def cut(self, len_lookback_buffer: int = 0, *, agent_lookback: int = 0) -> MultiAgentEpisode:
        """The continuation chunk (see the module docstring): length 0, same ``id_``, up to
        ``len_lookback_buffer`` env steps of lookback, the running agents and their hanging data.
        Each running agent's chunk keeps at least ``agent_lookback`` of its own steps as lookback (as
        many as it has), however many env steps ago they were: what a frame stack or a recurrent
        state of the agent needs, in turn-based play too."""
        h = check_int("len_lookback_buffer", len_lookback_buffer, minimum=0, error=EpisodeError)
        own = check_int("agent_lookback", agent_lookback, minimum=0, error=EpisodeError)
        if self.is_done:
            raise EpisodeError(f"cut: episode {self.id_!r} is done; only ongoing episodes continue")
        h = min(h, self._map_lookback + len(self))
        cont = MultiAgentEpisode(
            self.id_, observation_space=self.observation_space, action_space=self.action_space,
            env_t_started=self.env_t, agent_module_ids=self._agent_to_module_mapping,
            agent_to_module_mapping_fn=self.agent_to_module_mapping_fn,
        )  # fmt: skip
        cont._map_lookback = h
        cont._is_started = True
        for aid, sa in self.agent_episodes.items():
            if aid in self._done_agents:
                continue
            window = self._maps[aid][-(h + 1) :]
            seen = sum(1 for j in window if j != SKIP_ENV_TS)
            cont.agent_episodes[aid] = sa.cut(len_lookback_buffer=max(seen - 1, own))
            cont._maps[aid] = list(window)
        cont._hanging_actions_end = dict(self._hanging_actions_end)
        cont._hanging_extra_model_outputs_end = copy.deepcopy(self._hanging_extra_model_outputs_end)
        cont._hanging_rewards_end = dict(self._hanging_rewards_end)
        cont._hanging_rewards_begin = {
            aid: r for aid, r in self._hanging_rewards_begin.items() if aid not in self.agent_episodes
        }
        cont._done_agents = {aid for aid in self._done_agents if aid not in self.agent_episodes}
        cont._custom_data = copy.deepcopy(self._custom_data)
        return cont

    def concat_episode(self, other: MultiAgentEpisode) -> None:
        """Appends ``other``, this chunk's continuation, in place: every agent's chunk is joined (its
        boundary observation checked), agents that joined in ``other`` are added, and ``other``'s
        hanging data replaces this chunk's."""
        if other.id_ != self.id_:
            raise EpisodeError(f"concat_episode: 'id_' differs (this {self.id_!r}, other {other.id_!r})")
        if self.is_done:
            raise EpisodeError(f"concat_episode: episode {self.id_!r} is done; nothing can follow it")
        if other.env_t_started != self.env_t:
            raise EpisodeError(
                f"concat_episode: other's 'env_t_started' must equal this chunk's env_t={self.env_t} "
                f"(got {other.env_t_started})"
            )
        running = {aid for aid in self.agent_episodes if aid not in self._done_agents}
        missing = running - other.agent_episodes.keys()
        if missing:
            raise EpisodeError(
                f"concat_episode: agents {sorted(map(str, missing))} are running here but absent from other"
            )
        num_new, num_maps = len(other), len(self._map_lookback_list())
        joined: dict[AgentID, SingleAgentEpisode] = {}
        for aid, osa in other.agent_episodes.items():  # check every agent before changing any
            mine = self.agent_episodes.get(aid)
            if mine is None:
                if osa.t_started != 0 or osa.len_lookback_buffer:
                    raise EpisodeError(
                        f"concat_episode: agent {aid!r} continues in other (its t_started is {osa.t_started}) "
                        f"but has no chunk here"
                    )
                joined[aid] = osa.slice(slice(0, None))
            elif other._maps[aid][other._map_lookback] != self._maps[aid][-1]:
                raise EpisodeError(
                    f"concat_episode: agent {aid!r}'s observation index at env step {self.env_t} differs "
                    f"(this {self._maps[aid][-1]}, other {other._maps[aid][other._map_lookback]})"
                )
        for aid, osa in other.agent_episodes.items():
            if aid in joined:
                self.agent_episodes[aid] = joined[aid]
                self._maps[aid] = [SKIP_ENV_TS] * num_maps + other._maps[aid][other._map_lookback + 1 :]
            else:
                self.agent_episodes[aid].concat_episode(osa)
                self._maps[aid].extend(other._maps[aid][other._map_lookback + 1 :])
        for aid, m in self._maps.items():
            if aid not in other._maps:
                m.extend([SKIP_ENV_TS] * num_new)
        self.env_t = other.env_t
        self.is_terminated, self.is_truncated = other.is_terminated, other.is_truncated
        self._hanging_actions_end = dict(other._hanging_actions_end)
        self._hanging_extra_model_outputs_end = copy.deepcopy(other._hanging_extra_model_outputs_end)
        self._hanging_rewards_end = dict(other._hanging_rewards_end)
        self._hanging_rewards_begin.update(other._hanging_rewards_begin)
        self._done_agents |= other._done_agents | {a for a, sa in self.agent_episodes.items() if sa.is_done}
        self._agent_to_module_mapping.update(other._agent_to_module_mapping)
        self._custom_data.update(other._custom_data)
        self._to_act = None

    # ---------------------------------------------------------------- forms, state, checks
    def to_numpy(self) -> MultiAgentEpisode:
        """Every agent's chunk in numpy form (see ``SingleAgentEpisode.to_numpy``)."""
        for sa in self.agent_episodes.values():
            sa.to_numpy()
        return self

    def get_state(self) -> dict[str, Any]:
        """This chunk's state, plain Python and numpy data (see :mod:`ray_sampler.data.multi_agent_state`)."""
        return episode_state(self)

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        *,
        observation_space: dict[AgentID, gym.Space] | gym.spaces.Dict | None = None,
        action_space: dict[AgentID, gym.Space] | gym.spaces.Dict | None = None,
        agent_to_module_mapping_fn: Callable[..., ModuleID] | None = None,
    ) -> MultiAgentEpisode:
        """Rebuilds a chunk from ``get_state()`` output (the spaces and mapping function, which the
        state leaves out, as arguments), then ``validate()``s it."""
        return episode_from_state(
            cls, state, observation_space=observation_space, action_space=action_space,
            agent_to_module_mapping_fn=agent_to_module_mapping_fn,
        )  # fmt: skip

    def validate(self) -> None:
        """Raises EpisodeError if the chunk's parts do not fit: every agent's chunk valid, every map as
        long as the env steps plus lookback, each agent's observations mapped once and in order, the
        chunk's observations all on its own env steps, hanging data only for running agents, and the
        episode never both terminated and truncated."""
        want = self._map_lookback + len(self) + 1
        if self.is_terminated and self.is_truncated:
            raise EpisodeError(f"validate: episode {self.id_!r} is both terminated and truncated")
        if self._maps.keys() != self.agent_episodes.keys():
            raise EpisodeError(f"validate: agents with a map {sorted(map(str, self._maps))} differ from agents "
                               f"with a chunk {sorted(map(str, self.agent_episodes))}")  # fmt: skip
        for aid, sa in self.agent_episodes.items():
            sa.validate()
            m = self._maps[aid]
            if len(m) != want:
                raise EpisodeError(f"validate: agent {aid!r}'s env_t_to_agent_t has {len(m)} entries; expected {want}")
            seen = [j for j in m if j != SKIP_ENV_TS]
            if seen != list(range(seen[0], seen[0] + len(seen))) if seen else False:
                raise EpisodeError(f"validate: agent {aid!r}'s observation indices are not consecutive: {seen}")
            own = [j for j in m[self._map_lookback + 1 :] if j != SKIP_ENV_TS]
            # its first observation came in this chunk (after no lookback of its own)
            joined_here = own[:1] == [sa.t_started] and all(j == SKIP_ENV_TS for j in m[: self._map_lookback + 1])
            if own != list(range(sa.t_started + (not joined_here), sa.t + 1)):
                raise EpisodeError(
                    f"validate: agent {aid!r}'s env steps in this chunk hold observations {own}; its chunk "
                    f"has {list(range(sa.t_started + 1, sa.t + 1))}"
                )
            if seen and (seen[0] < sa.t_started - sa.len_lookback_buffer or seen[-1] > sa.t):
                raise EpisodeError(f"validate: agent {aid!r}'s map points outside its chunk and lookback")
        for aid in self._hanging_actions_end:
            if aid not in self.agent_episodes or aid in self._done_agents:
                raise EpisodeError(f"validate: agent {aid!r} has a hanging action but is not running")

    def _iter_agents(self, agent_ids: Iterable[AgentID] | AgentID | None) -> list[AgentID]:
        if agent_ids is None:
            return list(self.agent_episodes)
        if isinstance(agent_ids, (list, tuple, set, frozenset)):
            return [a for a in agent_ids if a in self.agent_episodes]
        return [agent_ids] if agent_ids in self.agent_episodes else []
