"""LearnerQueue: one learner actor with a bounded queue of updates, for the asynchronous-samples loop.

With ``num_learners=1`` the asynchronous loop (learner/train_async.py) updates in a learner actor
rather than in the driver. Each fragment becomes one ``update_from_episodes`` call, and up to
``learner_queue_size`` calls wait in the actor, the running one included. The actor runs them in
order while the driver collects the next fragments. When the queue is full the driver waits for
the oldest update to finish, so a slow learner slows the driver (and, through the runners' own
bounded requests, the sampling) instead of growing memory.

A learner actor that dies (killed, its process or node lost) takes its queued updates with it.
Their env steps are counted lost (``num_env_steps_lost``, ``num_fragments_lost``). A new actor
is started from the last state the driver fetched (``refresh``: the module and optimizer state at
the last weights broadcast), and training goes on. An actor that dies ``MAX_FAILURES_IN_A_ROW``
times without finishing an update raises ``LearnerFailedError`` naming the cause.
"""

from __future__ import annotations

import collections
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from learner.metrics import PPOUpdateMetrics
from ray_sampler.data.multi_agent_columnar import unpack_columnar
from ray_sampler.errors import RaySamplerError
from ray_sampler.validate import check_int

__all__ = ["MAX_FAILURES_IN_A_ROW", "LearnerFailedError", "LearnerQueue"]

MAX_FAILURES_IN_A_ROW = 3
"""Learner actors that may die one after another, none finishing an update, before the run stops."""


class LearnerFailedError(RaySamplerError):
    """The learner actor kept dying before it finished an update."""


@dataclasses.dataclass(frozen=True)
class _Queued:
    ref: Any
    num_env_steps: int


def _update_from_columnar(learner: Any, col: Any) -> Any:
    """In the learner actor: one update on a runner's columnar chunks (read from the object store)."""
    return learner.update_from_episodes(unpack_columnar(col))


class LearnerQueue:
    """One learner actor and its bounded queue of updates (see the module docstring)."""

    def __init__(
        self,
        make_module: Callable[[], Any],
        config: Any,
        *,
        learner_class: type,
        learner_kwargs: dict[str, Any] | None = None,
        queue_size: int = 2,
        num_cpus: float = 1.0,
        timeout_s: float = 600.0,
        log: Callable[[str], None] = print,
    ) -> None:
        """The actor is a ``learner_class(make_module(), config, **learner_kwargs)``, as a learner
        actor of a LearnerGroup; it starts from the state of one built here."""
        import ray

        check_int("learner_queue_size", queue_size, minimum=1)
        self._args = (make_module, config, dict(learner_kwargs or {}))
        self._remote: Any = ray.remote(learner_class)
        self._num_cpus = num_cpus
        self.queue_size = queue_size
        self.timeout_s = timeout_s
        self._log = log
        self.name = f"ray-sampler-{uuid.uuid4().hex[:8]}-learner"
        """The actor's name (a replacement's ends in ``-restart-{n}``)."""
        self.state: dict[str, Any] = learner_class(make_module(), config, **self._args[2]).get_state()
        """The state a replacement starts from: the last one ``refresh`` fetched."""
        self.pending: collections.deque[_Queued] = collections.deque()
        self.num_restarts = 0
        self.num_fragments_lost = 0
        self.num_env_steps_lost = 0
        self.max_queued = 0
        """The most updates queued at once (the bound: ``queue_size``)."""
        self._failures_in_a_row = 0
        self._done_in_refresh: list[tuple[PPOUpdateMetrics, int]] = []
        self.actor = self._start(self.name)

    def _start(self, name: str) -> Any:
        import ray

        make_module, config, kwargs = self._args
        options = {"name": name, "num_cpus": self._num_cpus, "enable_task_events": False}
        actor: Any = self._remote.options(**options).remote(make_module(), config, **kwargs)
        try:
            ray.get(actor.set_state.remote(self.state), timeout=self.timeout_s)
        except BaseException:
            ray.kill(actor)
            raise
        return actor

    def submit(self, episodes: Any, num_env_steps: int) -> list[tuple[PPOUpdateMetrics, int]]:
        """Queues one update on ``episodes`` (a list of episodes, or the ObjectRef of a runner's
        columnar chunks: the actor reads them from the object store, the driver never holds them);
        returns (metrics, env steps) of the updates that finished meanwhile (it waits for the oldest
        while the queue is full). A dead actor's queue is counted lost and the actor replaced;
        ``episodes`` then go to the replacement."""
        import ray

        done = self._finished(wait_for=len(self.pending) - self.queue_size + 1)
        if isinstance(episodes, ray.ObjectRef):
            ref = self.actor.__ray_call__.remote(_update_from_columnar, episodes)
        else:
            ref = self.actor.update_from_episodes.remote(episodes)
        self.pending.append(_Queued(ref, num_env_steps))
        self.max_queued = max(self.max_queued, len(self.pending))
        return done

    def drain(self) -> list[tuple[PPOUpdateMetrics, int]]:
        """Waits for every queued update; their metrics (a dead actor's queue counted lost)."""
        return self._finished(wait_for=len(self.pending))

    def refresh(self) -> dict[str, Any]:
        """Waits for the queued updates, fetches the actor's state (a replacement would start from
        it) and returns its module weights; call ``take_finished`` for the updates it waited for."""
        import ray

        self._done_in_refresh = self.drain()
        try:
            self.state = ray.get(self.actor.get_state.remote(), timeout=self.timeout_s)
        except ray.exceptions.RayActorError as e:
            self._replace(e)
        return self.state["module"]

    def get_state(self) -> dict[str, Any]:
        """The learner's whole state as the last ``refresh`` fetched it (the queue drained then)."""
        return self.state

    def set_state(self, state: dict[str, Any]) -> None:
        """Puts the actor in ``state`` (a checkpoint's): its replacements start from it too."""
        import ray

        self.state = state
        ray.get(self.actor.set_state.remote(state), timeout=self.timeout_s)

    def take_finished(self) -> list[tuple[PPOUpdateMetrics, int]]:
        """The updates the last ``refresh`` waited for."""
        done, self._done_in_refresh = self._done_in_refresh, []
        return done

    def _finished(self, *, wait_for: int) -> list[tuple[PPOUpdateMetrics, int]]:
        """(metrics, env steps) of the updates finished so far, after waiting for the oldest ``wait_for``."""
        import ray

        out: list[tuple[PPOUpdateMetrics, int]] = []
        while self.pending:
            head = self.pending[0]
            if wait_for <= 0:
                ready, _ = ray.wait([head.ref], timeout=0)
                if not ready:
                    break
            try:
                out.append((ray.get(head.ref, timeout=self.timeout_s), head.num_env_steps))
            except ray.exceptions.RayActorError as e:
                self._replace(e)
                break
            except ray.exceptions.ObjectLostError:  # its runner died and its chunks with it: counted lost
                self.num_fragments_lost += 1
                self.num_env_steps_lost += head.num_env_steps
                self._log(
                    f"a fragment was lost with its runner before the learner read it: {head.num_env_steps} env "
                    "steps lost"
                )
            self.pending.popleft()
            self._failures_in_a_row = 0
            wait_for -= 1
        return out

    def _replace(self, cause: BaseException) -> None:
        """Counts the dead actor's queue lost and starts a replacement from ``state``."""
        import ray

        lost = sum(q.num_env_steps for q in self.pending)
        self.num_fragments_lost += len(self.pending)
        self.num_env_steps_lost += lost
        self.pending.clear()
        self._failures_in_a_row += 1
        ray.kill(self.actor)
        why = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        if self._failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
            raise LearnerFailedError(
                f"the learner actor died {self._failures_in_a_row} times in a row without finishing an update "
                f"(last: {type(cause).__name__}: {why[:200]})"
            )
        self.num_restarts += 1
        self._log(
            f"learner died ({type(cause).__name__}: {why[:120]}); restarted from the last broadcast weights "
            f"(restart {self.num_restarts}), {lost} env steps of its queue lost"
        )
        self.actor = self._start(f"{self.name}-restart-{self.num_restarts}")

    def stop(self) -> None:
        import ray

        ray.kill(self.actor)
