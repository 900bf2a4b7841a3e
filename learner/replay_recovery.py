"""SupervisedReplay: a ReplayActor handle that restores a dead actor from its checkpoint and counts the loss.

The driver side of replay fault tolerance. Sampling (``sample_to_replay``), learning
(``update_from_replay``) and any other call (``call``) go through it; when one finds the actor
dead (a call raised Ray's ``RayActorError``: killed, its process or node lost, and the replay actor
does not answer a ping either: a dead learner's or runner's error is re-raised, the healthy replay
kept), it

1. waits for the runners' requests still in flight (with ``keep_sampling`` they were made with the
   dead handle), so every ack the dead actor gave is summed; a runner whose chunks the dead actor
   did not take keeps them (``RunnerMetrics.num_env_steps_held_for_replay``) and sends them, in
   order, to the restored actor with its next request: they are delayed, not lost;
2. starts a new actor with the same ReplayConfig, which restores the last checkpoint
   (``checkpoint_path``; none: it starts empty) after removing a killed save's temporary files,
   and waits up to ``timeout_s`` for it (a checkpoint it cannot restore, e.g. a corrupt file:
   ``ReplayUnavailableError`` naming the file and why; a later call tries again; a replacement
   killed, or whose node died, before it answered is replaced in turn, up to ``START_ATTEMPTS``);
3. asks it for the acknowledged steps that died with the old actor (``num_env_steps_lost``), adds
   them to the metrics and keeps one line for the caller's log.

With ``num_shards`` > 1 it supervises replay shards (replay.shards) the same way, each on its
own: a dead shard is found by pinging every shard, only it is restored (from its own checkpoint),
its loss is counted against the steps it acknowledged (``num_env_steps_lost_by_shard``), and the
other shards keep their data and go on.

Only the driver holds the handle: runners and learners get the current one with every call, so
nothing else needs to learn about a restart. It lives in ``learner`` because it uses both the
runners and the replay, which must not import each other.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

import ray

from learner.learner_group import LearnerGroup
from learner.metrics import DQNUpdateMetrics
from ray_sampler.errors import ConfigError, DataFormatError, ReplayError
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.metrics import RunnerMetrics
from ray_sampler.sampling.replay_outbox import shard_index
from ray_sampler.validate import check_int, check_number
from replay.actor import ReplayConfig, create_replay_actor
from replay.shards import shard_config, shard_path

__all__ = ["REPLAY_SHARD_FILE", "ReplayRecoveryMetrics", "ReplayUnavailableError", "SupervisedReplay", "is_actor_death"]

T = TypeVar("T")

_log = logging.getLogger("learner.replay_recovery")

REPLAY_SHARD_FILE = "replay.parquet"
"""In a sharded replay's checkpoint folder, shard k's file is ``replay.shard-{k}.parquet`` (``shard_path``)."""

START_ATTEMPTS = 3
"""Replacement actors started, at most, for one death: one killed while starting is replaced in turn."""


class ReplayUnavailableError(ReplayError):
    """The replay actor died and no restored one answered within ``timeout_s``, or its replacement
    failed to start (its checkpoint could not be restored)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayRecoveryMetrics:
    """What replay actor failures cost, since the SupervisedReplay started."""

    num_replay_restarts: int = 0
    """Dead replay actors replaced by one restored from the checkpoint."""
    num_env_steps_lost: int = 0
    """Acknowledged env steps that died with a replay actor: those added after its last checkpoint."""
    num_env_steps_acknowledged: int = 0
    """Env steps the replay actors acknowledged to the runners (``AddAck.num_env_steps_received``)."""
    num_env_steps_lost_by_shard: tuple[int, ...] = ()
    """With replay shards: ``num_env_steps_lost`` of each shard, in shard order."""


def is_actor_death(error: BaseException) -> bool:
    """Whether ``error`` says an actor died (also when it reached us as a learner's or runner's task error);
    which one it was, the error does not tell: SupervisedReplay pings the replay actor to know."""
    return isinstance(error, ray.exceptions.RayActorError) or isinstance(
        getattr(error, "cause", None), ray.exceptions.RayActorError
    )


class SupervisedReplay:
    """The replay actor's handle for the driver: restores a dead actor (see the module docstring)."""

    def __init__(
        self,
        config: ReplayConfig,
        *,
        num_shards: int = 1,
        timeout_s: float = 60.0,
        num_cpus: float = 1.0,
        max_concurrency: int = 16,
        name: str | None = None,
        scheduling_strategy: Any = None,
    ) -> None:
        check_number("timeout_s", timeout_s, minimum=0, exclusive_minimum=True)
        check_int("num_replay_shards", num_shards, minimum=1)
        self.config = config
        """The whole replay's config (each shard's: ``replay.shards.shard_config``)."""
        self.num_shards = num_shards
        self.timeout_s = timeout_s
        """Longest a restored actor may take to start (restore included) before ReplayUnavailableError."""
        self._options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "max_concurrency": max_concurrency,
            "scheduling_strategy": scheduling_strategy,
        }
        self.name = name
        """The actor's name (a shard's ends in ``-shard-{k}``, a restored one's in ``-restart-{n}``: a
        dead actor's name may not be free)."""
        self.actors: list[Any] = []
        """The current actor handle of each shard (a new one after each restart)."""
        try:
            for k in range(num_shards):
                self.actors.append(create_replay_actor(self.shard_config(k), name=self._name(k), **self._options))
            for k in range(num_shards):
                self._wait_until_started(k)
        except BaseException:
            self.stop()
            raise
        self.metrics = ReplayRecoveryMetrics(num_env_steps_lost_by_shard=(0,) * num_shards if num_shards > 1 else ())
        self.recoveries: list[str] = []
        """One line per restart not yet taken by ``take_recoveries``."""
        self._runners: EnvRunnerGroup | None = None
        self._acknowledged = [0] * num_shards  # per shard, by every incarnation
        self._lost = [0] * num_shards
        self._num_actors_started = 1  # names every new actor apart, failed starts included
        self._drained: list[RunnerMetrics] = []  # answers collected during a restart, for the next call

    @property
    def actor(self) -> Any:
        """The (first shard's) current actor handle."""
        return self.actors[0]

    @property
    def target(self) -> Any:
        """What runners and learners are given: the actor, or the list of shards."""
        return self.actors[0] if self.num_shards == 1 else list(self.actors)

    def shard_config(self, shard: int) -> ReplayConfig:
        """Shard ``shard``'s ReplayConfig (the whole config with one shard)."""
        return shard_config(self.config, shard, self.num_shards)

    def _name(self, shard: int, restart: int | None = None) -> str | None:
        if self.name is None:
            return None
        name = self.name if self.num_shards == 1 else f"{self.name}-shard-{shard}"
        return name if restart is None else f"{name}-restart-{restart}"

    def sample_to_replay(
        self, runners: EnvRunnerGroup, num_timesteps: int | None = None, *, timeout_s: float | None = None
    ) -> list[RunnerMetrics]:
        """``runners.sample_to_replay`` into the current actor; a dead one is restored (the runners
        keep what it did not take). Returns every answer, those collected during a restart too."""
        self._runners = runners
        try:
            out = runners.sample_to_replay(self.target, num_timesteps, timeout_s=timeout_s)
        except Exception as e:
            dead = self._dead_shards() if is_actor_death(e) else []
            if not dead:
                raise
            out = []  # only the group's add of chunks it held from an earlier call raises here: nothing sampled
            for k in dead:
                self.restart(e, shard=k)
        else:
            self._count(out)
            held = {shard_index(m.worker_index, self.num_shards) for m in out if m.num_env_steps_held_for_replay}
            for k in sorted(held):
                if self._replay_is_dead(k):
                    self.restart("a runner could not add its chunks", shard=k)
        out, self._drained = self._drained + out, []
        return out

    def add(self, data: Any) -> Any:
        """Adds chunks from the driver (``ReplayActor.add``) and counts the ack; None when the actor was
        found dead (it is restored; the data was not stored: add it again)."""
        ack = self.run(lambda _: ray.get(self.actors[0].add.remote(data), timeout=self.timeout_s))
        if ack is not None:
            self._acknowledge(0, ack.num_env_steps_received)
        return ack

    def update_from_replay(
        self, learners: LearnerGroup, num_updates: int, batch_size_B: int, **kwargs: Any
    ) -> DQNUpdateMetrics | None:
        """``learners.update_from_replay`` from the current actor (or shards); None when one was found
        dead (it is restored; the caller owes the updates still). Learners that applied some steps
        before a failed ``push_priorities`` keep them."""
        return self.run(lambda target: learners.update_from_replay(target, num_updates, batch_size_B, **kwargs))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``actor.<method>(*args, **kwargs)`` (the first shard's), once more on the restored actor if
        it died (waits up to ``timeout_s`` for the answer)."""
        return self.call_shard(0, method, *args, **kwargs)

    def call_each(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``call`` on every shard, in shard order."""
        return [self.call_shard(k, method, *args, **kwargs) for k in range(self.num_shards)]

    def call_shard(self, shard: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """``call`` on shard ``shard``."""
        for attempt in range(2):
            try:
                return ray.get(getattr(self.actors[shard], method).remote(*args, **kwargs), timeout=self.timeout_s)
            except Exception as e:
                if attempt or not (is_actor_death(e) and self._replay_is_dead(shard)):
                    raise
                self.restart(e, shard=shard)
        raise AssertionError("unreachable")  # pragma: no cover

    def save(self, path: str) -> None:
        """Saves the buffer to ``path``: a file, or with shards a folder of ``replay.shard-{k}.parquet``."""
        if self.num_shards == 1:
            self.call("save", path)
            return
        os.makedirs(path, exist_ok=True)
        for k in range(self.num_shards):
            self.call_shard(k, "save", os.path.join(path, shard_path(REPLAY_SHARD_FILE, k, self.num_shards)))

    def run(self, fn: Callable[[Any], T]) -> T | None:
        """``fn(target)`` (``target``: the actor, or the list of shards); None if it found one dead
        (which is then restored). Any other error, another actor's death included, is re-raised."""
        try:
            return fn(self.target)
        except Exception as e:
            dead = self._dead_shards() if is_actor_death(e) else []
            if not dead:
                raise
            for k in dead:
                self.restart(e, shard=k)
            return None

    def restart(self, cause: BaseException | str, *, shard: int = 0) -> None:
        """Replaces shard ``shard``'s actor by one restored from its checkpoint and counts the
        acknowledged steps lost; the other shards go on."""
        old = self.actors[shard]
        if self._runners is not None:  # their in-flight requests went to the old actor: sum those acks
            answers = [m for _, m in self._runners.collect_in_flight(timeout_s=self.timeout_s)]
            self._count(answers)
            self._drained += answers
        ray.kill(old)  # dead already, or unreachable: never two actors writing one checkpoint
        lost_so_far = self._start_replacement(cause, shard)
        lost = max(0, lost_so_far - self._lost[shard])
        self._lost[shard] += lost
        self.metrics = dataclasses.replace(
            self.metrics,
            num_replay_restarts=self.metrics.num_replay_restarts + 1,
            num_env_steps_lost=self.metrics.num_env_steps_lost + lost,
            num_env_steps_lost_by_shard=tuple(self._lost) if self.num_shards > 1 else (),
        )
        path = self.shard_config(shard).checkpoint_path
        source = f"from {path}" if path else "empty (no checkpoint_path)"
        which = "replay actor" if self.num_shards == 1 else f"replay shard {shard}"
        self.recoveries.append(
            f"{which} died ({_describe(cause)}); restored {source} (restart "
            f"{self.metrics.num_replay_restarts}), {lost} acknowledged env steps lost"
        )

    def _start_replacement(self, cause: BaseException | str, shard: int) -> int:
        """Starts shard ``shard``'s replacement actor (it restores the checkpoint) and returns the
        acknowledged steps lost over every incarnation. A replacement that dies before it answers
        without its ``__init__`` having raised (killed, or its node lost, while starting) is replaced
        in turn, up to ``START_ATTEMPTS`` actors; ``ReplayUnavailableError`` when none answers."""
        acknowledged = self._acknowledged[shard]
        config = self.shard_config(shard)
        for attempt in range(1, START_ATTEMPTS + 1):
            name = self._name(shard, restart=self._num_actors_started)
            self._num_actors_started += 1
            self.actors[shard] = create_replay_actor(config, name=name, **self._options)
            try:
                # The restored actor's figure covers every incarnation (acknowledged so far, less what
                # the checkpoint it restored had received): the loss of all restarts so far.
                return int(ray.get(self.actors[shard].num_env_steps_lost.remote(acknowledged), timeout=self.timeout_s))
            except ray.exceptions.GetTimeoutError:
                raise ReplayUnavailableError(
                    f"the replay actor died ({_describe(cause)}) and its replacement did not start within "
                    f"timeout_s={self.timeout_s}"
                ) from None
            except ray.exceptions.RayActorError as e:
                if e.actor_init_failed or attempt == START_ATTEMPTS:
                    # Its __init__ raised (the checkpoint cannot be restored), or every try died:
                    # self.actor stays this dead replacement, so a later call finds it dead and tries again.
                    why = (
                        "failed to start from" if e.actor_init_failed else f"died while starting {attempt} times, with"
                    )
                    message = (
                        f"the replay actor died ({_describe(cause)}) and its replacement {why} "
                        f"checkpoint_path={config.checkpoint_path!r}: {_last_line(e)}"
                    )
                    _log.error(message)
                    raise ReplayUnavailableError(message) from e
                _log.warning("the replay actor's replacement died while starting (%s); starting another", _last_line(e))
                ray.kill(self.actors[shard])
        raise AssertionError("unreachable")  # pragma: no cover

    def _dead_shards(self) -> list[int]:
        """The shards whose actor Ray says is dead (``_replay_is_dead``)."""
        return [k for k in range(self.num_shards) if self._replay_is_dead(k)]

    def _replay_is_dead(self, shard: int = 0) -> bool:
        """Pings a shard's actor; dead only if Ray says so (a ping it does not answer in ``timeout_s``:
        alive but busy, the caller's error goes up)."""
        try:
            ray.get(self.actors[shard].__ray_ready__.remote(), timeout=self.timeout_s)
        except ray.exceptions.RayActorError:
            return True
        except ray.exceptions.GetTimeoutError:
            return False
        return False

    def _wait_until_started(self, shard: int) -> None:
        """Waits for the first actor to start (restored from ``checkpoint_path`` if the file is there),
        so that a config it refuses (a checkpoint directory missing on its node, a corrupt file) is
        this call's one-line error, not a replay death found by the first sampling round."""
        try:
            ray.get(self.actors[shard].__ray_ready__.remote(), timeout=self.timeout_s)
        except ray.exceptions.RayActorError as e:
            refused = re.search(r"(ConfigError|DataFormatError): (.+)", str(e))
            if refused is None:
                raise
            error = ConfigError if refused.group(1) == "ConfigError" else DataFormatError
            raise error(refused.group(2).strip()) from None

    def take_recoveries(self) -> list[str]:
        """The recovery lines since the previous call (for a training loop's log)."""
        lines, self.recoveries = self.recoveries, []
        return lines

    def stop(self) -> None:
        """Kills the actors."""
        for actor in self.actors:
            ray.kill(actor)

    def _count(self, answers: list[RunnerMetrics]) -> None:
        for m in answers:
            if m.replay is not None:
                self._acknowledge(shard_index(m.worker_index, self.num_shards), m.replay.num_env_steps_received)

    def _acknowledge(self, shard: int, num_env_steps: int) -> None:
        self._acknowledged[shard] += num_env_steps
        self.metrics = dataclasses.replace(
            self.metrics, num_env_steps_acknowledged=self.metrics.num_env_steps_acknowledged + num_env_steps
        )


def _last_line(error: BaseException) -> str:
    """The last non-blank line of ``error``'s text: for an actor whose ``__init__`` raised, that
    exception as ``module.Type: message``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _describe(cause: BaseException | str) -> str:
    if isinstance(cause, str):
        return cause
    return f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}"[:120]
