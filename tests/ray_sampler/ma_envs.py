"""Multi-agent test envs: a random agent schedule with exact, checkable data, and a tiny turn-based game."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.sampling.multi_agent_env import ALL, MultiAgentEnv

__all__ = [
    "CallGame",
    "RandomScheduleEnv",
    "RecallEnv",
    "RecordingEnv",
    "SignalEnv",
    "TurnTakingEnv",
    "assert_same_episode",
    "canonical",
]


class RandomScheduleEnv(MultiAgentEnv):
    """Agents ``a0 .. a{n-1}`` on a random schedule (from the reset's seed): each joins at a random
    step, gets an observation back after acting only sometimes (its action hangs meanwhile), leaves
    by terminating (with or without a last observation) or truncating, and gets rewards on random
    steps, before its first observation too. The episode ends at ``max_steps`` (``"__all__"``
    truncated: every agent whose action hangs gets a last observation), by chance (terminated), or
    when every agent has left. An observation is ``[env step, agent index]``; a reward is
    ``env step + agent index / 10``: both say exactly where they came from."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        config = config or {}
        n = int(config.get("num_agents", 3))
        self.max_steps = int(config.get("max_steps", 30))
        self.p_obs = float(config.get("p_obs", 0.6))
        self.p_join = float(config.get("p_join", 0.3))
        self.p_leave = float(config.get("p_leave", 0.05))
        self.p_end = float(config.get("p_end", 0.02))
        self.p_reward = float(config.get("p_reward", 0.5))
        self.possible_agents = [f"a{i}" for i in range(n)]
        space = gym.spaces.Box(0, 10**6, (2,), np.int64)
        self.observation_spaces = dict.fromkeys(self.possible_agents, space)
        self.action_spaces = {a: gym.spaces.Discrete(3) for a in self.possible_agents}
        self._rng = np.random.default_rng(config.get("seed"))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.t = 0
        self.started: set[str] = set()
        self.done: set[str] = set()
        self.hanging: set[str] = set()
        first = [a for a in self.possible_agents if self._rng.random() < 0.5] or [self.possible_agents[0]]
        self.started.update(first)
        self.agents = list(first)
        return {a: self._obs(a) for a in first}, {a: {"t": 0} for a in first}

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t, self.possible_agents.index(agent)], np.int64)

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rng = self._rng
        self.t += 1
        self.hanging |= set(action_dict)
        obs: dict[str, Any] = {}
        term: dict[str, bool] = {}
        trunc: dict[str, bool] = {}
        for a in sorted(self.hanging):
            if rng.random() < self.p_obs:
                obs[a] = self._obs(a)
            elif rng.random() < self.p_leave:
                term[a] = True  # leaves without a last observation
        for a in self.possible_agents:
            if a not in self.started and rng.random() < self.p_join:
                self.started.add(a)
                obs[a] = self._obs(a)
        for a in list(obs):
            u = rng.random()
            if u < self.p_leave:
                term[a] = True
            elif u < 2 * self.p_leave:
                trunc[a] = True
        rewards = {
            a: self.t + self.possible_agents.index(a) / 10
            for a in self.possible_agents
            if a not in self.done and rng.random() < self.p_reward
        }
        if self.t >= self.max_steps:
            for a in self.hanging:  # a time limit: every agent that acted gets a last observation
                obs.setdefault(a, self._obs(a))
            all_trunc, all_term = True, False
        else:
            all_trunc, all_term = False, rng.random() < self.p_end
        self.hanging -= set(obs) | set(term)
        self.done |= {a for a, f in {**term, **trunc}.items() if f}
        live = self.started - self.done
        if not all_trunc and not live and self.started == set(self.possible_agents):
            all_term = True
        if all_term:
            for a in self.hanging:  # the game ended: hanging agents terminate (no observation needed)
                term.setdefault(a, True)
            self.hanging.clear()
        self.agents = sorted(live)
        term[ALL], trunc[ALL] = all_term, all_trunc
        infos = {a: {"t": self.t} for a in obs}
        return obs, rewards, term, trunc, infos


class TurnTakingEnv(MultiAgentEnv):
    """Two players take turns counting down from ``length``: the player to move sees the count and
    gets +1 for action 1; the last move ends the game (``"__all__"`` terminated). Rewards go to the
    mover only, so a waiting player's action hangs with no reward until its next turn."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.length = int((config or {}).get("length", 5))
        self.possible_agents = ["p0", "p1"]
        space = gym.spaces.Box(0, 1000, (1,), np.float32)
        self.observation_spaces = dict.fromkeys(self.possible_agents, space)
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.left, self.turn = self.length, 0
        self.agents = list(self.possible_agents)
        return {"p0": np.array([self.left], np.float32)}, {}

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        mover = self.possible_agents[self.turn]
        reward = {mover: float(action_dict[mover])}
        self.left -= 1
        self.turn = 1 - self.turn
        done = self.left == 0
        obs = {} if done else {self.possible_agents[self.turn]: np.array([self.left], np.float32)}
        return obs, reward, {ALL: done}, {ALL: False}, {}


class CallGame(MultiAgentEnv):
    """A one-move zero-sum game for two: both call 0 or 1 at once; a 0 against a 1 wins (+1, the
    other -1), equal calls draw. A player that always calls 0 never loses. ``players`` names them
    (``config["players"]``: three makes a game an opponent cannot join)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.possible_agents = list((config or {}).get("players", ["a", "b"]))
        self.observation_spaces = dict.fromkeys(self.possible_agents, gym.spaces.Box(0, 1, (1,), np.float32))
        self.action_spaces = {p: gym.spaces.Discrete(2) for p in self.possible_agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return {p: np.ones(1, np.float32) for p in self.agents}, {}

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        calls = {p: int(action_dict[p]) for p in self.agents}
        zeros = sum(1 for c in calls.values() if c == 0)
        winner = 0.0 < zeros < len(calls)  # someone called 0 against a 1
        reward = {p: (1.0 if c == 0 else -1.0) if winner else 0.0 for p, c in calls.items()}
        obs = {p: np.zeros(1, np.float32) for p in self.agents}
        return obs, reward, {ALL: True}, {ALL: False}, {}


class _BitGame(MultiAgentEnv):
    """Two agents with Box(0, 1, (obs_size,)) observations and actions 0/1; a seeded random stream."""

    def __init__(self, agents: list[str], *, obs_size: int) -> None:
        super().__init__()
        self.possible_agents = agents
        box = gym.spaces.Box(0.0, 1.0, (obs_size,), np.float32)
        self.observation_spaces = {a: box for a in agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in agents}
        self._rng = np.random.default_rng()

    def _reseed(self, seed: int | None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)


class SignalEnv(_BitGame):
    """A cooperative game neither agent can win alone: the speaker sees a random bit and acts (its
    action is the message); then the listener, who sees only the message, acts; both get 1 if the
    listener's action is the bit. Alone, the listener guesses: 0.5 each, 1.0 summed; together they
    reach 2.0. ``env_config["mute"]``: the listener never sees the message (the control)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(["speaker", "listener"], obs_size=3)
        self.mute = bool((config or {}).get("mute", False))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._reseed(seed)
        self.bit = int(self._rng.integers(2))
        self.t = 0
        return {"speaker": np.array([self.bit, 0, 0], np.float32), "listener": np.zeros(3, np.float32)}, {}

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict, dict]:
        if self.t == 0:
            self.t = 1
            message = np.zeros(3, np.float32)
            if not self.mute:
                message[1 + int(action_dict["speaker"])] = 1.0
            obs = {"speaker": np.zeros(3, np.float32), "listener": message}
            return obs, {"speaker": 0.0, "listener": 0.0}, {ALL: False}, {ALL: False}, {}
        reward = float(int(action_dict["listener"]) == self.bit)
        obs = {a: np.zeros(3, np.float32) for a in self.possible_agents}
        return obs, {"speaker": reward, "listener": reward}, {ALL: True}, {ALL: False}, {}


class RecallEnv(_BitGame):
    """A memory game on turns: two players move in turn, 3 moves each (6 env steps). At its first move
    a player sees its own random cue bit ``[cue, 1]``; after that only ``[0, 0]``; its third move earns
    1 if the action is the cue. Without memory a player guesses (0.5 each, 1.0 summed); one that
    remembers its last 3 observations (a frame stack: 5 env steps back, as turns alternate) reaches 2.0."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(["p0", "p1"], obs_size=2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._reseed(seed)
        self.cues = {a: int(self._rng.integers(2)) for a in self.possible_agents}
        self.t, self.moves = 0, dict.fromkeys(self.possible_agents, 0)
        return {"p0": np.array([self.cues["p0"], 1], np.float32)}, {}

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict, dict]:
        mover = self.possible_agents[self.t % 2]
        self.moves[mover] += 1
        reward = float(int(action_dict[mover]) == self.cues[mover]) if self.moves[mover] == 3 else 0.0
        self.t += 1
        done = self.t == 6
        nxt = self.possible_agents[self.t % 2]
        first = self.moves[nxt] == 0
        obs = {a: np.zeros(2, np.float32) for a in self.possible_agents} if done else {
            nxt: np.array([self.cues[nxt], 1], np.float32) if first else np.zeros(2, np.float32)
        }  # fmt: skip
        return obs, {mover: reward}, {ALL: done}, {ALL: False}, {}


def assert_same_episode(got: Any, want: Any) -> None:
    """Two MultiAgentEpisodes hold the same data: ids, env steps, flags, maps, every agent's chunk
    (observations, actions, rewards, infos, flags, t_started) and the hanging data, exactly."""
    assert (got.id_, got.env_t_started, got.env_t) == (want.id_, want.env_t_started, want.env_t)
    assert (got.is_terminated, got.is_truncated) == (want.is_terminated, want.is_truncated)
    assert sorted(got.agent_episodes) == sorted(want.agent_episodes)
    gm, wm = got.env_t_to_agent_t, want.env_t_to_agent_t
    for aid in want.agent_episodes:
        g, w = got.agent_episodes[aid], want.agent_episodes[aid]
        assert g.id_ == w.id_, aid
        assert (g.t_started, len(g), g.is_terminated, g.is_truncated) == (
            w.t_started, len(w), w.is_terminated, w.is_truncated,
        ), aid  # fmt: skip
        assert np.array_equal(np.asarray(g.get_observations()), np.asarray(w.get_observations())), aid
        assert list(np.asarray(g.get_actions())) == list(np.asarray(w.get_actions())), aid
        assert list(np.asarray(g.get_rewards())) == list(np.asarray(w.get_rewards())), aid
        assert g.get_infos() == w.get_infos(), aid
        assert gm[aid].tolist() == wm[aid].tolist(), aid
    assert got.get_return(include_hanging_rewards=True) == want.get_return(include_hanging_rewards=True)
    assert got.agent_to_module_mapping == want.agent_to_module_mapping


class RecordingEnv(MultiAgentEnv):
    """Another multi-agent env as it is, recording every episode it plays, whole, from what it
    receives and emits (``episodes``; the last one may still run)."""

    def __init__(self, env: Any) -> None:
        super().__init__()
        self.env = env
        self.possible_agents = env.possible_agents
        self.observation_spaces, self.action_spaces = env.observation_spaces, env.action_spaces
        self.episodes: list[MultiAgentEpisode] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self.episodes.append(MultiAgentEpisode())
        self.episodes[-1].add_env_reset(observations=obs, infos=infos)
        return obs, infos

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        obs, rew, term, trunc, infos = self.env.step(action_dict)
        actions = {a: int(v) for a, v in action_dict.items()}
        self.episodes[-1].add_env_step(obs, actions, rew, infos, terminateds=term, truncateds=trunc)
        return obs, rew, term, trunc, infos


def canonical(ep: Any) -> tuple:
    """An episode's data with its ids left out (agents sorted): equal for two recordings of one episode."""
    parts = []
    for aid in sorted(ep.agent_episodes, key=str):
        sa = ep.agent_episodes[aid]
        parts.append((
            str(aid), sa.t_started, sa.is_terminated, sa.is_truncated,
            np.asarray(sa.get_observations()).tobytes(),  # ints the env emitted: exact
            tuple(int(a) for a in np.asarray(sa.get_actions()).reshape(-1)),
            tuple(float(r) for r in np.asarray(sa.get_rewards()).reshape(-1)),
            tuple(ep.env_t_to_agent_t[aid].tolist()),
        ))  # fmt: skip
    return (ep.env_t_started, ep.env_t, ep.is_terminated, ep.is_truncated, tuple(parts))
