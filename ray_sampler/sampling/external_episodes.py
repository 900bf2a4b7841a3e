"""ExternalEpisodes: the episodes external clients are playing, and the chunks a ``sample()`` takes.

The server's connections add steps from their own thread; ``take`` hands a runner's ``sample()``
its chunks with the same accounting as every runner's: in ``truncate_episodes`` exactly the steps
asked for (finished episodes first, then the running ones cut with ``lookback`` steps of lookback,
the chunk where the steps run out split), in ``complete_episodes`` whole finished episodes until
at least that many steps, with ``num_episodes`` exactly that many finished episodes. Steps beyond
what a call takes wait for the next. Every method holds one lock, so a chunk is never cut while a
connection adds to it.

An episode is keyed by its connection and the client's handle for it. A client that goes away
mid-episode loses that episode: ``drop`` forgets its steps since its last cut (earlier chunks a
call already took stay valid) and counts them, as a sub-env failure is counted.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EpisodeError
from ray_sampler.sampling.ongoing import take_steps

__all__ = ["ExternalEpisodes", "OpenStep"]


@dataclasses.dataclass
class OpenStep:
    """What an episode's next step carries before its observation comes: the action taken (None
    before the first), the module's outputs for it and the rewards logged since."""

    action: Any = None
    extras: dict[str, Any] | None = None
    reward: float = 0.0
    infos: dict[str, Any] = dataclasses.field(default_factory=dict)


class ExternalEpisodes:
    """The running episodes by key, the finished ones not taken yet, and the drop counts."""

    def __init__(
        self,
        *,
        lookback: int,
        id_prefix: str,
        truncate: bool,
        observation_space: Any = None,
        action_space: Any = None,
    ) -> None:
        self.lookback = lookback
        self.truncate = truncate
        self.observation_space = observation_space
        self.action_space = action_space
        self._id_prefix = id_prefix
        self._id_counter = 0
        self._lock = threading.Condition()
        self._running: dict[str, SingleAgentEpisode] = {}
        self._open: dict[str, OpenStep] = {}
        self._finished: list[SingleAgentEpisode] = []
        self._num_running_steps = 0
        self._num_finished_steps = 0
        self._num_dropped_episodes = 0
        self._num_dropped_steps = 0
        self._dropped_ids: list[str] = []
        self._shipped: set[str] = set()
        """Ids of running episodes a call took chunks of."""
        self._wake_at = 0
        """Held steps at which an added step wakes a waiting ``take`` (0: every step)."""
        self.num_env_steps_total = 0
        """Steps added since the start."""

    # ---------------------------------------------------------------- what connections do
    def begin(self, key: str, observation: Any, infos: dict[str, Any] | None = None) -> SingleAgentEpisode:
        """A new episode under ``key`` from its first observation (EpisodeError if one runs there)."""
        with self._lock:
            if key in self._running:
                raise EpisodeError(f"episode {key.split('/', 1)[-1]!r} already has its first observation")
            self._id_counter += 1
            ep = SingleAgentEpisode(
                f"{self._id_prefix}{self._id_counter:012x}",
                observation_space=self.observation_space,
                action_space=self.action_space,
            )
            ep.add_env_reset(observation, infos)
            self._running[key] = ep
            self._open[key] = OpenStep()
            return ep

    def is_running(self, key: str) -> bool:
        with self._lock:
            return key in self._running

    def current(self, key: str) -> SingleAgentEpisode:
        """The running episode under ``key`` (read it; add to it through this class only)."""
        with self._lock:
            return self._running[key]

    def open_step(self, key: str) -> OpenStep:
        with self._lock:
            return self._open[key]

    def act(self, key: str, action: Any, extras: dict[str, Any] | None) -> None:
        """The action the episode under ``key`` takes next and the module's outputs for it."""
        with self._lock:
            self._open[key] = OpenStep(action=action, extras=extras)

    def log_reward(self, key: str, reward: float, infos: dict[str, Any] | None = None) -> None:
        """A reward (and infos) for the step under way: rewards add up until the next observation."""
        with self._lock:
            step = self._open[key]
            step.reward += reward
            if infos:
                step.infos.update(infos)

    def step(
        self, key: str, observation: Any, *, terminated: bool = False, truncated: bool = False
    ) -> SingleAgentEpisode | None:
        """The open step under ``key`` ends in ``observation``; returns the episode when it ended
        (it is then finished, waiting for a call to take it). EpisodeError before any action."""
        with self._lock:
            step = self._open[key]
            if step.action is None:
                raise EpisodeError("no action was taken in this episode since its last observation")
            ep = self._running[key]
            ep.add_env_step(
                observation,
                step.action,
                step.reward,
                step.infos,
                terminated=terminated,
                truncated=truncated,
                extra_model_outputs=step.extras,
            )
            self._open[key] = OpenStep()
            self.num_env_steps_total += 1
            if terminated or truncated:
                del self._running[key], self._open[key]
                self._num_running_steps -= len(ep) - 1
                self._finished.append(ep)
                self._num_finished_steps += len(ep)
                self._lock.notify_all()
                return ep
            self._num_running_steps += 1
            if self._num_running_steps + self._num_finished_steps >= self._wake_at:
                self._lock.notify_all()  # only once a waiting call can have its steps: no wake-up per step
            return None

    def discard(self, key: str) -> None:
        """Forgets an episode that took no step since it began (a client ended it before acting);
        one with steps is dropped and counted instead."""
        with self._lock:
            ep = self._running[key]
            if len(ep) or ep.id_ in self._shipped:
                self.drop([key])  # the Condition's lock is re-entrant
                return
            del self._running[key], self._open[key]

    def drop(self, keys: list[str]) -> None:
        """The episodes under ``keys`` end unfinished (their client went away): their steps since
        their last cut are dropped and counted."""
        with self._lock:
            for key in keys:
                ep = self._running.pop(key, None)
                self._open.pop(key, None)
                if ep is None:
                    continue
                # A split chunk's rest waiting to be taken goes too: nothing of the episode is shipped
                # after the client went away.
                rest = [c for c in self._finished if c.id_ == ep.id_]
                if len(ep) or rest or ep.id_ in self._shipped:
                    steps = len(ep) + sum(len(c) for c in rest)
                    self._finished = [c for c in self._finished if c.id_ != ep.id_]
                    self._num_dropped_episodes += 1
                    self._num_dropped_steps += steps
                    self._num_running_steps -= len(ep)
                    self._num_finished_steps -= steps - len(ep)
                    self._dropped_ids.append(ep.id_)
                    self._shipped.discard(ep.id_)

    # ---------------------------------------------------------------- what a sample() call does
    def num_held_steps(self) -> int:
        with self._lock:
            return self._num_running_steps + self._num_finished_steps

    def num_backlog_steps(self) -> int:
        """Held steps a call can take now: all in truncate mode, finished episodes' in complete mode."""
        with self._lock:
            return self._num_finished_steps + (self._num_running_steps if self.truncate else 0)

    def take(
        self,
        *,
        num_steps: int | None = None,
        num_episodes: int | None = None,
        stop: threading.Event | None = None,
        timeout_s: float | None = None,
    ) -> list[SingleAgentEpisode]:
        """Waits until enough is held, then the call's chunks (see the module docstring); returns
        nothing when ``stop`` is set meanwhile; TimeoutError after ``timeout_s`` (None: no limit),
        everything still held."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            self._wake_at = num_steps if self.truncate and num_steps is not None else 0
            while not self._enough(num_steps, num_episodes):
                if stop is not None and stop.is_set():
                    return []
                if deadline is not None and time.monotonic() > deadline:
                    held = self._num_running_steps + self._num_finished_steps
                    raise TimeoutError(
                        f"the clients sent {held} steps ({len(self._finished)} episodes finished) within "
                        f"{timeout_s:g} s, fewer than asked"
                    )
                self._lock.wait(timeout=0.2)
            if num_episodes is not None:
                out, self._finished = self._finished[:num_episodes], self._finished[num_episodes:]
            elif self.truncate:
                assert num_steps is not None, "a step-counting call names its steps"
                out = self._take_truncated(num_steps)
            else:
                out, steps = [], 0
                while steps < (num_steps or 0):
                    ep = self._finished.pop(0)
                    out.append(ep)
                    steps += len(ep)
            self._num_finished_steps = sum(len(ep) for ep in self._finished)
            self._num_running_steps = sum(len(ep) for ep in self._running.values())
            self._shipped |= {ep.id_ for ep in out if not ep.is_done}
            self._shipped -= {ep.id_ for ep in out if ep.is_done}
            self._lock.notify_all()
            return out

    def _enough(self, num_steps: int | None, num_episodes: int | None) -> bool:
        if num_episodes is not None:
            return len(self._finished) >= num_episodes
        if self.truncate:
            return self._num_running_steps + self._num_finished_steps >= (num_steps or 0)
        return self._num_finished_steps >= (num_steps or 0)

    def _take_truncated(self, num_steps: int) -> list[SingleAgentEpisode]:
        chunks = list(self._finished)
        for key, ep in self._running.items():
            if len(ep):
                chunks.append(ep)
                self._running[key] = ep.cut(len_lookback_buffer=self.lookback)
        out, _, self._finished = take_steps(chunks, num_steps, lookback=self.lookback)
        return out

    def take_drops(self) -> tuple[int, int, list[str]]:
        """(episodes dropped, their steps dropped, their ids) since the last call; the counts restart."""
        with self._lock:
            out = (self._num_dropped_episodes, self._num_dropped_steps, self._dropped_ids)
            self._num_dropped_episodes, self._num_dropped_steps, self._dropped_ids = 0, 0, []
            return out

    def drain(self) -> tuple[list[SingleAgentEpisode], int]:
        """Everything held, for a runner about to stop: truncate mode ships the running episodes'
        steps too; complete mode drops them (counted in the second item)."""
        with self._lock:
            out = [ep for ep in self._finished if len(ep)]
            running = [ep for ep in self._running.values() if len(ep)]
            dropped = 0
            if self.truncate:
                out += running
            else:
                dropped = len(running)
            self._finished, self._running, self._open = [], {}, {}
            self._num_running_steps = self._num_finished_steps = 0
            return out, dropped
