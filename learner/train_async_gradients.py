"""train_async_gradients: the asynchronous-gradients policy optimizer (seed 002's
``AsyncGradientsOptimizer``; A3C's): runners compute gradients, the driver applies them.

Each worker actor (``GradientWorker``) holds an env runner and a learner that share one module: it
samples a fragment with the weights it has, builds the train batch (GAE on its own values: the
data is on-policy for the weights that sampled it), and ships only the gradients of the loss on
the whole fragment (``PPOConfig.policy_loss``; ``"pg"``, the plain policy gradient, is A3C's) with
the weights version they were computed at. The driver applies them in arrival order (the central
learner's Adam step) and sends the new weights back to that worker alone, with its next request:
calls to an actor run in order, so the worker computes its next gradients with them.

A gradient's *staleness* is the number of updates applied since the weights it was computed with
(the others' gradients, arrived meanwhile). Those staler than ``AsyncGradientsConfig.max_staleness``
are dropped and counted, with their env steps. ``AsyncGradientsResult.staleness`` is the histogram.

The workers are named Ray actors (``ray-sampler-<run>-gradient-worker-<index>``, a replacement's
name ending ``-restart-<n>``). A worker that dies is replaced under its index with the current
weights (up to the runner group's ``max_num_env_runner_restarts``); the fragment it was computing
is counted lost. When the run ends,
the gradients still in flight are collected and counted unused: every env step sampled is used,
dropped, unused or lost.

Checkpoints hold the central learner and the counters; the gradients in flight at a save are
counted lost by a run resumed from it. Not yet: multi-agent envs, the mean/std filter, stateful
modules, learner actors (each refused in one line).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import numpy as np
import ray

from learner.checkpoint import Checkpointer, TrainingState
from learner.evaluation_loop import TrainingEvaluation
from learner.frameworks import Framework, ppo_learner_class
from learner.keep_policy import PolicyKeeper, best_policy_dir, run_info
from learner.metrics import IterationRecord, PPOTrainResult, async_figures
from learner.optimizers import Optimizer
from learner.train import (
    LOOPS,
    LoopHandle,
    PPOTrainingConfig,
    ReturnTracker,
    StopOn,
    budget_used,
    check_training_resources,
    multi_agent_runner,
    run_to_end,
    set_learner_state,
    stop_reason,
    target_for,
)
from ray_sampler.errors import ConfigError, EnvRunnerFailedError
from ray_sampler.sampling.config import BatchMode
from ray_sampler.sampling.env_creator import env_name, probe_env
from ray_sampler.sampling.env_runner import EnvRunner, build_module
from ray_sampler.sampling.evaluation import check_evaluation_opponent
from ray_sampler.sampling.runner_build import build_policy
from ray_sampler.sampling.runner_fleet import restart_config

__all__ = [
    "AsyncGradientsResult",
    "GradientWorker",
    "async_gradients_iterations",
    "check_async_gradients",
    "train_async_gradients",
]


@dataclasses.dataclass(frozen=True)
class Gradients:
    """One worker's answer: the gradients of its fragment's loss and what they came from."""

    grads: dict[str, np.ndarray]
    weights_version: int
    num_env_steps: int
    duration_s: float
    episode_returns: list[float]
    losses: dict[str, float]


class GradientWorker:
    """An env runner and a learner sharing one module, as a Ray actor: ``compute`` samples a fragment
    and returns its gradients (``Gradients``); ``set_weights`` loads the driver's weights."""

    def __init__(self, cfg: PPOTrainingConfig, *, worker_index: int, num_workers: int) -> None:
        self.runner = EnvRunner(cfg.env_runner, worker_index=worker_index, num_workers=num_workers)
        self.learner = ppo_learner_class(cfg.framework)(self.runner.module, cfg.ppo)

    def set_weights(self, weights: dict[str, Any], version: int) -> int:
        self.runner.set_state({"module": weights, "weights_version": version})  # the learner's module too
        return version

    def compute(self) -> Gradients:
        episodes = self.runner.sample()
        metrics = self.runner.metrics
        self.learner.set_batch(episodes)
        self.learner.plan_epoch(1)  # the whole fragment: one gradient, as A3C's workers compute
        terms, grads, _ = self.learner.compute_gradients(0)
        return Gradients(
            grads=grads,
            weights_version=metrics.weights_version,
            num_env_steps=metrics.num_env_steps,
            duration_s=metrics.duration_s,
            episode_returns=list(metrics.episode_returns),
            losses={k: float(v) for k, v in terms.items()},
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncGradientsResult(PPOTrainResult):
    """What ``train_async_gradients`` reached, and where the sampled env steps went."""

    staleness: dict[int, int]
    """Gradients that arrived, by staleness (updates applied since their weights), dropped ones included."""
    num_gradients_dropped: int
    """Gradients dropped for exceeding ``max_staleness``."""
    num_env_steps_dropped: int
    """Their env steps."""
    num_env_steps_unused: int
    """Env steps of the gradients still in flight when the run ended (collected, not applied)."""
    num_env_steps_lost: int
    """Env steps of the fragments whose worker died while computing them."""
    num_worker_restarts: int
    """Workers replaced after dying."""
    num_env_steps_lost_on_resume: int = 0
    """A resumed run: the env steps the workers were computing gradients on when its checkpoint was
    saved (in ``num_env_steps_lost`` too)."""


def train_async_gradients(
    cfg: PPOTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    checkpointer: Any = None,
    resume: Any = None,
    policy_dir: Path | None = None,
) -> AsyncGradientsResult:
    """Trains with asynchronous gradients (see the module docstring) until ``target_return`` or the
    first budget: ``max_iterations`` updates (one per gradient applied), ``max_env_steps`` env steps
    applied, ``max_time_s``. ``on_iteration`` gets each update's
    record (without one, a line to ``log``). The result holds the final policy (the central
    module's weights), also written to ``policy_dir`` when given, however the loop ends."""
    steps = async_gradients_iterations(
        cfg, log=log, on_iteration=on_iteration, checkpointer=checkpointer, resume=resume, policy_dir=policy_dir,
        handle=LoopHandle(),
    )  # fmt: skip
    return run_to_end(steps)


def async_gradients_iterations(
    cfg: PPOTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    checkpointer: Any = None,
    resume: Any = None,
    policy_dir: Path | None = None,
    handle: LoopHandle,
) -> Generator[IterationRecord | None, None, AsyncGradientsResult]:
    """``train_async_gradients``' loop as a generator of its updates' records (``learner.train.ppo_iterations``)."""
    check_async_gradients(cfg)
    check_training_resources(cfg.env_runner_group, 0, 0.0, cfg.evaluation)
    check_evaluation_opponent(cfg.evaluation, None, None)
    probe = probe_env(cfg.env_runner.env, cfg.env_runner.env_config)
    central = ppo_learner_class(cfg.framework)(
        build_module(cfg.env_runner, probe.observation_space, probe.action_space), cfg.ppo
    )
    group = cfg.env_runner_group
    remote: Any = ray.remote(GradientWorker)
    prefix = f"ray-sampler-{uuid.uuid4().hex[:8]}"
    num_workers = group.num_env_runners

    def start(index: int, restart: int) -> Any:  # a replacement gets a fresh seed
        worker_cfg = dataclasses.replace(cfg, env_runner=restart_config(cfg.env_runner, index, restart))
        name = f"{prefix}-gradient-worker-{index}" + (f"-restart-{restart}" if restart else "")
        return remote.options(num_cpus=group.num_cpus_per_env_runner, name=name).remote(
            worker_cfg, worker_index=index, num_workers=num_workers
        )

    workers = {i: start(i, 0) for i in range(1, num_workers + 1)}
    tracker = ReturnTracker(target_for(cfg.target_return, probe.reward_threshold), cfg.stop_window)
    counts = Counter[str]()
    staleness = Counter[int]()
    inflight: dict[ray.ObjectRef, int] = {}
    version, restarts, update_s, busy_s = 0, 0, 0.0, 0.0
    max_staleness = cfg.async_gradients.max_staleness

    def make_policy(weights: Any = None, connector_states: Any = None) -> Any:
        info = run_info(
            "ppo", env_name(cfg.env_runner.env), cfg.env_runner.env_config, Framework(cfg.framework).value,
            iteration=version, env_steps=counts["used"],
        )  # fmt: skip
        spaces = (probe.observation_space, probe.action_space)
        weights = central.module.get_state() if weights is None else weights
        return build_policy(cfg.env_runner, *spaces, weights=weights, info=info)

    keeper = PolicyKeeper(make_policy, policy_dir=policy_dir, log=log)
    evaluation = TrainingEvaluation(  # off: starts nothing; on, it starts in the loop's try below
        dataclasses.replace(cfg.evaluation, evaluation_interval=0), cfg.env_runner, weights=dict, connector_states=dict
    )
    tracker.stop_on_evaluation = cfg.stop_on is StopOn.EVALUATION

    fragment_steps = cfg.env_runner.rollout_fragment_length * cfg.env_runner.num_envs_per_env_runner
    saved_at, lost_on_resume = -1, 0

    def is_over() -> bool:
        """Whether the target is reached or a budget used."""
        used = budget_used(cfg, iterations=version, env_steps=counts["used"], elapsed_s=tracker.elapsed)
        return used is not None or tracker.reached

    def figures() -> dict[str, float]:
        return async_figures(staleness, dropped=counts["dropped"], unused=counts["unused"])

    def save_to(saver: Checkpointer) -> Path:
        """A checkpoint now: the central learner, the counters, and the steps the workers are computing
        gradients on (a run resumed from here never gets them: counted lost on resume)."""
        counters = {
            **{k: float(v) for k, v in counts.items()},
            **{f"staleness/{k}": float(v) for k, v in staleness.items()},
            "num_env_runner_restarts": float(restarts),
            "in_flight_env_steps": float(len(inflight) * fragment_steps),
        }
        state = TrainingState(
            algo="ppo", env=env_name(cfg.env_runner.env), observation_space=repr(probe.observation_space),
            iteration=version, env_steps=counts["used"], learner=central.get_state(), counters=counters,
            **tracker.checkpoint_fields(),
        )  # fmt: skip
        return saver.save(state, policy=keeper.build())

    def save_checkpoint() -> None:
        nonlocal saved_at
        assert checkpointer is not None
        save_to(checkpointer)
        saved_at = version

    def restore(state: TrainingState) -> None:
        nonlocal version, restarts, lost_on_resume
        set_learner_state(central.set_state, state)
        tracker.restore(state)
        c = state.counters
        version, restarts = state.iteration, int(c.get("num_env_runner_restarts", 0))
        for key in ("used", "sampled", "unused", "dropped", "dropped_gradients", "lost"):
            counts[key] = int(c.get(key, 0))
        staleness.update({int(k.split("/", 1)[1]): int(v) for k, v in c.items() if k.startswith("staleness/")})
        lost_on_resume = int(c.get("in_flight_env_steps", 0))
        counts["lost"] += lost_on_resume
        log(
            f"resumed from update {version} ({counts['used']} env steps): the {lost_on_resume} env steps the workers "
            "were computing gradients on at the save are lost (counted in num_env_steps_lost)"
        )

    def send(index: int, weights_ref: ray.ObjectRef) -> None:
        workers[index].set_weights.remote(weights_ref, version)
        inflight[workers[index].compute.remote()] = index

    try:
        evaluation = TrainingEvaluation(
            cfg.evaluation, cfg.env_runner, weights=central.module.get_state, connector_states=lambda: None,
            make_policy=make_policy, best_dir=best_policy_dir(policy_dir),
            group=group, log=log,
        )  # fmt: skip
        if resume is not None:
            restore(resume)
            saved_at = version  # that checkpoint is this run's newest: its end saves again only if it moved on
        evaluation.begin(version + 1)
        weights_ref = ray.put(central.module.get_state())
        for i in workers:
            send(i, weights_ref)
        handle.attach(
            learners=central, evaluation=evaluation, make_policy=make_policy, save_to=save_to,
            is_done=is_over, iteration=lambda: version,
        )  # fmt: skip
        yield None  # the actors are up
        loop_start = time.perf_counter()
        while not is_over():
            record = None
            [ref], _ = ray.wait(list(inflight), num_returns=1, timeout=group.sample_timeout_s)
            index = inflight.pop(ref)
            try:
                answer: Gradients = ray.get(ref)
            except ray.exceptions.RayError as e:
                restarts += 1
                counts["lost"] += cfg.env_runner.rollout_fragment_length * cfg.env_runner.num_envs_per_env_runner
                if not group.restart_failed_env_runners or restarts > group.max_num_env_runner_restarts:
                    raise EnvRunnerFailedError(f"gradient worker {index} failed: {e}") from e
                log(f"gradient worker {index} died ({type(e).__name__}); restarted (restart {restarts})")
                ray.kill(workers[index])
                workers[index] = start(index, restarts)
                send(index, weights_ref)
                continue
            counts["sampled"] += answer.num_env_steps
            busy_s += answer.duration_s
            tracker.add(answer.episode_returns)
            stale = version - answer.weights_version
            staleness[stale] += 1
            if stale > max_staleness:
                counts["dropped"] += answer.num_env_steps
                counts["dropped_gradients"] += 1
            else:
                t0 = time.perf_counter()
                central.apply_gradients(answer.grads)
                version += 1
                weights_ref = ray.put(central.module.get_state())
                update_s += time.perf_counter() - t0
                counts["used"] += answer.num_env_steps
                evaluated = evaluation.end(version)
                tracker.evaluation_mean = evaluation.last.get("episode_return_mean", float("nan"))
                if not is_over():
                    evaluation.begin(version + 1)
                record = tracker.record(version, counts["used"], losses=answer.losses, restarts=restarts,
                                        lost=counts["lost"], evaluation=evaluated)  # fmt: skip
                record = dataclasses.replace(record, asynchronous=figures())
                if checkpointer is not None and checkpointer.due(version):
                    save_checkpoint()
                if on_iteration is not None:
                    on_iteration(record)
                else:
                    log(
                        f"update {version}: {counts['used']} env steps, mean return {tracker.mean:.1f} (last "
                        f"{tracker.count} episodes), staleness {stale}, {tracker.elapsed:.1f} s"
                    )
            send(index, weights_ref)
            if record is not None:
                yield record
        loop_s = time.perf_counter() - loop_start
        for ref in list(inflight):  # computed, never applied: counted
            try:
                answer = ray.get(ref, timeout=group.sample_timeout_s)
            except ray.exceptions.RayError:
                continue
            counts["sampled"] += answer.num_env_steps
            counts["unused"] += answer.num_env_steps
        inflight.clear()  # collected above: nothing is in flight at the last checkpoint
        can_save = checkpointer is not None and version > 0
        policy = keeper.end(save_checkpoint if can_save else None, is_saved=saved_at == version)
    except KeyboardInterrupt:
        can_save = checkpointer is not None and version > 0
        keeper.end(save_checkpoint if can_save else None, is_saved=saved_at == version)
        raise
    finally:
        evaluation.stop()
        for worker in workers.values():
            ray.kill(worker)
    result = AsyncGradientsResult(
        **dataclasses.asdict(tracker.finish(counts["used"], log)),
        iterations=version,
        sample_s=loop_s - update_s,
        update_s=update_s,
        learner_connector_s=float("nan"),
        agent_steps=counts["used"],
        staleness=dict(sorted(staleness.items())),
        num_gradients_dropped=counts["dropped_gradients"],
        num_env_steps_dropped=counts["dropped"],
        num_env_steps_unused=counts["unused"],
        num_env_steps_lost=counts["lost"],
        num_worker_restarts=restarts,
        runner_utilization=busy_s / max(num_workers * loop_s, 1e-9),
        num_env_steps_lost_on_resume=lost_on_resume,
    )
    stopped_by = stop_reason(cfg, tracker, iterations=version, env_steps=counts["used"])
    return dataclasses.replace(result, policy=policy, stopped_by=stopped_by, asynchronous=figures())


def check_async_gradients(cfg: PPOTrainingConfig) -> None:
    """ConfigError (one line) for what the asynchronous-gradients loop does not take yet."""
    if multi_agent_runner(cfg.env_runner) is not None:
        raise ConfigError("the asynchronous-gradients loop trains single-agent envs for now")
    if cfg.num_learners != 0:
        raise ConfigError(
            f"the asynchronous-gradients loop applies gradients in the driver: 'num_learners' must be 0 "
            f"(got {cfg.num_learners})"
        )
    if cfg.ppo.observation_filter is not None:
        raise ConfigError("the asynchronous-gradients loop takes no 'observation_filter' yet")
    if cfg.env_runner.batch_mode is not BatchMode.TRUNCATE_EPISODES:
        raise ConfigError("the asynchronous-gradients loop samples fragments: 'batch_mode' must be 'truncate_episodes'")


LOOPS[Optimizer.ASYNC_GRADIENTS] = async_gradients_iterations
