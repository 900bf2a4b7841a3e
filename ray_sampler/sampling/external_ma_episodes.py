"""ExternalMultiAgentEpisodes: multi-agent episodes external clients are playing, and their chunks.

A client's episode sends per-agent dicts: the agents with an observation act, rewards add up per
agent until the next observation, and ``step`` records one env step as a ``MultiAgentEnv`` would
(``MultiAgentEpisode.add_env_step``: hanging actions, agents that join or leave). A multi-agent
chunk cannot be split at any step, so in ``truncate_episodes`` the steps are sealed into a batch
the moment the ``batch_steps``-th env step since the last batch is recorded: the episodes that
finished since then and every running one, cut with lookback. Each ``take`` returns one sealed
batch: exactly ``batch_steps`` env steps. ``complete_episodes`` returns whole finished episodes
until at least that many steps, ``num_episodes`` exactly that many. Every method holds one lock.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from ray_sampler.data.multi_agent_episode import MultiAgentEpisode

__all__ = ["ExternalMultiAgentEpisodes", "MultiAgentOpenStep"]


@dataclasses.dataclass
class MultiAgentOpenStep:
    """What an episode's next env step carries before its observations come."""

    actions: dict[Hashable, Any] = dataclasses.field(default_factory=dict)
    extras: dict[Hashable, dict[str, Any]] = dataclasses.field(default_factory=dict)
    rewards: dict[Hashable, float] = dataclasses.field(default_factory=dict)
    infos: dict[Hashable, Any] = dataclasses.field(default_factory=dict)


class ExternalMultiAgentEpisodes:
    """The running multi-agent episodes by key and the batches sealed from them."""

    def __init__(
        self,
        *,
        lookback: int,
        agent_lookback: int,
        id_prefix: str,
        truncate: bool,
        batch_steps: int,
        observation_spaces: dict[Hashable, Any],
        action_spaces: dict[Hashable, Any],
        map_agent: Callable[..., str],
    ) -> None:
        self.lookback, self.agent_lookback, self.truncate, self.batch_steps = (
            lookback,
            agent_lookback,
            truncate,
            batch_steps,
        )
        self._spaces = (observation_spaces, action_spaces)
        self._map_agent = map_agent
        self._id_prefix, self._id_counter = id_prefix, 0
        self._lock = threading.Condition()
        self._running: dict[str, MultiAgentEpisode] = {}
        self._open: dict[str, MultiAgentOpenStep] = {}
        self._sums: dict[str, dict[Hashable, float]] = {}
        """Per running episode: every agent's rewards so far (for the whole-episode returns)."""
        self._finished: list[MultiAgentEpisode] = []
        self.finished_sums: dict[str, dict[Hashable, float]] = {}
        """Per finished episode id not taken yet: its agents' whole-episode returns."""
        self._ready: list[list[MultiAgentEpisode]] = []
        self._num_steps = 0
        """Env steps recorded since the last batch was sealed (truncate mode) or held (complete mode)."""
        self._dropped = (0, 0, list[str]())

    def begin(self, key: str, observations: dict[Hashable, Any], infos: dict[Hashable, Any] | None = None) -> None:
        with self._lock:
            self._id_counter += 1
            ep = MultiAgentEpisode(
                f"{self._id_prefix}{self._id_counter:012x}",
                observation_space=self._spaces[0],
                action_space=self._spaces[1],
                agent_to_module_mapping_fn=self._map_agent,
            )
            ep.add_env_reset(observations=observations, infos=infos)
            self._running[key], self._open[key], self._sums[key] = ep, MultiAgentOpenStep(), {}

    def is_running(self, key: str) -> bool:
        with self._lock:
            return key in self._running

    def current(self, key: str) -> MultiAgentEpisode:
        with self._lock:
            return self._running[key]

    def open_step(self, key: str) -> MultiAgentOpenStep:
        with self._lock:
            return self._open[key]

    def act(self, key: str, actions: dict[Hashable, Any], extras: dict[Hashable, dict[str, Any]]) -> None:
        with self._lock:
            step = self._open[key]
            step.actions, step.extras = actions, extras

    def log_reward(self, key: str, rewards: dict[Hashable, float], infos: dict[Hashable, Any] | None = None) -> None:
        with self._lock:
            step = self._open[key]
            for aid, r in rewards.items():
                step.rewards[aid] = step.rewards.get(aid, 0.0) + r
            for aid, info in (infos or {}).items():
                step.infos.setdefault(aid, {}).update(info)

    def step(
        self,
        key: str,
        observations: dict[Hashable, Any],
        *,
        terminateds: dict[Hashable, bool] | None = None,
        truncateds: dict[Hashable, bool] | None = None,
    ) -> bool:
        """One env step of the episode under ``key``; whether it ended the episode. The episode's
        errors (MultiAgentEnvError: an observation for an agent that is done, ...) change nothing."""
        with self._lock:
            ep, step = self._running[key], self._open[key]
            ep.add_env_step(
                observations, step.actions, step.rewards, step.infos,
                terminateds=terminateds, truncateds=truncateds, extra_model_outputs=step.extras,
            )  # fmt: skip
            sums = self._sums[key]
            for aid, r in step.rewards.items():
                sums[aid] = sums.get(aid, 0.0) + r
            self._open[key] = MultiAgentOpenStep()
            self._num_steps += 1
            if ep.is_done:
                del self._running[key], self._open[key]
                self.finished_sums[ep.id_] = self._sums.pop(key)
                self._finished.append(ep)
            if self.truncate and self._num_steps >= self.batch_steps:
                self._seal()
            self._lock.notify_all()
            return ep.is_done

    def _seal(self) -> None:
        batch = self._finished
        for key, ep in self._running.items():
            if len(ep) or ep.agent_steps():
                batch.append(ep)
                self._running[key] = ep.cut(len_lookback_buffer=self.lookback, agent_lookback=self.agent_lookback)
        self._ready.append(batch)
        self._finished, self._num_steps = [], 0

    def drop(self, keys: list[str]) -> None:
        """The episodes under ``keys`` end unfinished (their client went away): their steps since
        their last cut are dropped and counted (in truncate mode the batch being filled is then
        sealed a little later: it still holds exactly ``batch_steps`` kept steps)."""
        with self._lock:
            episodes, steps, ids = self._dropped
            for key in keys:
                ep = self._running.pop(key, None)
                self._open.pop(key, None)
                self._sums.pop(key, None)
                if ep is None or not (len(ep) or ep.agent_steps() or ep.env_t):
                    continue
                episodes, steps = episodes + 1, steps + len(ep)
                ids.append(ep.id_)
                self._num_steps -= len(ep)
            self._dropped = (episodes, steps, ids)

    def take_drops(self) -> tuple[int, int, list[str]]:
        with self._lock:
            out, self._dropped = self._dropped, (0, 0, [])
            return out

    def num_held_steps(self) -> int:
        with self._lock:
            sealed = sum(len(ep) for batch in self._ready for ep in batch)
            return sealed + sum(len(ep) for ep in self._finished) + sum(len(ep) for ep in self._running.values())

    def num_backlog_steps(self) -> int:
        """Held steps a call can take now: sealed batches and finished episodes (complete mode: the
        finished ones only; running episodes must go on to finish)."""
        with self._lock:
            sealed = sum(len(ep) for batch in self._ready for ep in batch)
            running = sum(len(ep) for ep in self._running.values()) if self.truncate else 0
            return sealed + sum(len(ep) for ep in self._finished) + running

    def take(
        self, *, num_episodes: int | None = None, stop: threading.Event | None = None, timeout_s: float | None = None
    ) -> list[MultiAgentEpisode]:
        """One call's chunks (see the module docstring); nothing when ``stop`` is set meanwhile;
        TimeoutError after ``timeout_s``, everything still held."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            while not self._enough(num_episodes):
                if stop is not None and stop.is_set():
                    return []
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"the clients sent fewer steps than asked within {timeout_s:g} s")
                self._lock.wait(timeout=0.2)
            if num_episodes is not None:
                out, self._finished = self._finished[:num_episodes], self._finished[num_episodes:]
            elif self.truncate:
                out = self._ready.pop(0)
            else:
                out, steps = [], 0
                while steps < self.batch_steps:
                    ep = self._finished.pop(0)
                    out.append(ep)
                    steps += len(ep)
            self._lock.notify_all()
            return out

    def _enough(self, num_episodes: int | None) -> bool:
        if num_episodes is not None:
            return len(self._finished) >= num_episodes
        if self.truncate:
            return bool(self._ready)
        return sum(len(ep) for ep in self._finished) >= self.batch_steps

    def drain(self) -> tuple[list[MultiAgentEpisode], int]:
        """Everything held: truncate mode ships the running episodes' steps too, complete mode drops
        them (counted in the second item)."""
        with self._lock:
            out = [ep for batch in self._ready for ep in batch] + self._finished
            running = [ep for ep in self._running.values() if len(ep) or ep.agent_steps()]
            dropped = 0
            if self.truncate:
                out += running
            else:
                dropped = len(running)
            self._ready, self._finished, self._running, self._open, self._sums = [], [], {}, {}, {}
            self._num_steps = 0
            return out, dropped
