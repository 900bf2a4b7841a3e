"""DQN training through a ReplayActor: the off-policy loop behind ``ray-sampler train-dqn``.

Every iteration the runners send their chunks straight to the ReplayActor
(``EnvRunnerGroup.sample_to_replay``; with ``keep_sampling`` they sample the next fragment
while the learners work), the LearnerGroup pulls batches from the replay and takes
``updates_per_env_step`` gradient steps per new env step (with prioritized replay the learners
send |TD errors| back), and the new weights, with the epsilon of the exploration schedule, go to
the runners with one ``ray.put``. A runner that fails is replaced and the loop goes on, logging
one line for it; so does a replay actor that dies: it is restored from its last checkpoint
(``replay.checkpoint_path``) and the acknowledged steps lost since are counted
(learner/replay_recovery.py). Ray must be running.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
import uuid
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import numpy as np

from connectors.connector_v2 import piece_name
from learner.checkpoint import REPLAY_FILE, REPLAY_FOLDER, Checkpointer, TrainingState
from learner.dqn_training_config import DQNTrainingConfig, epsilon_at
from learner.evaluation_loop import TrainingEvaluation
from learner.frameworks import Framework, dqn_learner_class
from learner.keep_policy import PolicyKeeper, run_info
from learner.learner_group import LearnerGroup
from learner.metrics import DQNTrainResult, IterationRecord
from learner.multi_agent_learner_group import MultiAgentLearnerGroup
from learner.replay_recovery import REPLAY_SHARD_FILE, SupervisedReplay
from learner.train import (
    LoopHandle,
    ReturnTracker,
    StopOn,
    budget_used,
    check_training_resources,
    multi_agent_runner,
    restore_training,
    returns_by,
    run_to_end,
    stop_reason,
    target_for,
    training_evaluation,
)
from ray_sampler.errors import ConfigError
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_creator import env_name, probe_env
from ray_sampler.sampling.env_runner import build_module
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.evaluation import check_evaluation_opponent
from ray_sampler.sampling.multi_agent_env_runner import build_multi_rl_module, probe_multi_agent
from ray_sampler.sampling.policies import build_multi_agent_policy
from ray_sampler.sampling.runner_build import build_policy
from replay.multi_agent_actor import create_multi_agent_replay_actor
from replay.shards import shard_path

__all__ = ["DQNTrainingConfig", "check_multi_agent_dqn", "dqn_iterations", "epsilon_at", "train_dqn"]


def train_dqn(
    cfg: DQNTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    log_every_s: float = 1.0,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    checkpointer: Checkpointer | None = None,
    resume: TrainingState | None = None,
    policy_dir: Path | None = None,
) -> DQNTrainResult:
    """Trains until ``target_return`` or the first budget (``max_env_steps``, ``max_time_s``; the
    result's ``stopped_by`` says which); returns what it reached, with the final policy (greedy
    with ``explore=False``), also written to ``policy_dir`` when given.

    At most every ``log_every_s`` seconds, and at the end, the loop reports: a record to
    ``on_iteration`` (its ``iteration`` counts these reports), or without one a line to ``log``.
    With ``checkpointer``, a checkpoint (the replay buffer's Parquet file included) is saved at the
    reports it makes due, and once more on Ctrl-C; with ``resume`` the run carries on from one: the
    learners' state (online and target networks, optimizer), the replay buffer, the counters and
    the stop rule's window (what runners had in flight at the save is in the replay, not counted).

    The loop is ``dqn_iterations``' (``learner.algorithm.Algorithm`` steps the same one): a report is
    an iteration."""
    steps = dqn_iterations(
        cfg, log=log, log_every_s=log_every_s, on_iteration=on_iteration, checkpointer=checkpointer, resume=resume,
        policy_dir=policy_dir,
    )  # fmt: skip
    return run_to_end(steps)


def dqn_iterations(
    cfg: DQNTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    log_every_s: float = 1.0,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    checkpointer: Checkpointer | None = None,
    resume: TrainingState | None = None,
    policy_dir: Path | None = None,
    handle: LoopHandle | None = None,
) -> Generator[IterationRecord | None, None, DQNTrainResult]:
    """``train_dqn``'s loop as a generator (``learner.train.ppo_iterations`` says how): a record per
    report."""
    handle = handle if handle is not None else LoopHandle()
    ma_runner = multi_agent_runner(cfg.env_runner)
    if ma_runner is not None:
        return _multi_agent_dqn_iterations(
            cfg, ma_runner, log=log, log_every_s=log_every_s, on_iteration=on_iteration, checkpointer=checkpointer,
            resume=resume, policy_dir=policy_dir, handle=handle,
        )  # fmt: skip
    return _dqn_iterations(
        cfg, log=log, log_every_s=log_every_s, on_iteration=on_iteration, checkpointer=checkpointer, resume=resume,
        policy_dir=policy_dir, handle=handle,
    )  # fmt: skip


def _dqn_iterations(
    cfg: DQNTrainingConfig,
    *,
    log: Callable[[str], None],
    log_every_s: float,
    on_iteration: Callable[[IterationRecord], None] | None,
    checkpointer: Checkpointer | None,
    resume: TrainingState | None,
    policy_dir: Path | None,
    handle: LoopHandle,
) -> Generator[IterationRecord | None, None, DQNTrainResult]:
    """The single-agent DQN loop."""
    if resume is not None and resume.replay_path is not None:  # the replay actor restores from its path
        working = Path(cfg.replay.checkpoint_path or resume.replay_path.parent.parent / "replay-resumed.parquet")
        _copy_saved_replay(resume.replay_path, working, cfg.num_replay_shards)
        cfg = dataclasses.replace(cfg, replay=dataclasses.replace(cfg.replay, checkpoint_path=str(working)))
    check_evaluation_opponent(cfg.evaluation, None, None)
    probe = probe_env(cfg.env_runner.env, cfg.env_runner.env_config)
    spaces = (probe.observation_space, probe.action_space)
    check_training_resources(cfg.env_runner_group, cfg.num_learners, cfg.num_cpus_per_learner, cfg.evaluation)
    # The learners first: a space they cannot train on raises before the replay and runners start.
    learners = LearnerGroup(
        lambda: build_module(cfg.env_runner, *spaces),
        cfg.dqn,
        learner_class=dqn_learner_class(cfg.framework),
        num_learners=cfg.num_learners,
        num_cpus_per_learner=cfg.num_cpus_per_learner,
        gradient_sync=cfg.gradient_sync,
    )
    replay, runners = None, None
    tracker = ReturnTracker(target_for(cfg.target_return, probe.reward_threshold), cfg.stop_window)
    steps, owed, num_updates, last_log, reports = 0, 0.0, 0, float("-inf"), 0
    can_learn, num_restarts_seen = False, 0  # can_learn: the replay held min_size_to_sample (since its last restore)
    loss = math.nan
    done = {"num_env_runner_restarts": 0, "num_env_steps_lost": 0}  # before a resume

    def over() -> bool:
        """Whether a budget is used."""
        return budget_used(cfg, iterations=reports, env_steps=steps, elapsed_s=tracker.elapsed) is not None

    def totals() -> dict[str, int]:
        assert runners is not None and replay is not None
        lost = runners.metrics.num_env_steps_lost + replay.metrics.num_env_steps_lost
        return {
            "num_env_runner_restarts": done["num_env_runner_restarts"] + runners.metrics.num_env_runner_restarts,
            "num_env_steps_lost": done["num_env_steps_lost"] + lost,
        }

    def save_to(saver: Checkpointer) -> Path:
        assert replay is not None
        state = TrainingState(
            algo="dqn",
            env=env_name(cfg.env_runner.env),
            observation_space=repr(spaces[0]),
            iteration=reports,
            env_steps=steps,
            learner=learners.get_states()[0],
            counters={**totals(), "num_updates": num_updates, "owed": owed},
            **tracker.checkpoint_fields(),
        )
        name = REPLAY_FILE if cfg.num_replay_shards == 1 else REPLAY_FOLDER
        return saver.save(state, save_replay=replay.save, replay_name=name, policy=keeper.build())

    def save() -> None:
        assert checkpointer is not None
        save_to(checkpointer)
        saved[0] = reports

    def make_policy(weights: Any = None, connector_states: Any = None) -> Any:
        info = run_info(
            "dqn", env_name(cfg.env_runner.env), cfg.env_runner.env_config, Framework(cfg.framework).value,
            iteration=reports, env_steps=steps,
        )  # fmt: skip
        weights = acting_weights() if weights is None else weights
        return build_policy(cfg.env_runner, *spaces, weights=weights, connector_state=connector_states, info=info)

    def acting_weights() -> dict[str, Any]:
        """The weights the runners act with now: the learners', with the exploration rate of now."""
        return {**learners.get_weights(), "epsilon": np.float64(epsilon_at(cfg, steps))}

    keeper = PolicyKeeper(make_policy, policy_dir=policy_dir, log=log)
    evaluation: TrainingEvaluation | None = None
    saved = [-1]  # the report of the newest checkpoint this loop saved

    try:
        if resume is not None:
            restore_training(resume, learners, None, tracker)  # the runners start below, with no connector state
            reports, steps = resume.iteration, resume.env_steps
            num_updates, owed = int(resume.counters.get("num_updates", 0)), float(resume.counters.get("owed", 0.0))
            done.update({k: int(resume.counters.get(k, 0)) for k in done})
            saved[0] = reports  # that checkpoint is this run's newest: its end saves again only if it moved on
        replay = SupervisedReplay(
            cfg.replay,
            num_shards=cfg.num_replay_shards,
            timeout_s=cfg.replay_restart_timeout_s,
            num_cpus=0,
            name=f"ray-sampler-replay-{uuid.uuid4().hex[:8]}",
            **learners.colocated_options(),  # the learners pull every batch from it
        )
        runners = EnvRunnerGroup(cfg.env_runner, cfg.env_runner_group)
        runners.sync_weights({**learners.get_weights(), "epsilon": np.float64(1.0)})
        evaluation = training_evaluation(
            cfg, cfg.env_runner, learners, None, make_policy, policy_dir=policy_dir, return_keys=[], log=log,
            weights=acting_weights,
        )  # fmt: skip
        tracker.stop_on_evaluation = cfg.stop_on is StopOn.EVALUATION
        evaluation.begin(reports + 1)
        handle.attach(
            learners=learners, runners=runners, evaluation=evaluation, make_policy=make_policy, save_to=save_to,
            is_done=lambda: over() or tracker.reached, iteration=lambda: reports,
        )  # fmt: skip
        yield None  # the actors are up
        while not over() and not tracker.reached:
            answers = replay.sample_to_replay(runners)
            for line in runners.metrics.runner_failures + runners.metrics.sub_env_failures:  # recovered: went on
                log(line)
            new_steps = sum(m.num_env_steps for m in answers)
            steps += new_steps
            tracker.add([r for m in answers for r in m.episode_returns])
            if replay.metrics.num_replay_restarts != num_restarts_seen:  # restored: it may hold fewer now
                can_learn, num_restarts_seen = False, replay.metrics.num_replay_restarts
            if steps >= cfg.replay.min_size_to_sample:
                owed += new_steps * cfg.updates_per_env_step
                if not can_learn:  # some shard can be sampled (each warms up at its share of min_size_to_sample)
                    can_learn = any(mass > 0 for mass, _, _ in replay.call_each("sampling_mass"))
                if owed >= 1 and can_learn:
                    update = replay.update_from_replay(
                        learners, int(owed), cfg.batch_size, n_step=cfg.n_step, prioritized=cfg.replay.prioritized
                    )
                    if update is not None:  # None: the replay died and was restored; the updates are still owed
                        loss = update.loss
                        num_updates += int(owed)
                        owed -= int(owed)
            for line in replay.take_recoveries():  # the replay actor was restored: training went on
                log(line)
            epsilon = epsilon_at(cfg, steps)
            version = runners.sync_weights({**learners.get_weights(), "epsilon": np.float64(epsilon)})
            if time.perf_counter() - last_log >= log_every_s or tracker.reached or over():
                last_log, reports = time.perf_counter(), reports + 1
                if checkpointer is not None and checkpointer.due(reports):
                    save()
                counts = totals()
                evaluated = _evaluate(evaluation, tracker, reports, more=not over())
                yield _report(
                    tracker, reports, steps, (counts["num_env_runner_restarts"], counts["num_env_steps_lost"]),
                    on_iteration, log, loss=loss, epsilon=epsilon, num_updates=num_updates, version=version,
                    evaluation=evaluated,
                )  # fmt: skip
        # What the runners sampled meanwhile is in the replay already: count it too.
        steps_sent = steps + sum(m.num_env_steps for _, m in runners.collect_in_flight())
        replay_received = sum(m.num_env_steps_received for m in replay.call_each("get_metrics"))
        policy = keeper.end(save if checkpointer is not None and reports > 0 else None, is_saved=saved[0] == reports)
    except KeyboardInterrupt:
        # The state as it is now: the counters and the replay agree up to the runners' in-flight steps.
        started = checkpointer is not None and replay is not None and runners is not None and reports > 0
        keeper.end(save if started else None, is_saved=saved[0] == reports)
        raise
    finally:  # whatever was started stops, also when starting the rest failed
        if evaluation is not None:
            evaluation.stop()
        learners.stop()
        if runners is not None:
            runners.stop()
        if replay is not None:
            replay.stop()
    result = DQNTrainResult(
        **tracker.finish(steps, log),
        num_updates=num_updates,
        runner_env_steps_sent=steps_sent,
        replay_num_env_steps_received=replay_received,
        num_replay_restarts=replay.metrics.num_replay_restarts,
        num_env_steps_lost=replay.metrics.num_env_steps_lost,
        num_env_steps_lost_by_shard=replay.metrics.num_env_steps_lost_by_shard,
        policy=policy,
    )
    return dataclasses.replace(result, stopped_by=stop_reason(cfg, tracker, iterations=reports, env_steps=steps))


def _copy_saved_replay(saved: Path, working: Path, num_shards: int) -> None:
    """Copies a checkpoint's replay (a file; with shards a folder of shard files) to where the
    replay actors restore it from (``working``: shard k's at ``shard_path(working, k, K)``);
    ConfigError if it was saved with another number of shards."""
    files = sorted(saved.glob("replay.shard-*.parquet")) if saved.is_dir() else [saved]
    saved_shards = len(files) if saved.is_dir() else 1
    if saved_shards != num_shards:
        raise ConfigError(
            f"'num_replay_shards' ({num_shards}) must match the checkpoint's replay, saved with {saved_shards} "
            f"shard(s) (each runner's episodes are in its shard)"
        )
    for k in range(num_shards):
        source = saved if num_shards == 1 else saved / shard_path(REPLAY_SHARD_FILE, k, num_shards)
        shutil.copyfile(source, shard_path(str(working), k, num_shards))


def _report(
    tracker: ReturnTracker,
    reports: int,
    steps: int,
    failures: tuple[int, int],
    on_iteration: Callable[[IterationRecord], None] | None,
    log: Callable[[str], None],
    *,
    loss: float,
    epsilon: float,
    num_updates: int,
    version: int,
    summed: bool = False,
    evaluation: dict[str, float] | None = None,
) -> IterationRecord:
    """A DQN loop's report: its record, also to ``on_iteration`` (``failures``: runner restarts and env
    steps lost, in all), or without one a line to ``log``."""
    losses = {"loss": loss, "epsilon": epsilon, "num_updates": float(num_updates)}
    record = tracker.record(
        reports, steps, losses=losses, restarts=failures[0], lost=failures[1], evaluation=evaluation
    )
    if on_iteration is not None:
        on_iteration(record)
        return record
    evaluated = (evaluation or {}).get("episode_return_mean", math.nan)
    log(
        f"{steps} env steps, {'summed' if summed else 'mean'} return {tracker.mean:.1f} (last {tracker.count} "
        f"episodes){'' if math.isnan(evaluated) else f', evaluation {evaluated:.1f}'}, epsilon {epsilon:.2f}, "
        f"{num_updates} updates, loss {loss:.3f}, weights v{version}, {tracker.elapsed:.1f} s"
    )
    return record


def _evaluate(evaluation: TrainingEvaluation, tracker: ReturnTracker, report: int, *, more: bool) -> dict[str, float]:
    """Report ``report``'s evaluation (one started beside it, or one run now), and, while the loop has
    ``more`` to do, a parallel one started for the next report; the stop rule sees its mean."""
    evaluated = evaluation.end(report)
    tracker.evaluation_mean = evaluation.last.get("episode_return_mean", math.nan)
    if more and not tracker.reached:
        evaluation.begin(report + 1)
    return evaluated


def check_multi_agent_dqn(cfg: DQNTrainingConfig, multi_agent: Any) -> None:
    """ConfigError (one line) for what a multi-agent DQN run (``multi_agent``: its MultiAgentConfig)
    does not support: prioritized replay and history pieces (yet), and a centralized critic (PPO's:
    DQN has no value head)."""
    history = [piece_name(p) for p in cfg.env_runner.env_to_module_connectors if getattr(p, "lookback_steps", 0)]
    if history:
        raise ConfigError(
            f"'env_to_module_connectors' {history}: a multi-agent DQN run's replay samples single steps for "
            "now (frame stacks and previous actions are multi-agent PPO's)"
        )
    if cfg.num_replay_shards > 1:
        raise ConfigError("'num_replay_shards' is single-agent for now: a multi-agent DQN run uses one replay actor")
    if cfg.replay.prioritized:
        raise ConfigError(
            "'replay.prioritized' is single-agent for now: a multi-agent DQN run samples each module "
            "uniformly (--replay.no-prioritized, or replay=ReplayConfig(prioritized=False))"
        )
    if getattr(multi_agent, "centralized_critic", False):
        raise ConfigError("'centralized_critic' is PPO's (a value head on the global state): DQN has none")


def _multi_agent_dqn_iterations(
    cfg: DQNTrainingConfig,
    runner_config: EnvRunnerConfig,
    *,
    log: Callable[[str], None],
    log_every_s: float,
    on_iteration: Callable[[IterationRecord], None] | None,
    checkpointer: Checkpointer | None,
    resume: TrainingState | None,
    policy_dir: Path | None,
    handle: LoopHandle,
) -> Generator[IterationRecord | None, None, DQNTrainResult]:
    """Independent DQN per trained module: the runners add their chunks to a MultiAgentReplayActor,
    and each trained module's learners pull batches of their own agents' n-step transitions
    (``ModuleReplay``), once the module holds ``replay.min_size_to_sample`` agent steps. The same
    schedule, budget, stop rule and reports as ``train_dqn``; the summed return of every agent, and
    each module's and agent's, in the records; checkpoints hold the learners and the replay (a
    folder). Not yet: prioritized replay, restoring a dead replay actor (the run raises, naming it)."""
    import ray

    check_multi_agent_dqn(cfg, runner_config.multi_agent)
    agents, spaces = probe_multi_agent(runner_config)
    check_evaluation_opponent(cfg.evaluation, runner_config, agents)
    modules = build_multi_rl_module(runner_config, spaces)
    stateful = [mid for mid, module in modules.items() if is_stateful(module)]
    if stateful:
        raise ConfigError(f"modules {stateful} are recurrent: a multi-agent DQN run trains stateless modules for now")
    check_training_resources(cfg.env_runner_group, cfg.num_learners, cfg.num_cpus_per_learner, cfg.evaluation)
    learners = MultiAgentLearnerGroup(
        modules,
        cfg.dqn,
        learner_class=dqn_learner_class(cfg.framework),
        num_learners=cfg.num_learners,
        num_cpus_per_learner=cfg.num_cpus_per_learner,
        gradient_sync=cfg.gradient_sync,
    )
    tracker = ReturnTracker(target_for(cfg.target_return, None), cfg.stop_window)
    tracker.expect([f"module/{mid}" for mid in spaces] + [f"agent/{aid}" for aid in agents])
    trained = learners.trained_module_ids
    replay: Any = None
    runners: EnvRunnerGroup | None = None
    steps, owed, num_updates, last_log, reports, loss = 0, 0.0, 0, float("-inf"), 0, math.nan
    done = {"num_env_runner_restarts": 0, "num_env_steps_lost": 0}  # before a resume
    observation_space = repr({mid: sp[0] for mid, sp in spaces.items()})
    replay_path = None

    def over() -> bool:
        """Whether a budget is used."""
        return budget_used(cfg, iterations=reports, env_steps=steps, elapsed_s=tracker.elapsed) is not None

    def failures() -> tuple[int, int]:
        assert runners is not None
        group = runners.metrics
        return (
            done["num_env_runner_restarts"] + group.num_env_runner_restarts,
            done["num_env_steps_lost"] + group.num_env_steps_lost,
        )

    def save_to(saver: Checkpointer) -> Path:
        assert replay is not None
        restarts, lost = failures()
        state = TrainingState(
            algo="dqn", env=env_name(runner_config.env), observation_space=observation_space, iteration=reports,
            env_steps=steps, learner=learners.get_states()[0],
            counters={"num_env_runner_restarts": restarts, "num_env_steps_lost": lost, "num_updates": num_updates,
                      "owed": owed},
            **tracker.checkpoint_fields(),
        )  # fmt: skip
        return saver.save(
            state,
            save_replay=lambda path: ray.get(replay.save.remote(path)),
            replay_name=REPLAY_FOLDER,
            policy=keeper.build(),
        )

    def save() -> None:
        assert checkpointer is not None
        save_to(checkpointer)
        saved[0] = reports

    def make_policy(weights: Any = None, connector_states: Any = None) -> Any:
        info = run_info(
            "dqn", env_name(runner_config.env), runner_config.env_config, Framework(cfg.framework).value,
            iteration=reports, env_steps=steps,
        )  # fmt: skip
        weights = acting_weights(epsilon_at(cfg, steps), None) if weights is None else weights
        return build_multi_agent_policy(
            runner_config, spaces, agents, weights=weights, connector_states=connector_states, info=info
        )

    keeper = PolicyKeeper(make_policy, policy_dir=policy_dir, log=log)
    evaluation: TrainingEvaluation | None = None
    saved = [-1]  # the report of the newest checkpoint this loop saved

    def acting_weights(epsilon: float, module_ids: tuple[str, ...] | None) -> dict[str, Any]:
        """Each module's weights (of ``module_ids``; None: every one), the trained ones with ``epsilon``."""
        out = learners.get_weights(module_ids)
        return {mid: {**w, "epsilon": np.float64(epsilon)} if mid in trained else w for mid, w in out.items()}

    try:  # a checkpoint that does not fit stops the learners it started, as any failure does
        if resume is not None:
            restore_training(resume, learners, None, tracker)
            reports, steps = resume.iteration, resume.env_steps
            num_updates, owed = int(resume.counters.get("num_updates", 0)), float(resume.counters.get("owed", 0.0))
            done.update({k: int(resume.counters.get(k, 0)) for k in done})
            if resume.replay_path is not None:  # the replay actor restores from a working copy of the saved folder
                replay_path = resume.replay_path.parent.parent / f"replay-resumed-{uuid.uuid4().hex[:8]}"
                shutil.copytree(resume.replay_path, replay_path)
            saved[0] = reports  # that checkpoint is this run's newest: its end saves again only if it moved on
        replay = create_multi_agent_replay_actor(
            capacity_env_steps=cfg.replay.capacity_env_steps, seed=cfg.replay.seed,
            checkpoint_path=None if replay_path is None else str(replay_path),
        )  # fmt: skip
        runners = EnvRunnerGroup(runner_config, cfg.env_runner_group)
        runners.sync_weights(acting_weights(1.0, None))  # every module; the frozen ones keep their own epsilon
        evaluation = training_evaluation(
            cfg, runner_config, learners, None, make_policy, policy_dir=policy_dir,
            return_keys=[f"module/{mid}" for mid in spaces] + [f"agent/{aid}" for aid in agents], log=log,
            weights=lambda: acting_weights(epsilon_at(cfg, steps), None),
        )  # fmt: skip
        tracker.stop_on_evaluation = cfg.stop_on is StopOn.EVALUATION
        evaluation.begin(reports + 1)
        handle.attach(
            learners=learners, runners=runners, evaluation=evaluation, make_policy=make_policy, save_to=save_to,
            is_done=lambda: over() or tracker.reached, iteration=lambda: reports,
        )  # fmt: skip
        yield None  # the actors are up
        while not over() and not tracker.reached:
            answers = runners.sample_to_replay(replay)
            for line in runners.metrics.runner_failures + runners.metrics.sub_env_failures:  # recovered: went on
                log(line)
            new_steps = sum(m.num_env_steps for m in answers)
            steps += new_steps
            by: dict[str, list[float]] = {}
            for m in answers:
                for key, values in returns_by(m).items():
                    by.setdefault(key, []).extend(values)
            tracker.add([r for m in answers for r in m.episode_returns], by=by)
            if steps >= cfg.replay.min_size_to_sample:
                owed += new_steps * cfg.updates_per_env_step
                held = ray.get(replay.get_counts.remote())["num_module_steps"]
                ready = tuple(mid for mid in trained if held.get(mid, 0) >= cfg.replay.min_size_to_sample)
                if owed >= 1 and ready:
                    update = learners.update_from_replay(
                        replay, int(owed), cfg.batch_size, module_ids=ready, n_step=cfg.n_step
                    )
                    loss, num_updates, owed = update.loss, num_updates + int(owed), owed - int(owed)
            epsilon = epsilon_at(cfg, steps)
            version = runners.sync_weights(acting_weights(epsilon, trained))
            if time.perf_counter() - last_log >= log_every_s or tracker.reached or over():
                last_log, reports = time.perf_counter(), reports + 1
                if checkpointer is not None and checkpointer.due(reports):
                    save()
                evaluated = _evaluate(evaluation, tracker, reports, more=not over())
                yield _report(
                    tracker, reports, steps, failures(), on_iteration, log, loss=loss, epsilon=epsilon,
                    num_updates=num_updates, version=version, summed=True, evaluation=evaluated,
                )  # fmt: skip
        steps_sent = steps + sum(m.num_env_steps for _, m in runners.collect_in_flight())
        counts = ray.get(replay.get_counts.remote())
        policy = keeper.end(save if checkpointer is not None and reports > 0 else None, is_saved=saved[0] == reports)
    except KeyboardInterrupt:
        # The state as it is now: the counters and the replay agree up to the runners' in-flight steps.
        started = checkpointer is not None and replay is not None and runners is not None and reports > 0
        keeper.end(save if started else None, is_saved=saved[0] == reports)
        raise
    finally:
        if evaluation is not None:
            evaluation.stop()
        learners.stop()
        if runners is not None:
            runners.stop()
        if replay is not None:
            ray.kill(replay)
        if replay_path is not None:  # the working copy the replay actor restored from
            shutil.rmtree(replay_path, ignore_errors=True)
    result = DQNTrainResult(
        **tracker.finish(steps, log),
        num_updates=num_updates,
        runner_env_steps_sent=steps_sent,
        replay_num_env_steps_received=int(counts["num_env_steps_received"]),
        policy=policy,
    )
    return dataclasses.replace(result, stopped_by=stop_reason(cfg, tracker, iterations=reports, env_steps=steps))
