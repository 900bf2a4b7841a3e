"""RunnerFailures: an EnvRunnerGroup's account of failed runners: causes, restarts, and what died with them.

The group tells it what each answer leaves on its runner (``track``) and asks it before each
replacement (``record``): it counts the failure, the steps of the request that died and those the
runner held for a dead replay, and the episodes left running, and either allows a restart (adding
one log line) or raises ``EnvRunnerFailedError`` naming every failed runner and its last cause.

How the group replaces a runner: a new actor under the same ``worker_index`` (so the same
``vector_index`` and ``env_config`` for its sub-envs) takes the last broadcast weights and
connector states before its first sample (calls to one actor run in order). It gets a fresh seed
derived from ``(seed, worker_index, restart number)``, so it never repeats its predecessor's
episodes or episode ids: no chunk ever continues an episode of a dead actor. During a sampling
call the replacement gets the call's request at once. The group makes the replacement itself
rather than through Ray's ``max_restarts``: a Ray restart re-runs ``__init__`` with the first
arguments (the same seed, so the same ids) and without the weights, and retried calls would hide
what was lost; here each restart is counted (``GroupMetrics``: the steps of the request that died,
those held for a dead replay actor, the episodes left running) and logged (``runner_failures``).

>>> from ray_sampler.sampling.config import EnvRunnerGroupConfig
>>> failures = RunnerFailures(EnvRunnerGroupConfig(max_num_env_runner_restarts=1))
>>> failures.record(2, ValueError("boom"), num_env_steps_lost=8)
>>> failures.take_lines()
['runner 2 raised (ValueError: boom); restarted (restart 1 of 1)']
>>> failures.record(3, ValueError("again"), num_env_steps_lost=8)
Traceback (most recent call last):
...
ray_sampler.errors.EnvRunnerFailedError: env runner 2 failed: ValueError: boom; env runner 3 failed: \
ValueError: again; the 1 restarts allowed (max_num_env_runner_restarts) are used up
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.errors import EnvRunnerFailedError, MultiAgentEnvError
from ray_sampler.sampling.config import EnvRunnerGroupConfig
from ray_sampler.sampling.metrics import RunnerMetrics

__all__ = ["RunnerFailures", "describe_failure"]

_MAX_CAUSE_CHARS = 300


def _broke_the_env_contract(error: BaseException) -> bool:
    """Whether a runner call failed on a MultiAgentEnvError: the env's own bug, which a restarted
    runner meets again (an env that raises is restarted by the runner itself where allowed)."""
    cause = getattr(error, "cause", None)
    return isinstance(error, MultiAgentEnvError) or isinstance(cause, MultiAgentEnvError)


def describe_failure(error: BaseException) -> tuple[str, str]:
    """(``"died"`` or ``"raised"``, a one-line cause) of a runner call's error: the actor's death
    (``RayActorError``/``ActorDiedError``), or the runner's own exception (inside ``RayTaskError``)."""
    import ray

    verb = "died" if isinstance(error, ray.exceptions.RayActorError) else "raised"
    cause = getattr(error, "cause", None) if isinstance(error, ray.exceptions.RayTaskError) else None
    shown = cause if isinstance(cause, BaseException) else error
    lines = str(shown).strip().splitlines()
    if isinstance(shown, ray.exceptions.ActorDiedError) and lines[:1] == [ray.exceptions.ActorDiedError.BASE_ERROR_MSG]:
        # Ray's first line is the same for every death; why it died (its node died, ray.kill, the
        # process exited) is the first unindented line after the actor's fields.
        lines = [line for line in lines[1:] if line[:1] not in ("", " ", "\t")] or lines
    text = f"{type(shown).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return verb, text[:_MAX_CAUSE_CHARS]


class RunnerFailures:
    """Counts and causes of a group's runner failures (see the module docstring)."""

    def __init__(self, config: EnvRunnerGroupConfig) -> None:
        self.config = config
        self.num_failures = 0
        self.num_restarts = 0
        self.num_env_steps_lost = 0
        self.num_episodes_abandoned = 0
        self.last_causes: dict[int, str] = {}
        """Worker index -> the cause of its last failure."""
        self._lines: list[str] = []
        self._running: dict[int, set[str]] = {}  # worker index -> ids of its shipped, unfinished episodes
        self._held: dict[int, int] = {}  # worker index -> steps it holds for a dead replay actor

    def track(
        self,
        worker_index: int,
        col: ColumnarEpisodes | None,
        metrics: RunnerMetrics,
        *,
        num_env_steps_held: int | None = None,
    ) -> None:
        """Notes what a runner's answer (``col`` and its ``metrics``, with the request) leaves on the
        runner: the episodes still running and, where the answer reports it (``num_env_steps_held``,
        None: unchanged), the steps held for a dead replay. Both are lost if the runner dies.
        Without ``col`` (a ``collect_to`` answer), the running episodes are the ones the runner
        reports (``metrics.running_episode_ids``; None: unchanged)."""
        if num_env_steps_held is not None:
            self._held[worker_index] = num_env_steps_held
        before = self._running.get(worker_index, set())
        ended = set(metrics.ended_episode_ids)  # a sub-env failure ended them: they never continue
        if col is None:
            reported = metrics.running_episode_ids
            self._running[worker_index] = (before if reported is None else set(reported)) - ended
            return
        done = (np.asarray(col.terminated) | np.asarray(col.truncated)).tolist()
        request = metrics.request
        if request is not None and request.force_reset:
            # The reset shipped the old episodes' last chunks: they never continue anyway.
            running = {id_ for id_, d in zip(col.ids, done, strict=True) if not d} - before
        else:
            running = before | {id_ for id_, d in zip(col.ids, done, strict=True) if not d}
            running -= {id_ for id_, d in zip(col.ids, done, strict=True) if d}
        self._running[worker_index] = running - ended

    def forget(self, worker_index: int) -> None:
        """A runner stopped on purpose (``scale``, which ships what it held): nothing of it is lost."""
        self._running.pop(worker_index, None)
        self._held.pop(worker_index, None)

    def record(
        self, worker_index: int, error: BaseException, *, num_env_steps_lost: int, may_restart: bool = True
    ) -> None:
        """Counts a failure (``num_env_steps_lost``: its dead request's; the steps it held are added);
        returns if a replacement may start (with ``may_restart``), else raises."""
        verb, cause = describe_failure(error)
        self.num_failures += 1
        self.last_causes[worker_index] = cause
        self.num_env_steps_lost += num_env_steps_lost + self._held.pop(worker_index, 0)
        self.num_episodes_abandoned += len(self._running.pop(worker_index, ()))
        if not may_restart:
            return
        if _broke_the_env_contract(error):
            raise self.error("the env broke the multi-agent env contract: fix the env (a new runner would repeat it)")
        if not self.config.restart_failed_env_runners:
            raise self.error("restarts are disabled (restart_failed_env_runners=False)")
        if self.num_restarts >= self.config.max_num_env_runner_restarts:
            raise self.error(
                f"the {self.config.max_num_env_runner_restarts} restarts allowed (max_num_env_runner_restarts) "
                "are used up"
            )
        self.num_restarts += 1
        self._lines.append(
            f"runner {worker_index} {verb} ({cause}); restarted "
            f"(restart {self.num_restarts} of {self.config.max_num_env_runner_restarts})"
        )

    def error(self, reason: str) -> EnvRunnerFailedError:
        """The error naming every failed runner with its last cause, and ``reason``."""
        named = "; ".join(f"env runner {i} failed: {c}" for i, c in sorted(self.last_causes.items()))
        return EnvRunnerFailedError(f"{named}; {reason}")

    def take_lines(self) -> list[str]:
        """The log lines of the restarts since the last call."""
        lines, self._lines = self._lines, []
        return lines

    def metrics(self, num_healthy_env_runners: int) -> dict[str, Any]:
        """The group metrics' fault fields."""
        return {
            "num_env_runner_restarts": self.num_restarts,
            "num_healthy_env_runners": num_healthy_env_runners,
            "num_env_steps_lost": self.num_env_steps_lost,
            "num_episodes_abandoned": self.num_episodes_abandoned,
            "runner_failures": self.take_lines(),
        }
