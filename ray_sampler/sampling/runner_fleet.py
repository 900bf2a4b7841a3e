"""RunnerFleet: an EnvRunnerGroup's runner actors and the calls in flight to them; a failed runner is replaced.

A runner whose actor dies (``RayActorError``) or whose call raises is killed and replaced by a new
actor under the same ``worker_index``, with the last broadcast weights and connector states and a
fresh seed; what died with it is counted (``runner_failures.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from typing import Any

import numpy as np
import ray

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar
from ray_sampler.errors import EnvCreatorError, EnvRunnerFailedError, RaySamplerError
from ray_sampler.modules import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.external_ma_runner import ExternalMultiAgentEnvRunner
from ray_sampler.sampling.external_runner import ExternalEnvRunner
from ray_sampler.sampling.metrics import RunnerMetrics
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from ray_sampler.sampling.placement import RunnerPlacement
from ray_sampler.sampling.replay_outbox import replay_for
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.runner_failures import RunnerFailures

logger = logging.getLogger("ray_sampler.sampling.runner_fleet")

__all__ = ["Answer", "RunnerFleet", "SampleTimeoutError", "restart_config"]

_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_MIN_PING_INTERVAL_S = 0.2
_RECHECK_PLACEMENT_S = 1.0

Answer = tuple[ColumnarEpisodes | MultiAgentColumnar | None, RunnerMetrics]
"""One runner's answer: its chunks as one columnar object (None: none, or sent to a replay) and metrics."""


def _start_error(index: int, error: BaseException) -> RaySamplerError:
    """The error of runner ``index`` failing a call the group cannot go on without (its start)."""
    missing = _MISSING_MODULE.search(str(error))
    if missing is not None:  # the user's code (or a package it needs) did not reach the runner's worker
        return EnvCreatorError(
            f"env runner {index} could not start: its worker cannot import {missing.group(1)!r}; ship your module to "
            "the cluster's workers (--working-dir or --py-modules; from Python, ray.init(runtime_env=...)), or install "
            "the package there (a runtime env's pip): docs/custom_envs.md"
        )
    return EnvRunnerFailedError(f"env runner {index} failed: {error}")


def restart_config(config: EnvRunnerConfig, index: int, restart: int) -> EnvRunnerConfig:
    """The runner config of runner ``index``'s replacement number ``restart`` (0: the first actor,
    ``config`` itself): a fresh seed drawn from the run's, the built-in MLP still seeded with the run's."""
    if not restart or config.seed is None:
        return config
    seed = int(np.random.SeedSequence([config.seed, index, restart]).generate_state(1)[0])
    module_config = config.module_config
    if (config.module_class or MLPModule) is MLPModule and "seed" not in module_config:
        # The built-in MLP is seeded with the run's seed: the same first weights as its peers.
        module_config = {**module_config, "seed": config.seed}
    return dataclasses.replace(config, seed=seed, module_config=module_config)


class SampleTimeoutError(RaySamplerError, TimeoutError):
    """No runner (or not every runner, where all are needed) answered before the deadline."""


class RunnerFleet:
    """The runner actors by worker index, their requests in flight and the answers ready to take."""

    def __init__(self, config: EnvRunnerConfig, group_config: EnvRunnerGroupConfig, name_prefix: str) -> None:
        self.config = config
        self.group_config = group_config
        self.name_prefix = name_prefix
        runner_class: type = EnvRunner if config.multi_agent is None else MultiAgentEnvRunner
        if config.external is not None:
            runner_class = ExternalEnvRunner if config.multi_agent is None else ExternalMultiAgentEnvRunner
        self._remote: Any = ray.remote(runner_class)  # an actor class: its methods' .remote is untyped
        self.actors: dict[int, Any] = {}
        self._num_workers: dict[int, int] = {}  # the num_workers each runner was started with
        self.failures = RunnerFailures(group_config)
        self.placement = RunnerPlacement(group_config, name_prefix)
        self.inflight: dict[int, ray.ObjectRef] = {}
        self.inflight_requests: dict[int, SampleRequest | None] = {}  # None: a ping (see ``probing``)
        self.ready: list[tuple[int | None, Answer]] = []
        self.last_request: tuple[SampleRequest, Any] | None = None  # (request, replay) of the last call
        self.weights_ref: ray.ObjectRef | None = None
        self.connector_ref: ray.ObjectRef | None = None  # the last merged connector state
        self.modules_ref: ray.ObjectRef | None = None  # multi-agent: the last module set sent (add_module)
        self.probing: dict[int, BaseException] = {}
        """Runners found temporarily unavailable (``ActorUnavailableError``: their node may be gone,
        or a connection dropped): worker index -> that error. Their ``inflight`` ref is a ``ping``
        until it answers (the runner is replaced all the same: its lost answer broke its episodes) or
        Ray declares the actor dead (replaced, once); meanwhile nothing else is sent to them, and no
        replacement goes to a node Ray has not yet declared dead."""
        self._last_ping: dict[int, float] = {}
        self.unconfirmed: set[int] = set()
        """Replacements that have not answered yet (their bundle may be waiting for room)."""
        self.waiting: list[int] = []
        """Runners the last ``collect`` went on without: replacements whose bundle no live node holds."""
        self.unacked: dict[ray.ObjectRef, int] = {}
        """State calls sent without waiting (``broadcast(wait=False)``), not yet answered: ref -> index."""
        self.queued: dict[int, list[tuple[ray.ObjectRef, SampleRequest]]] = {}
        """Requests sent behind the one in ``inflight`` (``max_requests_in_flight_per_env_runner`` > 1),
        oldest first: each becomes the runner's ``inflight`` one when the one before it is collected."""

    # ---------------------------------------------------------------- requests and answers
    def collect(self, deadline: float, *, min_ready: int | None = None) -> None:
        """Moves finished in-flight results into ``ready`` until all are in, ``min_ready`` answers
        are (if given), or the deadline passes; a failed runner is replaced and, during a sampling
        call, sent the call's request at once. A replacement whose bundle no live node holds (no
        survivor has room) is not waited for: its request stays queued, and its answer comes in a
        later call (``waiting``)."""
        self.waiting = []
        checked_at = float("-inf")
        by_ref = {ref: index for index, ref in self.inflight.items()}
        pending = list(by_ref)
        while pending:
            # Replacements not yet heard of: checked now and every second while they keep us waiting
            # (one started in this call may find its node gone and no room).
            starting = sorted(self.unconfirmed & {by_ref[r] for r in pending})
            if starting and time.monotonic() >= checked_at + _RECHECK_PLACEMENT_S:
                checked_at = time.monotonic()
                self.waiting = sorted({*self.waiting, *self.placement.unplaced(starting)})
                pending = [r for r in pending if by_ref[r] not in self.waiting]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not pending or (min_ready is not None and len(self.ready) >= min_ready):
                break
            wait_s = min(remaining, _RECHECK_PLACEMENT_S) if starting else remaining
            done, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
            for ref in done:
                index = by_ref[ref]
                del self.inflight[index]
                request = self.inflight_requests.pop(index)
                unavailable = self.probing.pop(index, None)  # this ref is a ping to an unavailable runner
                died: BaseException | None = None
                try:
                    result = ray.get(ref)
                except ray.exceptions.ActorUnavailableError as e:  # a "maybe": ask again, do not replace yet
                    by_ref[self.probe(index, request, unavailable or e)] = index
                    pending.append(self.inflight[index])
                    continue
                except ray.exceptions.RayError as e:
                    result, died = None, e
                if died is None and unavailable is not None and request is None:
                    self.resend_state(index)  # back, and only a state call's answer was lost: nothing to replace
                    self.promote(index)  # the ping ran after the requests queued before it: the next is due
                    continue
                if died is not None or unavailable is not None:  # dead, or back with its answer lost: replaced, once
                    self.fail(index, died or unavailable, lost_request=request)  # type: ignore[arg-type]
                    if index in self.actors and self.last_request is not None:
                        request, replay = self.last_request
                        by_ref[self.submit(index, request.without_reset(), replay)] = index
                        pending.append(self.inflight[index])
                    continue
                assert request is not None, "only a ping stands for no request, and a ping's answer is handled above"
                self.unconfirmed.discard(index)
                self.ready.append((index, self.answer(result, request, index)))
                promoted = self.promote(index)
                if promoted is not None and self.last_request is None:  # draining: wait for every queued one
                    by_ref[promoted] = index
                    pending.append(promoted)
                if self.group_config.keep_sampling and self.last_request is not None:
                    self.top_up(index)

    def promote(self, index: int) -> ray.ObjectRef | None:
        """Makes runner ``index``'s oldest queued request its ``inflight`` one (none in flight now);
        its ref, or None if none was queued."""
        queue = self.queued.get(index)
        if not queue or index in self.inflight:
            return None
        ref, request = queue.pop(0)
        self.inflight[index], self.inflight_requests[index] = ref, request
        return ref

    def top_up(self, index: int) -> None:
        """``keep_sampling``: sends runner ``index`` requests with the last call's arguments (a reset is
        never repeated) until it holds ``max_requests_in_flight_per_env_runner``."""
        assert self.last_request is not None
        request, replay = self.last_request
        request = request.without_reset()
        if index not in self.inflight:
            self.submit(index, request, replay)
        queue = self.queued.setdefault(index, [])
        while 1 + len(queue) < self.group_config.max_requests_in_flight_per_env_runner:
            queue.append((self.call(index, request, replay), request))

    def take_ready(self) -> list[tuple[int | None, Answer]]:
        """Empties ``ready``: with a seed in runner order (a stable sort: a runner's answers stay
        oldest first), else in arrival order, as there is no run to repeat."""
        ready, self.ready = self.ready, []
        if self.config.seed is not None:
            ready.sort(key=lambda item: -1 if item[0] is None else item[0])
        return ready

    def probe(self, index: int, request: SampleRequest | None, error: BaseException) -> ray.ObjectRef:
        """Pings runner ``index``, found unavailable with ``error`` while answering ``request`` (see
        ``probing``); the ping stands in ``inflight`` for the lost request."""
        since = time.monotonic() - self._last_ping.get(index, float("-inf"))
        if since < _MIN_PING_INTERVAL_S:  # a ping that fails at once is not sent again at once
            time.sleep(_MIN_PING_INTERVAL_S - since)
        self._last_ping[index] = time.monotonic()
        ref = self.actors[index].ping.remote()
        self.inflight[index] = ref
        self.inflight_requests[index] = request
        self.probing[index] = error
        return ref

    def resend_state(self, index: int) -> None:
        """Sends runner ``index`` the last broadcast weights and connector states again (a call of
        theirs may have been lost while it was unavailable; calls to one actor run in order)."""
        for ref in (self.modules_ref, self.weights_ref, self.connector_ref):
            if ref is not None:
                self.actors[index].set_state.remote(ref)

    def left_out(self) -> set[int]:
        """Runners no call waits for: being probed (unavailable) or waiting for room."""
        return set(self.probing) | set(self.waiting)

    def submit(self, index: int, request: SampleRequest, replay: Any) -> ray.ObjectRef:
        """Sends ``request`` to runner ``index`` (its chunks to go to ``replay`` if given) as its ``inflight`` one."""
        ref = self.call(index, request, replay)
        self.inflight[index] = ref
        self.inflight_requests[index] = request
        return ref

    def call(self, index: int, request: SampleRequest, replay: Any) -> ray.ObjectRef:
        """Sends ``request`` to runner ``index``: its ``collect``, or ``collect_to(replay)`` (of a list of
        replay shards, the one for this runner: ``replay_for``)."""
        actor = self.actors[index]
        if replay is None:
            return actor.collect.remote(request)
        return actor.collect_to.remote(replay_for(replay, index), request)

    def answer(self, result: Any, request: SampleRequest, index: int) -> Answer:
        """(chunks, metrics with the request) of a finished request of either kind (``collect_to``
        ships to the replay: no chunks)."""
        col, metrics = (None, result) if isinstance(result, RunnerMetrics) else result
        metrics = dataclasses.replace(metrics, request=request)
        # Only a collect_to answer reports the steps held for a dead replay (a collect leaves them held).
        held = metrics.num_env_steps_held_for_replay if isinstance(result, RunnerMetrics) else None
        # Chunks answered by reference (``chunks_by_ref``): the runner reports its running episodes.
        self.failures.track(index, None if isinstance(col, ray.ObjectRef) else col, metrics, num_env_steps_held=held)
        return col, metrics

    # ---------------------------------------------------------------- failures and lifecycle
    def fail(
        self, index: int, error: BaseException, *, lost_request: SampleRequest | None = None, replace: bool = True
    ) -> None:
        """Runner ``index`` failed: counts what died with it, kills it, and starts its replacement
        (``replace``) or raises EnvRunnerFailedError (restarts disabled or used up)."""
        actor = self.actors.pop(index, None)
        if actor is None:
            return  # handled already
        ref = self.inflight.pop(index, None)
        request = self.inflight_requests.pop(index, None) if lost_request is None else lost_request
        if self.probing.pop(index, None) is not None:
            ref = None  # a ping, not the request's answer: the request is lost
        # Answered before it died: the result is in the object store, not lost.
        lost = self._take_or_lose(index, ref, request)
        for queued_ref, queued_request in self.queued.pop(index, []):  # answered before it died, or lost
            lost += self._take_or_lose(index, queued_ref, queued_request)
        ray.kill(actor)  # a runner that raised is still alive, in an unknown state
        self.failures.record(index, error, num_env_steps_lost=lost, may_restart=replace)
        if replace:
            delay_s = self.group_config.delay_between_env_runner_restarts_s
            if delay_s > 0:
                time.sleep(delay_s)
            actor = self.start_runner(index, self._num_workers[index], restart=self.failures.num_restarts)
            self.unconfirmed.add(index)
            # Calls to one actor run in order: these land before its first sample.
            if self.weights_ref is not None:
                actor.set_state.remote(self.weights_ref)
            if self.connector_ref is not None:
                actor.set_state.remote(self.connector_ref)
            self.actors[index] = actor
        else:
            self.unconfirmed.discard(index)
            self.placement.free(index)

    def _steps_of(self, request: SampleRequest | None) -> int:
        """The env steps a lost ``request`` would have sampled (0 for none, or an episodes request)."""
        if request is None or request.num_episodes is not None:
            return 0
        return request.num_env_steps(
            rollout_fragment_length=self.config.rollout_fragment_length, num_envs=self.config.num_envs_per_env_runner
        )

    def _take_or_lose(self, index: int, ref: ray.ObjectRef | None, request: SampleRequest | None) -> int:
        """Puts the answer of runner ``index``'s call ``ref`` for ``request`` in ``ready`` if it came;
        else the env steps lost (a ref of None: it is lost)."""
        if ref is not None and request is not None and ray.wait([ref], timeout=0)[0]:
            try:
                self.ready.append((index, self.answer(ray.get(ref), request, index)))
                return 0
            except ray.exceptions.RayError:
                pass
        return self._steps_of(request)

    def start_runner(self, index: int, num_workers: int, *, restart: int = 0) -> Any:
        """A new runner actor for ``index``; a replacement (``restart`` > 0) gets a fresh seed."""
        config = restart_config(self.config, index, restart)
        self._num_workers[index] = num_workers
        name = f"{self.name_prefix}-env-runner-{index}" + (f"-restart-{restart}" if restart else "")
        return self._remote.options(name=name, **self.placement.options(index)).remote(
            config, worker_index=index, num_workers=num_workers
        )

    def wait_all(
        self,
        refs: dict[ray.ObjectRef, int],
        timeout_s: float,
        what: str,
        *,
        on_failure: str = "replace",
        late_ok: bool = False,
    ) -> list[Any]:
        """The results of the calls ``refs`` (ref -> worker index) of the runners that did not fail;
        a failed runner is replaced (``on_failure="replace"``), dropped (``"drop"``), or its error
        raised (``"raise"``). A call still running at the deadline raises SampleTimeoutError, unless
        ``late_ok`` (a state sent: calls to an actor run in order, so it lands before the runner's
        next sample even late; a runner whose node crashed answers nothing until Ray says so)."""
        done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        results = []
        for ref in done:
            index = refs[ref]
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayError as e:
                unavailable = isinstance(e, ray.exceptions.ActorUnavailableError)
                if unavailable and on_failure == "replace":  # a "maybe" (see ``probing``): pinged, not replaced
                    if index in self.actors and index not in self.inflight:  # else its sampling request will tell
                        self.probe(index, None, e)
                elif on_failure == "raise":
                    raise _start_error(index, e) from e
                else:
                    self.fail(index, e, replace=on_failure == "replace")
        late = sorted(refs[r] for r in pending)
        if late and not late_ok:
            raise SampleTimeoutError(f"env runners {late} did not {what} within {timeout_s} s")
        if late:
            note = "it lands before their next sample"
            logger.warning("env runners %s did not %s within %g s: %s", late, what, timeout_s, note)
        return results

    def remove(self, index: int) -> None:
        """Kills runner ``index`` on purpose (scale-down): not a failure, nothing of it is tracked."""
        self.failures.forget(index)
        self.unconfirmed.discard(index)
        self.probing.pop(index, None)
        self._last_ping.pop(index, None)
        self.inflight.pop(index, None)
        self.inflight_requests.pop(index, None)
        self.queued.pop(index, None)
        ray.kill(self.actors.pop(index))
        self.placement.free(index)

    def stop(self) -> None:
        """Kills every runner actor and forgets their requests in flight."""
        for actor in self.actors.values():
            ray.kill(actor)
        self.actors.clear()
        self.inflight.clear()
        self.queued.clear()
        self.probing.clear()
        self.unconfirmed.clear()
        self.placement.release_all()

    def start_new(self, indices: list[int], num_workers: int) -> None:
        """Starts runners ``indices`` (placed already) with the last broadcast weights and connector
        states; all or none: a runner that cannot start is a setup error, not a failure to recover from."""
        new = {index: self.start_runner(index, num_workers) for index in indices}
        if not new:
            return
        calls = {
            a.set_state.remote(self.weights_ref) if self.weights_ref else a.ping.remote(): i for i, a in new.items()
        }
        if self.connector_ref is not None:  # new runners also get the agreed connector states
            calls.update({a.set_state.remote(self.connector_ref): i for i, a in new.items()})
        try:
            self.wait_all(calls, self.group_config.actor_start_timeout_s, "start", on_failure="raise")
        except RaySamplerError:
            for i, a in new.items():
                ray.kill(a)
                self.placement.free(i)
            raise
        self.actors.update(new)

    def settle(self, indices: list[int], timeout_s: float) -> None:
        """Moves the in-flight answers of runners ``indices`` into ``ready`` without sending them more
        (they are about to stop); all or none: SampleTimeoutError if one is still sampling."""
        left_out = self.left_out()
        for i in sorted(left_out & set(indices) & self.inflight.keys()):  # never coming: lost, not waited for
            self.fail(i, self.probing.get(i) or RuntimeError("waiting for room"), replace=False)
        inflight = {self.inflight[i]: i for i in indices if i in self.inflight}
        queued = {ref: i for i in indices for ref, _ in self.queued.get(i, [])}
        if not inflight and not queued:
            return
        refs = [*inflight, *queued]
        _, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if late:
            late_runners = sorted({inflight[r] if r in inflight else queued[r] for r in late})
            raise SampleTimeoutError(
                f"env runners {late_runners} are still sampling after {timeout_s} s; "
                "no runner was stopped (scale down again once they finish)"
            )
        for ref, i in inflight.items():  # no new request for a runner about to stop
            unavailable = self.probing.get(i)
            request = self.inflight_requests[i]
            if unavailable is not None or request is None:  # its answer is lost: a failure, not replaced
                self.fail(i, unavailable or RuntimeError("no answer"), lost_request=request, replace=False)
                continue
            del self.inflight[i], self.inflight_requests[i]
            try:
                self.ready.append((i, self.answer(ray.get(ref), request, i)))
            except ray.exceptions.RayError as e:
                self.fail(i, e, lost_request=request, replace=False)
        for i in indices:  # then the requests queued behind, oldest first
            while i in self.actors and self.promote(i) is not None:
                ref, queued_request = self.inflight.pop(i), self.inflight_requests.pop(i)
                assert queued_request is not None, "a queued request is a sample request, never a ping"
                request = queued_request
                try:
                    self.ready.append((i, self.answer(ray.get(ref), request, i)))
                except ray.exceptions.RayError as e:
                    self.fail(i, e, lost_request=request, replace=False)  # counts the ones behind it too

    def broadcast(self, state_ref: ray.ObjectRef, timeout_s: float, what: str, *, wait: bool = True) -> None:
        """Sends the state ``state_ref`` (one ``ray.put``) to every runner and waits for them up to
        ``timeout_s`` (a late one takes it before its next sample: logged). Not to runners left out
        (``left_out``): a runner being probed gets it again if it comes back, a replacement waiting
        for room takes the newest state when it starts. Without ``wait`` the calls are only sent
        (each lands before the runner's next sample: calls to an actor run in order); their answers
        are settled later (``settle_unacked``)."""
        self.settle_unacked()
        skip = self.left_out()
        calls = {a.set_state.remote(state_ref): i for i, a in self.actors.items() if i not in skip}
        if wait:
            self.wait_all(calls, timeout_s, what, late_ok=True)
        else:
            self.unacked.update(calls)

    def settle_unacked(self) -> None:
        """Takes the answers of state calls sent without waiting that are in by now. A runner whose
        call failed is replaced, unless its sampling request is in flight: that request's answer
        tells (and the replacement takes the newest state when it starts)."""
        if not self.unacked:
            return
        done, _ = ray.wait(list(self.unacked), num_returns=len(self.unacked), timeout=0)
        for ref in done:
            index = self.unacked.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.RayError as e:
                if index in self.actors and index not in self.inflight and index not in self.probing:
                    self.fail(index, e)
