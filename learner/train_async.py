"""train_async: PPO with asynchronous samples (APPO): the runners never wait for the learner.

Seed 002's policy optimizers: ``train_ppo`` is the synchronous one (gather a batch from every
runner, then update, while the runners wait); this is the asynchronous-samples one. Every runner
keeps requests in flight (``keep_sampling``; two by default, the next queued in its actor behind
the one it samples, ``max_requests_in_flight_per_env_runner``): as soon as a fragment
(``rollout_fragment_length x num_envs_per_env_runner`` env steps) is done it samples the next
with the weights it has, while the learner updates on the fragment that came (``sample(min_answers=1)``:
one fragment per update, in arrival order, taken from the object store). Every
``broadcast_interval`` updates the weights go out without waiting (``sync_weights(wait=False)``):
a runner takes them before its next fragment (calls to an actor run in order).

A fragment was sampled with weights some updates older than the learner's (its *policy lag*:
the learner's update count now less the one at which the weights it used went out). The learner
corrects for it with V-trace (``PPOConfig.vtrace``, set here; ``rho_bar`` and ``c_bar`` clip the
importance ratios), and PPO's clipped surrogate on the V-trace advantages is APPO's loss. With
``max_policy_lag``, a fragment older than that is dropped and counted. Every fragment that
arrives is used once, dropped (counted), or, when the run ends, collected from the runners and
counted as unused: ``AsyncTrainResult`` says how many env steps went each way.

``runner_utilization`` is the share of the loop's wall clock the runners spent sampling (their
calls' ``duration_s`` over ``num_runners x`` the loop's seconds), the figure the asynchronous
loop exists to raise.

With ``num_learners=1`` the updates run in a learner actor with a bounded queue
(learner/learner_queue.py): each runner puts its fragment in the object store itself and answers
with its reference (``chunks_by_ref``), the driver passes the reference on (it never holds the
fragment) and collects the next while the actor updates, waits while ``learner_queue_size``
updates are queued, and a learner that dies is replaced from the weights of the last broadcast,
its queued fragments counted lost.

Checkpoints hold the learner (its queue drained first) and the counters; the fragments the runners
have in flight at a save are counted lost by a run resumed from it. Not yet: more than one learner,
multi-agent envs, the mean/std filter, stateful modules (each refused in one line).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import ray

from learner.checkpoint import Checkpointer, TrainingState
from learner.evaluation_loop import TrainingEvaluation
from learner.frameworks import Framework, ppo_learner_class
from learner.keep_policy import PolicyKeeper, best_policy_dir, run_info
from learner.learner_group import LearnerGroup
from learner.learner_queue import LearnerQueue
from learner.metrics import IterationRecord, PPOTrainResult, PPOUpdateMetrics, async_figures
from learner.optimizers import AsyncSamplesConfig, Optimizer
from learner.train import (
    LOOPS,
    LoopHandle,
    PPOTrainingConfig,
    ReturnTracker,
    StopOn,
    budget_used,
    check_training_resources,
    multi_agent_runner,
    ppo_losses,
    run_to_end,
    set_learner_state,
    stop_reason,
    target_for,
    view_pieces,
)
from ray_sampler.data.multi_agent_columnar import unpack_columnar
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import BatchMode
from ray_sampler.sampling.env_creator import env_name, probe_env
from ray_sampler.sampling.env_runner import build_module
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.evaluation import check_evaluation_opponent
from ray_sampler.sampling.runner_build import build_policy

__all__ = ["AsyncSamplesConfig", "AsyncTrainResult", "async_iterations", "check_async", "train_async"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncTrainResult(PPOTrainResult):
    """What ``train_async`` reached, and where the sampled env steps went."""

    policy_lags: dict[int, int]
    """Fragments that arrived, by policy lag (updates), dropped ones included."""
    num_env_steps_sampled: int
    """Env steps in every fragment that arrived: used + dropped + unused."""
    num_fragments_dropped: int
    """Fragments dropped for exceeding ``max_policy_lag``."""
    num_env_steps_dropped: int
    """Their env steps."""
    num_env_steps_unused: int
    """Env steps of the fragments still in flight when the run ended (collected, not learned from)."""
    num_env_steps_lost: int
    """Env steps of the requests runners were working on when they died (their replacements sample on)."""
    num_env_runner_restarts: int
    """Runners replaced after dying."""
    max_requests_in_flight: int
    """The most requests in flight (queued ones included) after any update: the bound on the
    fragments waiting for the learner (runners x ``max_requests_in_flight_per_env_runner``)."""
    num_learner_restarts: int = 0
    """Learner actors replaced after dying (``num_learners=1``)."""
    num_fragments_lost_by_learner: int = 0
    """Fragments queued in a learner actor when it died, or whose runner died before the actor read
    them from the object store: never learned from."""
    num_env_steps_lost_by_learner: int = 0
    """Their env steps (``num_env_steps_sampled`` = used + dropped + unused + these)."""
    num_env_steps_lost_on_resume: int = 0
    """A resumed run: the env steps of the fragments that were in flight (runners' requests) when its
    checkpoint was saved, which the new runners never deliver (the learner's queue is empty at a
    save: it waits for every queued update first)."""
    max_learner_queue: int = 0
    """The most updates queued in the learner actor at once (the bound: ``learner_queue_size``)."""


def train_async(
    cfg: PPOTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    on_fragment: Callable[[list[Any], int], None] | None = None,
    checkpointer: Any = None,
    resume: Any = None,
    policy_dir: Path | None = None,
) -> AsyncTrainResult:
    """Trains with asynchronous samples (see the module docstring; ``cfg.async_samples`` holds the
    loop's knobs, whatever ``cfg.optimizer`` says) until ``target_return`` or the first budget:
    ``max_iterations`` updates (one per fragment learned from), ``max_env_steps`` env steps learned
    from, ``max_time_s``. ``on_iteration`` gets each update's record (without
    one, a line to ``log``); ``on_fragment(episodes, policy_lag)`` each fragment the learner takes,
    before the update. With ``checkpointer``, a checkpoint is saved every ``every`` updates (at the
    first broadcast from then on: the learner's queue is empty there) and at the end; ``resume``
    carries on from one, counting the env steps in flight at its save as lost on resume. The result
    holds the final policy (the learner's weights once its queue is drained), also written to
    ``policy_dir`` when given, however the loop ends."""
    steps = async_iterations(
        cfg, log=log, on_iteration=on_iteration, on_fragment=on_fragment, checkpointer=checkpointer, resume=resume,
        policy_dir=policy_dir, handle=LoopHandle(),
    )  # fmt: skip
    return run_to_end(steps)


def async_iterations(
    cfg: PPOTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    on_fragment: Callable[[list[Any], int], None] | None = None,
    checkpointer: Any = None,
    resume: Any = None,
    policy_dir: Path | None = None,
    handle: LoopHandle,
) -> Generator[IterationRecord | None, None, AsyncTrainResult]:
    """``train_async``'s loop as a generator of its updates' records (``learner.train.ppo_iterations``)."""
    async_config = cfg.async_samples
    check_async(cfg)
    check_training_resources(cfg.env_runner_group, cfg.num_learners, cfg.num_cpus_per_learner, cfg.evaluation)
    ppo = dataclasses.replace(cfg.ppo, vtrace=True)
    check_evaluation_opponent(cfg.evaluation, None, None)
    probe = probe_env(cfg.env_runner.env, cfg.env_runner.env_config)
    spaces = (probe.observation_space, probe.action_space)
    group_config = dataclasses.replace(
        cfg.env_runner_group,
        keep_sampling=True,
        max_requests_in_flight_per_env_runner=async_config.max_requests_in_flight_per_env_runner,
    )
    runners = EnvRunnerGroup(cfg.env_runner, group_config)
    try:
        learner = _learner(cfg, ppo, spaces, log)
    except BaseException:
        runners.stop()
        raise
    tracker = ReturnTracker(target_for(cfg.target_return, probe.reward_threshold), cfg.stop_window)
    counts = Counter[str]()
    lags = Counter[int]()
    timings = {"sample_s": 0.0, "update_s": 0.0, "learner_connector_s": 0.0, "busy_s": 0.0}
    submitted, updates = 0, 0  # updates sent to the learner, and finished
    submitted_steps = 0  # the env steps of the updates sent: what the budget counts (all are learned from)
    by_ref = cfg.num_learners == 1  # runners put their chunks in the object store; the learner actor reads them
    fragment_steps = cfg.env_runner.rollout_fragment_length * cfg.env_runner.num_envs_per_env_runner
    before = {"restarts": 0, "lost": 0, "lost_on_resume": 0}  # a resumed run's earlier processes'
    carried: list[tuple[PPOUpdateMetrics, int]] = []  # updates a save waited for: reported at the next step
    saved_at = -1  # the update of the newest checkpoint this loop saved

    def is_over() -> bool:
        """Whether the target is reached or a budget used: no more fragments go to the learner."""
        used = budget_used(cfg, iterations=submitted, env_steps=submitted_steps, elapsed_s=tracker.elapsed)
        return used is not None or tracker.reached

    def figures() -> dict[str, float]:
        return async_figures(lags, dropped=counts["dropped"], unused=counts["unused"])

    def failures() -> tuple[int, int]:
        """(runner restarts, env steps lost) in all: failed runners and learner actors, and on resume."""
        group = runners.metrics
        lost = group.num_env_steps_lost + learner.num_env_steps_lost + before["lost"] + before["lost_on_resume"]
        return before["restarts"] + group.num_env_runner_restarts, lost

    def save_to(saver: Checkpointer) -> Path:
        """A checkpoint now: the learner's queue is drained first (those updates are reported next)."""
        learner.refresh()
        carried.extend(learner.take_finished())
        restarts, lost = failures()
        counters = {
            **{k: float(v) for k, v in counts.items()},
            **{f"lag/{k}": float(v) for k, v in lags.items()},
            "submitted": float(submitted),
            # The requests the runners work on now: a run resumed from here never gets them.
            "in_flight_env_steps": float(runners.num_requests_in_flight * fragment_steps),
            "num_env_runner_restarts": float(restarts),
            "num_env_steps_lost": float(lost),
        }
        # The learner's state holds the carried updates, which are reported later: the counts include them.
        counters["used"] += sum(steps for _, steps in carried)
        state = TrainingState(
            algo="ppo", env=env_name(cfg.env_runner.env), observation_space=repr(spaces[0]),
            iteration=updates + len(carried), env_steps=int(counters["used"]), learner=learner.get_state(),
            counters=counters, **tracker.checkpoint_fields(),
        )  # fmt: skip
        return saver.save(state, policy=keeper.build())

    def save_checkpoint() -> None:
        nonlocal saved_at
        assert checkpointer is not None
        save_to(checkpointer)
        saved_at = updates

    def restore(state: TrainingState) -> None:
        nonlocal updates, submitted, submitted_steps
        set_learner_state(learner.set_state, state)
        tracker.restore(state)
        c = state.counters
        updates, submitted = state.iteration, int(c.get("submitted", state.iteration))
        for key in ("used", "sampled", "unused", "dropped", "dropped_fragments", "max_in_flight"):
            counts[key] = int(c.get(key, 0))
        submitted_steps = counts["used"]  # a save waits for every queued update
        lags.update({int(k.split("/", 1)[1]): int(v) for k, v in c.items() if k.startswith("lag/")})
        before.update(restarts=int(c.get("num_env_runner_restarts", 0)), lost=int(c.get("num_env_steps_lost", 0)))
        before["lost_on_resume"] = int(c.get("in_flight_env_steps", 0))
        log(
            f"resumed from update {updates} ({counts['used']} env steps): the {before['lost_on_resume']} env steps "
            "in flight at the save are lost (counted in num_env_steps_lost)"
        )

    def make_policy(weights: Any = None, connector_states: Any = None) -> Any:
        info = run_info(
            "ppo", env_name(cfg.env_runner.env), cfg.env_runner.env_config, Framework(cfg.framework).value,
            iteration=updates, env_steps=counts["used"],
        )  # fmt: skip
        if weights is None:
            weights = learner.refresh()
            carried.extend(learner.take_finished())  # the updates it waited for: reported at the next step
        return build_policy(cfg.env_runner, *spaces, weights=weights, info=info)

    keeper = PolicyKeeper(make_policy, policy_dir=policy_dir, log=log)
    broadcast: dict[str, Any] = {}  # the weights the runners were sent last: what an evaluation evaluates
    best_dir = best_policy_dir(policy_dir)
    evaluation = TrainingEvaluation(  # off: starts nothing; on, it starts in the loop's try below
        dataclasses.replace(cfg.evaluation, evaluation_interval=0), cfg.env_runner, weights=dict, connector_states=dict
    )
    tracker.stop_on_evaluation = cfg.stop_on is StopOn.EVALUATION

    def report(finished: list[tuple[PPOUpdateMetrics, int]], lag: int) -> list[IterationRecord]:
        nonlocal updates
        records = []
        for update, steps in finished:
            updates += 1
            counts["used"] += steps
            timings["learner_connector_s"] += update.learner_connector_s
            evaluated = evaluation.end(updates)
            tracker.evaluation_mean = evaluation.last.get("episode_return_mean", float("nan"))
            if not is_over():
                evaluation.begin(updates + 1)
            restarts, lost = failures()
            record = tracker.record(
                updates, counts["used"], losses=ppo_losses(update), restarts=restarts, lost=lost, evaluation=evaluated
            )
            record = dataclasses.replace(record, asynchronous=figures())
            records.append(record)
            if on_iteration is not None:
                on_iteration(record)
            else:
                log(
                    f"update {updates}: {counts['used']} env steps, mean return {tracker.mean:.1f} (last "
                    f"{tracker.count} episodes), policy lag {lag}, policy loss {update.policy_loss:.3f}, "
                    f"{tracker.elapsed:.1f} s"
                )
        return records

    try:
        evaluation = TrainingEvaluation(
            cfg.evaluation, cfg.env_runner, weights=lambda: broadcast["weights"], connector_states=lambda: None,
            make_policy=make_policy, best_dir=best_dir, group=cfg.env_runner_group, log=log,
        )  # fmt: skip
        if resume is not None:
            restore(resume)
            saved_at = updates  # that checkpoint is this run's newest: its end saves again only if it moved on
        broadcast["weights"] = learner.refresh()
        updates_at_version = {runners.sync_weights(broadcast["weights"]): submitted}
        evaluation.begin(updates + 1)
        handle.attach(
            learners=learner, runners=runners, evaluation=evaluation, make_policy=make_policy, save_to=save_to,
            is_done=is_over, iteration=lambda: updates,
        )  # fmt: skip
        yield None  # the actors are up
        loop_start, num_runners = time.perf_counter(), runners.num_env_runners
        every = checkpointer.every if checkpointer is not None else 0
        next_save = (updates // every + 1) * every if every else None
        while not is_over():
            if carried:
                yield from report(carried[:], 0)
                carried.clear()
            t0 = time.perf_counter()
            answers = runners.sample_columnar(min_answers=1, chunks_by_ref=by_ref)
            timings["sample_s"] += time.perf_counter() - t0
            for line in runners.metrics.runner_failures + runners.metrics.sub_env_failures:
                log(line)
            for col, metrics in answers:
                timings["busy_s"] += metrics.duration_s
                counts["sampled"] += metrics.num_env_steps
                tracker.add(metrics.episode_returns)
                if col is None or is_over():
                    counts["unused"] += metrics.num_env_steps  # arrived with others after the last update
                    continue
                lag = submitted - updates_at_version.get(metrics.weights_version, 0)
                lags[lag] += 1
                if async_config.max_policy_lag is not None and lag > async_config.max_policy_lag:
                    counts["dropped_fragments"] += 1
                    counts["dropped"] += metrics.num_env_steps
                    continue
                # A learner actor gets the runner's ObjectRef: the driver never holds the chunks.
                fragment: Any = col if isinstance(col, ray.ObjectRef) else unpack_columnar(col)
                if on_fragment is not None:
                    on_fragment(unpack_columnar(ray.get(col)) if isinstance(col, ray.ObjectRef) else fragment, lag)
                counts["max_in_flight"] = max(counts["max_in_flight"], runners.num_requests_in_flight)
                t1 = time.perf_counter()
                finished = learner.submit(fragment, metrics.num_env_steps)
                submitted += 1
                submitted_steps += metrics.num_env_steps
                if submitted % async_config.broadcast_interval == 0:
                    weights = broadcast["weights"] = learner.refresh()
                    finished += learner.take_finished()
                    updates_at_version[runners.sync_weights(weights, wait=False)] = submitted
                timings["update_s"] += time.perf_counter() - t1
                yield from report(finished, lag)
                if next_save is not None and updates >= next_save and submitted % async_config.broadcast_interval == 0:
                    save_checkpoint()  # just after a broadcast: the learner's queue is empty
                    next_save = (updates // every + 1) * every
        yield from report(carried + learner.drain(), 0)
        carried.clear()
        loop_s = time.perf_counter() - loop_start
        for _, metrics in runners.collect_in_flight():  # sampled, never learned from: counted
            timings["busy_s"] += metrics.duration_s
            counts["sampled"] += metrics.num_env_steps
            counts["unused"] += metrics.num_env_steps
        restarts = failures()[0]
        policy = keeper.end(
            save_checkpoint if checkpointer is not None and updates > 0 else None, is_saved=saved_at == updates
        )
    except KeyboardInterrupt:
        keeper.end(save_checkpoint if checkpointer is not None and updates > 0 else None, is_saved=saved_at == updates)
        raise
    finally:
        evaluation.stop()
        learner.stop()
        runners.stop()
    result = AsyncTrainResult(
        **dataclasses.asdict(tracker.finish(counts["used"], log)),
        iterations=updates,
        sample_s=timings["sample_s"],
        update_s=timings["update_s"],
        learner_connector_s=timings["learner_connector_s"],
        agent_steps=counts["used"],
        policy_lags=dict(sorted(lags.items())),
        num_env_steps_sampled=counts["sampled"],
        num_fragments_dropped=counts["dropped_fragments"],
        num_env_steps_dropped=counts["dropped"],
        num_env_steps_unused=counts["unused"],
        num_env_steps_lost=runners.metrics.num_env_steps_lost + before["lost_on_resume"],
        num_env_runner_restarts=restarts,
        max_requests_in_flight=counts["max_in_flight"],
        runner_utilization=timings["busy_s"] / max(num_runners * loop_s, 1e-9),
        num_learner_restarts=learner.num_restarts,
        num_fragments_lost_by_learner=learner.num_fragments_lost,
        num_env_steps_lost_by_learner=learner.num_env_steps_lost,
        max_learner_queue=learner.max_queued,
        num_env_steps_lost_on_resume=before["lost_on_resume"],
    )
    stopped_by = stop_reason(cfg, tracker, iterations=submitted, env_steps=submitted_steps)
    return dataclasses.replace(result, policy=policy, stopped_by=stopped_by, asynchronous=figures())


class _LocalLearner:
    """The driver's own learner behind LearnerQueue's interface: each update runs at once."""

    num_restarts = num_fragments_lost = num_env_steps_lost = 0
    max_queued = 0

    def __init__(self, group: LearnerGroup) -> None:
        self.group = group

    def submit(self, episodes: list[Any], num_env_steps: int) -> list[tuple[PPOUpdateMetrics, int]]:
        return [(self.group.update_from_episodes(episodes), num_env_steps)]

    def refresh(self) -> dict[str, Any]:
        return self.group.get_weights()

    def get_state(self) -> dict[str, Any]:
        return self.group.get_states()[0]

    def set_state(self, state: dict[str, Any]) -> None:
        self.group.set_states(state)

    def take_finished(self) -> list[tuple[PPOUpdateMetrics, int]]:
        return []

    def drain(self) -> list[tuple[PPOUpdateMetrics, int]]:
        return []

    def stop(self) -> None:
        self.group.stop()


def _learner(cfg: PPOTrainingConfig, ppo: Any, spaces: tuple[Any, Any], log: Callable[[str], None]) -> Any:
    """The driver's learner (``num_learners=0``) or one learner actor with its queue (1)."""
    make_module = lambda: build_module(cfg.env_runner, *spaces)  # noqa: E731
    kwargs = {"view_pieces": view_pieces(cfg.env_runner.env_to_module_connectors)}
    if cfg.num_learners == 0:
        group = LearnerGroup(make_module, ppo, learner_class=ppo_learner_class(cfg.framework), learner_kwargs=kwargs)
        return _LocalLearner(group)
    return LearnerQueue(
        make_module, ppo, learner_class=ppo_learner_class(cfg.framework), learner_kwargs=kwargs,
        queue_size=cfg.async_samples.learner_queue_size, num_cpus=cfg.num_cpus_per_learner, log=log,
    )  # fmt: skip


def check_async(cfg: PPOTrainingConfig) -> None:
    """ConfigError (one line) for what the asynchronous loop does not take yet."""
    if multi_agent_runner(cfg.env_runner) is not None:
        raise ConfigError("the asynchronous loop trains single-agent envs for now (a multi-agent env trains with PPO)")
    if cfg.num_learners > 1:
        raise ConfigError(
            f"the asynchronous loop has one learner for now: 'num_learners' must be 0 (the driver's) or 1 (an "
            f"actor with a queue of updates) (got {cfg.num_learners})"
        )
    if cfg.ppo.observation_filter is not None:
        raise ConfigError(
            "the asynchronous loop takes no 'observation_filter' yet (its moments are merged per iteration)"
        )
    if cfg.env_runner.batch_mode is not BatchMode.TRUNCATE_EPISODES:
        raise ConfigError("the asynchronous loop samples fragments: 'batch_mode' must be 'truncate_episodes'")


LOOPS[Optimizer.ASYNC_SAMPLES] = async_iterations
