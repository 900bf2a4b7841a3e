"""EnvRunnerGroup: the fleet of remote EnvRunner actors, sampled with deadlines and scaled at run time.

- ``sample()`` sends one request to every runner that has none in flight and takes results as
  they come (``ray.wait``); at the deadline it returns what is ready and keeps the slow
  runners' requests in flight, so their results come with a later call: a slow runner never
  blocks the others, and no result is lost or returned twice.
- With a seed (``EnvRunnerConfig.seed``) the answers, and the returns in the metrics, come in
  runner order (``worker_index``; a runner's answers oldest first), so a seeded rerun sees the
  same data in the same order (PPO's train batch, hence its minibatches, depends on it) as long
  as every runner answers by the deadline and none fails (those depend on timing). Unseeded, they
  come in arrival order: there is nothing to repeat. With ``sample_to_replay`` the runners add
  their chunks to the replay actor themselves, in the order they reach it, which the driver does
  not control: the replay's contents (and a DQN run) are not repeatable; the answers (metrics)
  and the adds the driver makes are in runner order.
- Each runner gets one ``SampleRequest`` and ships its answer as one columnar object with its
  ``RunnerMetrics`` (its method's return value).
- ``sync_weights(state)`` puts the weights once (one ``ray.put``) and sends the reference to
  every runner; each result reports the weights version it was sampled with.
- With ``keep_sampling``, a runner gets its next request as soon as its result is collected, so
  it samples while the driver works (results may lag one weights version; see the metrics).
- ``scale(n)`` adds runners (they get the current weights) or stops the highest-indexed ones
  after collecting their in-flight results and draining what they hold (chunks held for a dead
  replay actor first), which comes with the next ``sample()`` (or ``sample_to_replay()``, added
  from the driver): in truncate mode no env step is lost or duplicated; in complete mode
  (whole episodes only) running episodes are dropped and counted in the metrics.
- A runner whose actor dies (``RayActorError``: SIGKILL, ``ray.kill``, a lost node) or whose call
  raises is replaced by a new actor under the same ``worker_index``, with the last broadcast
  weights and connector states and a fresh seed; what died with it is counted and logged
  (``runner_failures.py`` says how, and why not through Ray's ``max_restarts``). The
  ``EnvRunnerGroupConfig`` fault-tolerance fields bound it; past them ``EnvRunnerFailedError``.
  The actors, their requests in flight and the replacements are kept by a ``RunnerFleet``
  (``runner_fleet.py``); the chunks a dead replay did not take by a ``ReplayOutbox``.
- The env and the module are checked on the driver before any actor starts (``preflight.py``).

The group never calls ``ray.init``; start Ray first.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import uuid
from typing import Any

import ray

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar, pack_episodes, unpack_columnar
from ray_sampler.errors import ConfigError, RaySamplerError
from ray_sampler.handles import call
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.metrics import GroupMetrics, RunnerMetrics
from ray_sampler.sampling.preflight import prepare_env
from ray_sampler.sampling.replay_outbox import ReplayOutbox, replay_for, shard_index
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.runner_fleet import Answer, RunnerFleet, SampleTimeoutError
from ray_sampler.validate import check_int, check_optional

__all__ = ["Answer", "EnvRunnerGroup", "SampleTimeoutError"]


class EnvRunnerGroup:
    """N remote EnvRunner actors (worker indices 1..N) sampling one config."""

    def __init__(self, config: EnvRunnerConfig, group_config: EnvRunnerGroupConfig | None = None) -> None:
        self.group_config = group_config or EnvRunnerGroupConfig()
        config = prepare_env(config, self.group_config)  # the driver-side checks, before any actor starts
        if not ray.is_initialized():
            raise RaySamplerError("EnvRunnerGroup needs a running Ray: call ray.init() first")
        self.config = config
        self._name_prefix = f"ray-sampler-{uuid.uuid4().hex[:8]}"
        self._fleet = RunnerFleet(config, self.group_config, self._name_prefix)
        self._drained: list[Any] = []  # SingleAgentEpisode or MultiAgentEpisode chunks
        self._outboxes: dict[int, ReplayOutbox] = {}  # per replay shard, chunks a dead replay did not take
        self._next_index = 1
        self._num_dropped_by_scale = 0
        self._stopped_connector_states: list[dict[str, Any]] = []  # unsynced moments of stopped runners
        self.merged_connector_states: dict[str, Any] | None = None
        """The connector states of the last sync (for a learner pipeline's copy of e.g. MeanStdFilter)."""
        self.weights_version = 0
        self._module_refs: dict[str, ray.ObjectRef] = {}  # multi-agent: each module's newest weights
        self.metrics = GroupMetrics()
        """Metrics of the last sampling call."""
        self.scale(self.group_config.num_env_runners)

    @property
    def num_env_runners(self) -> int:
        return len(self._fleet.actors)

    @property
    def worker_indices(self) -> list[int]:
        return sorted(self._fleet.actors)

    @property
    def name_prefix(self) -> str:
        """The runners' actor names are ``{name_prefix}-env-runner-{worker_index}`` (a replacement's
        end in ``-restart-{n}``: a dead actor's name may not be free yet)."""
        return self._name_prefix

    @property
    def in_flight(self) -> list[int]:
        """Worker indices with a request in flight."""
        return sorted(self._fleet.inflight)

    @property
    def num_requests_in_flight(self) -> int:
        """Requests sent and not yet collected, queued ones included: at most ``num_env_runners x
        max_requests_in_flight_per_env_runner`` (what bounds the answers waiting in the object store)."""
        return len(self._fleet.inflight) + sum(len(q) for q in self._fleet.queued.values())

    def actor(self, worker_index: int) -> Any:
        """The actor handle of runner ``worker_index``."""
        return self._fleet.actors[worker_index]

    # ---------------------------------------------------------------- sampling
    def sample(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        *,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
        timeout_s: float | None = None,
        min_answers: int | None = None,
    ) -> list[SingleAgentEpisode]:
        """Episodes from every runner that answered by the deadline (see the module docstring);
        the arguments are those of ``EnvRunner.sample`` per runner. With ``min_answers`` the call
        returns as soon as that many runners answered (an asynchronous loop takes each fragment as it
        comes; the others stay in flight)."""
        results = self.sample_columnar(
            num_timesteps,
            num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
            timeout_s=timeout_s,
            min_answers=min_answers,
        )
        return [ep for col, _ in results if col is not None for ep in unpack_columnar(col)]

    def sample_columnar(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        *,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
        timeout_s: float | None = None,
        min_answers: int | None = None,
        chunks_by_ref: bool = False,
    ) -> list[Answer]:
        """Like ``sample`` but gives each runner's (columnar object, metrics) as shipped, plus one
        entry (worker_index None) for the unfinished episodes of runners stopped by ``scale``.
        With ``chunks_by_ref`` a runner's columnar object is an ObjectRef the runner put (the
        ``scale`` entry's stays an object): pass it to another actor, which reads it from the store."""
        check_optional(check_int, "min_answers", min_answers, minimum=1)
        request = SampleRequest(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
            chunks_by_ref=chunks_by_ref,
        )
        return self._sample(request, None, timeout_s, min_answers)

    def _sample(
        self, request: SampleRequest, replay: Any, timeout_s: float | None, min_answers: int | None = None
    ) -> list[Answer]:
        """Sends ``request`` (to go to ``replay`` if given) to every runner with none in flight and
        collects answers until the deadline."""
        if not self._fleet.actors:
            raise RaySamplerError("the group has no env runners (scale it up first)")
        self._fleet.last_request = (request, replay)
        for index in list(self._fleet.actors):
            if index not in self._fleet.inflight:
                self._fleet.submit(index, request, replay)
        num_failures = self._fleet.failures.num_failures
        deadline = time.monotonic() + (timeout_s or self.group_config.sample_timeout_s)
        self._fleet.settle_unacked()
        self._fleet.collect(deadline, min_ready=min_answers)
        if not self._fleet.ready:
            late = sorted(self._fleet.inflight)
            if self._fleet.failures.num_failures > num_failures:
                raise self._fleet.failures.error(
                    f"no env runner answered within the deadline (runners {late} starting)"
                )
            unavailable, waiting = sorted(self._fleet.probing), sorted(self._fleet.waiting)
            if unavailable or waiting:
                raise SampleTimeoutError(
                    f"no env runner answered within the deadline (runners {unavailable} unavailable, their node "
                    f"may be down; {waiting} waiting for room)"
                )
            raise SampleTimeoutError(f"no env runner answered within the deadline (runners {late} still sampling)")
        ready = self._fleet.take_ready()
        if self._drained:
            drained, self._drained = self._drained, []
            steps = sum(len(ep) for ep in drained)
            agent_steps = sum(ep.agent_steps() if hasattr(ep, "agent_steps") else len(ep) for ep in drained)
            left = RunnerMetrics(
                worker_index=None,
                num_env_steps=steps,
                num_agent_steps=agent_steps,
                weights_version=self.weights_version,
            )
            ready.append((None, (pack_episodes(drained), left)))
        self.metrics = GroupMetrics.of(
            [metrics for _, (_, metrics) in ready],
            weights_version=self.weights_version,
            late_runners=sorted(self._fleet.inflight),
            num_dropped_by_scale=self._num_dropped_by_scale,
        )
        self.metrics = dataclasses.replace(self.metrics, **self._fleet.failures.metrics(len(self._fleet.actors)))
        self._note_runners_left_out()
        return [result for _, result in ready]

    def _note_runners_left_out(self) -> None:
        """The metrics and one log line for the runners this call went on without, though not failed
        (yet): unavailable (their node may be down) or waiting for room."""
        unavailable, waiting = sorted(self._fleet.probing), sorted(self._fleet.waiting)
        if not unavailable and not waiting:
            return
        parts = []
        if unavailable:
            parts.append(f"runners {unavailable} unavailable (their node may be down; replaced once Ray says so)")
        if waiting:
            parts.append(f"runners {waiting} waiting for room (their node is gone and no live node has room)")
        line = f"{'; '.join(parts)}: this call went on without them"
        healthy = len(self._fleet.actors) - len(set(unavailable) | set(waiting))
        self.metrics = dataclasses.replace(
            self.metrics,
            num_healthy_env_runners=healthy,
            unavailable_runners=unavailable,
            waiting_runners=waiting,
            runner_failures=[*self.metrics.runner_failures, line],
        )

    def sample_to_replay(
        self,
        replay: Any,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        *,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
        timeout_s: float | None = None,
    ) -> list[RunnerMetrics]:
        """Like ``sample_columnar`` but each runner sends its chunks straight to the ``replay`` actor
        (no copy through the driver); returns the runners' metrics, each with the replay's ack.
        ``replay`` may be a list of replay shards (replay.shards): runner ``worker_index`` sends to
        shard ``(worker_index - 1) % len(replay)``, always the same one.
        The replay takes the runners' chunks in the order they reach it, even with a seed (the
        module docstring says what a seed makes repeatable).

        Results of requests made earlier without a replay (and a stopped runner's chunks) are
        added from the driver, so nothing is lost when switching. If the replay actor is dead
        (``RayActorError``), the chunks it did not take are held by the group, in order, and counted
        in their answer's ``num_env_steps_held_for_replay`` (its ``replay`` ack is None); the next
        call adds them first, before sampling, and raises the ``RayActorError`` if the replay it was
        given is dead too (nothing was sampled then).
        """
        request = SampleRequest(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        for shard, outbox in sorted(self._outboxes.items()):
            outbox.flush(replay[shard] if isinstance(replay, list | tuple) else replay)
        out = []
        for col, metrics in self._sample(request, replay, timeout_s):
            if col is not None:
                metrics = self._add_from_driver(replay, col, metrics)
            out.append(metrics)
        return out

    def _add_from_driver(
        self, replay: Any, col: ColumnarEpisodes | MultiAgentColumnar, metrics: RunnerMetrics
    ) -> RunnerMetrics:
        """``metrics`` with the ack of adding ``col`` to ``replay``; a dead replay (now or for an earlier
        chunk of this call: the order is kept) leaves ``col`` held, counted as held for the replay."""
        shard = shard_index(metrics.worker_index, len(replay)) if isinstance(replay, list | tuple) else 0
        outbox = self._outboxes.setdefault(shard, ReplayOutbox())
        if outbox.is_empty:
            try:
                return dataclasses.replace(metrics, replay=call(replay_for(replay, metrics.worker_index).add, col))
            except ray.exceptions.RayActorError:
                pass  # held below: the restored replay gets it first
        outbox.hold(col)
        held = metrics.num_env_steps_held_for_replay + col.num_env_steps
        return dataclasses.replace(metrics, replay=None, num_env_steps_held_for_replay=held)

    # ---------------------------------------------------------------- weights
    def sync_weights(
        self,
        module_state: dict[str, Any],
        *,
        connector_states: bool = False,
        timeout_s: float | None = None,
        wait: bool = True,
    ) -> int:
        """Sends ``module_state`` to every runner (one ``ray.put``); returns the new weights version.

        A multi-agent group takes ``{module_id: weights}`` for any of its modules: each module's
        weights go into the object store on their own (one ``ray.put`` per module given; modules
        not given keep the object they had), and a runner fetches a module's object only when one
        of its agents maps to that module (``MultiAgentEnvRunner.set_weights``).

        With ``connector_states`` the runners' env-to-module connector states are merged first (as
        in ``sync_connector_states``) and broadcast with the weights, in the same object. Without
        ``wait`` the weights are only sent: a runner sampling now takes them before its next sample
        (calls to an actor run in order), and the caller goes on at once (an asynchronous loop)."""
        timeout_s = timeout_s or self.group_config.sample_timeout_s
        if self.config.multi_agent is not None:
            unknown = sorted(set(module_state) - set(self.config.multi_agent.module_ids))
            if unknown:
                raise ConfigError(
                    f"weights for unknown modules {unknown} (modules: {list(self.config.multi_agent.module_ids)})"
                )
            self._module_refs.update({mid: ray.put(w) for mid, w in module_state.items()})
            module_state = dict(self._module_refs)
        state: dict[str, Any] = {"module": module_state}
        if connector_states:
            state["env_to_module"] = self.merged_connector_states = self._merge_connector_states(timeout_s)
            # Kept apart too: runners added later take the weights, then the newest connector states.
            self._fleet.connector_ref = ray.put({"env_to_module": state["env_to_module"]})
        self.weights_version += 1
        self._fleet.weights_ref = ray.put({**state, "weights_version": self.weights_version})
        # A runner that fails now is replaced, and its replacement takes them when it starts.
        self._fleet.broadcast(self._fleet.weights_ref, timeout_s, "take the new weights", wait=wait)
        return self.weights_version

    def sync_connector_states(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        """Merges the runners' env-to-module connector states (by piece name; e.g. MeanStdFilter's
        moments, exactly) and sends the result to every runner with one ``ray.put``; returns it."""
        timeout_s = timeout_s or self.group_config.sample_timeout_s
        merged = self._merge_connector_states(timeout_s)
        self.set_connector_states(merged, timeout_s=timeout_s)
        return merged

    def set_connector_states(self, merged: dict[str, Any], *, timeout_s: float | None = None) -> None:
        """Sends merged env-to-module connector states (``sync_connector_states``'s, e.g. from a
        checkpoint) to every runner with one ``ray.put``; runners added later start from them."""
        timeout_s = timeout_s or self.group_config.sample_timeout_s
        self.merged_connector_states = merged
        self._fleet.connector_ref = ray.put({"env_to_module": merged})
        self._fleet.broadcast(self._fleet.connector_ref, timeout_s, "take the states")

    def _merge_connector_states(self, timeout_s: float) -> dict[str, Any]:
        from connectors.pipeline import ConnectorPipelineV2

        skip = self._fleet.left_out()  # unavailable or waiting for room: what they saw merges next time
        states = self._fleet.wait_all(
            {a.get_state.remote(): i for i, a in self._fleet.actors.items() if i not in skip}, timeout_s, "report state"
        )
        if not states and not self._stopped_connector_states and self.merged_connector_states is not None:
            return self.merged_connector_states  # nobody saw anything since: what was agreed stands
        # The user's pieces come first in every runner's pipeline (the defaults hold no state), so
        # their names, and so their states' keys, are the same as here. Runners stopped since the
        # last sync still count with what they saw.
        every = [s["env_to_module"] for s in states] + self._stopped_connector_states
        pieces = list(self.config.env_to_module_connectors)
        if self.config.multi_agent is not None:  # {module id: pipeline state}: merged module by module
            merged: dict[str, Any] = {
                mid: ConnectorPipelineV2(copy.deepcopy(pieces)).merge_states([s[mid] for s in every if mid in s])
                for mid in self.config.multi_agent.module_ids
            }
        else:
            merged = ConnectorPipelineV2(pieces).merge_states(every)
        self._stopped_connector_states = []
        return merged

    # ---------------------------------------------------------------- multi-agent modules
    def add_module(
        self,
        module_id: str,
        weights: dict[str, Any],
        *,
        spec: Any = None,
        policy_mapping_fn: Any = None,
        trainable: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        """Adds module ``module_id`` with ``weights`` to every runner of a multi-agent group, between
        sampling calls (self-play's frozen copy of the policy it trains): ``spec`` (a ModuleSpec;
        None: the runner config's module, on the spaces every agent shares), the new
        ``policy_mapping_fn`` if given, and ``trainable`` (whether it joins ``policies_to_train``).
        Runners started later (replacements, ``scale``) start with it."""
        from ray_sampler.sampling.multi_agent_config import ModuleSpec

        ma = self._multi_agent("add_module")
        if module_id in ma.module_ids:
            raise ConfigError(f"add_module: module id {module_id!r} is taken (modules: {list(ma.module_ids)})")
        train = ma.policies_to_train
        if train is not None and trainable:
            train = (*train, module_id)
        elif train is None and not trainable:
            train = ma.module_ids
        self._set_multi_agent(
            dataclasses.replace(
                ma,
                policies={**ma.policies, module_id: spec or ModuleSpec()},
                policy_mapping_fn=policy_mapping_fn or ma.policy_mapping_fn,
                policies_to_train=train,
            ),
            timeout_s,
        )
        self.sync_weights({module_id: weights}, timeout_s=timeout_s)

    def remove_module(self, module_id: str, *, policy_mapping_fn: Any = None, timeout_s: float | None = None) -> None:
        """Removes module ``module_id`` from every runner of a multi-agent group, between sampling
        calls, with the new ``policy_mapping_fn`` if given (the old one must not name it again)."""
        ma = self._multi_agent("remove_module")
        if module_id not in ma.module_ids:
            raise ConfigError(f"remove_module: no module {module_id!r} (modules: {list(ma.module_ids)})")
        if len(ma.module_ids) == 1:
            raise ConfigError(f"remove_module: {module_id!r} is the only module; a run needs one")
        train = None if ma.policies_to_train is None else tuple(m for m in ma.policies_to_train if m != module_id)
        self._set_multi_agent(
            dataclasses.replace(
                ma,
                policies={mid: s for mid, s in ma.policies.items() if mid != module_id},
                policy_mapping_fn=policy_mapping_fn or ma.policy_mapping_fn,
                policies_to_train=train,
            ),
            timeout_s,
        )
        self._module_refs.pop(module_id, None)

    def _multi_agent(self, what: str) -> Any:
        if self.config.multi_agent is None:
            raise ConfigError(f"{what}: this group samples a single-agent env (it has one module)")
        return self.config.multi_agent

    def _set_multi_agent(self, ma_config: Any, timeout_s: float | None) -> None:
        """Every runner (and every runner started later) takes ``ma_config``."""
        timeout_s = timeout_s or self.group_config.sample_timeout_s
        self.config = self._fleet.config = dataclasses.replace(self.config, multi_agent=ma_config)
        self._fleet.modules_ref = ray.put({"multi_agent": ma_config})
        self._fleet.broadcast(self._fleet.modules_ref, timeout_s, "take the new modules")

    # ---------------------------------------------------------------- scaling and lifecycle
    def scale(self, num_env_runners: int) -> None:
        """Adds or stops runners until there are ``num_env_runners`` (see the module docstring).

        Stopping waits up to ``sample_timeout_s`` for the stopped runners' in-flight samples; if one
        is still sampling, SampleTimeoutError is raised and no runner is stopped.
        """
        check_int("num_env_runners", num_env_runners, minimum=0)
        if len(self._fleet.actors) > num_env_runners:
            self._stop_runners(sorted(self._fleet.actors)[num_env_runners:])
        indices = list(range(self._next_index, self._next_index + num_env_runners - len(self._fleet.actors)))
        self._fleet.placement.reserve(indices)  # the cluster could never hold them: raises before any starts
        self._next_index += len(indices)
        self._fleet.start_new(indices, num_env_runners)

    def _stop_runners(self, indices: list[int]) -> None:
        """Collects the runners' in-flight results and drained episodes (for the next ``sample()``),
        then kills them; all or none."""
        timeout_s = self.group_config.sample_timeout_s
        self._fleet.settle(indices, timeout_s)
        # A runner that fails now is stopped anyway: counted, not replaced.
        live = [i for i in indices if i in self._fleet.actors]
        get_states = {self._fleet.actors[i].get_state.remote(): i for i in live}
        states = self._fleet.wait_all(get_states, timeout_s, "report state", on_failure="drop")
        self._stopped_connector_states += [s["env_to_module"] for s in states]
        live = [i for i in live if i in self._fleet.actors]
        drains = self._fleet.wait_all(
            {self._fleet.actors[i].drain.remote(): i for i in live}, timeout_s, "drain", on_failure="drop"
        )
        for episodes, dropped in drains:
            self._drained += episodes
            self._num_dropped_by_scale += dropped
        for i in live:
            if i in self._fleet.actors:
                self._fleet.remove(i)

    def collect_in_flight(self, *, timeout_s: float | None = None) -> list[Answer]:
        """Waits for the requests still in flight (``keep_sampling`` keeps one per runner) without
        making new ones; their (columnar object, metrics) as in ``sample_columnar`` (requests made
        by ``sample_to_replay`` have stored their chunks in the replay already: no columnar
        object). Call it before ``stop`` so that no sampled step is discarded.

        Raises SampleTimeoutError if some are still in flight at the deadline (they stay there)."""
        self._fleet.last_request = None  # no request ahead from here on
        self._fleet.collect(time.monotonic() + (timeout_s or self.group_config.sample_timeout_s))
        still = sorted(self._fleet.inflight.keys() - self._fleet.left_out())  # the left out never answer soon
        if still:
            raise SampleTimeoutError(f"runners {still} still sampling at the deadline")
        ready = self._fleet.take_ready()
        return [result for _, result in ready]

    def stop(self) -> None:
        """Kills every runner actor (unreturned results are discarded: see ``collect_in_flight``)."""
        self._fleet.stop()

    def __enter__(self) -> EnvRunnerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
