"""The synchronous PPO loop (``optimizer="sync_samples"``: PPO and A2C, single- and multi-agent) as a
generator of its iterations: ``train_ppo`` runs it to its end, ``Algorithm.train`` one step at a time.

Each iteration the EnvRunnerGroup samples, the LearnerGroup updates, and the new weights go to the
runners with one ``ray.put``; a line per iteration goes to ``log``, and one per runner that failed
and was replaced. Ray must be running.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from connectors.common import MeanStdFilter
from connectors.env_to_module import env_to_module_observation_space
from learner.checkpoint import Checkpointer, TrainingState
from learner.evaluation_loop import TrainingEvaluation
from learner.frameworks import Framework, ppo_learner_class
from learner.keep_policy import PolicyKeeper, run_info
from learner.learner import ObservationFilter
from learner.learner_group import LearnerGroup
from learner.metrics import IterationRecord, PPOTrainResult
from learner.multi_agent_learner_group import MultiAgentLearnerGroup
from learner.optimizers import Optimizer
from learner.train import (
    LOOPS,
    LoopHandle,
    PPOTrainingConfig,
    ReturnTracker,
    StopOn,
    TrainingLoop,
    budget_used,
    check_training_resources,
    multi_agent_runner,
    ppo_losses,
    restore_training,
    returns_by,
    stop_reason,
    target_for,
    training_evaluation,
    view_pieces,
)
from ray_sampler.sampling.env_creator import env_name, probe_env
from ray_sampler.sampling.env_runner import build_module
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.evaluation import check_evaluation_opponent
from ray_sampler.sampling.multi_agent_env_runner import build_multi_rl_module, probe_multi_agent
from ray_sampler.sampling.policies import build_multi_agent_policy
from ray_sampler.sampling.runner_build import build_policy

__all__ = ["sync_iterations"]


def sync_iterations(
    cfg: PPOTrainingConfig,
    *,
    log: Callable[[str], None],
    on_iteration: Callable[[IterationRecord], None] | None,
    checkpointer: Checkpointer | None,
    resume: TrainingState | None,
    on_train_result: Callable[[TrainingLoop], None] | None,
    policy_dir: Path | None,
    handle: LoopHandle,
) -> Generator[IterationRecord | None, None, PPOTrainResult]:
    """``train_ppo``'s synchronous loop (see ``learner.train.ppo_iterations``)."""
    ma_runner = multi_agent_runner(cfg.env_runner)
    check_training_resources(cfg.env_runner_group, cfg.num_learners, cfg.num_cpus_per_learner, cfg.evaluation)
    filtered = cfg.ppo.observation_filter is ObservationFilter.MEAN_STD
    learners: Any
    if ma_runner is not None:  # one module per policy: a LearnerGroup per trained module
        if filtered:  # a MeanStdFilter per module in every runner, merged module by module
            pieces = (*ma_runner.env_to_module_connectors, MeanStdFilter())
            ma_runner = dataclasses.replace(ma_runner, env_to_module_connectors=pieces)
        agents, spaces_by_module = probe_multi_agent(ma_runner)
        check_evaluation_opponent(cfg.evaluation, ma_runner, agents)
        policy_runner = ma_runner
        modules = build_multi_rl_module(ma_runner, spaces_by_module)
        observation_space = repr({mid: sp[0] for mid, sp in spaces_by_module.items()})
        return_keys = [f"module/{mid}" for mid in modules] + [f"agent/{aid}" for aid in agents]
        reward_threshold = None
        runners = EnvRunnerGroup(ma_runner, cfg.env_runner_group)
        make_learners: Callable[[], Any] = lambda: MultiAgentLearnerGroup(  # noqa: E731
            modules,
            cfg.ppo,
            learner_class=ppo_learner_class(cfg.framework),
            num_learners=cfg.num_learners,
            num_cpus_per_learner=cfg.num_cpus_per_learner,
            gradient_sync=cfg.gradient_sync,
            learner_kwargs={"view_pieces": view_pieces(ma_runner.env_to_module_connectors)},
        )
    else:
        return_keys = []
        check_evaluation_opponent(cfg.evaluation, None, None)
        probe = probe_env(cfg.env_runner.env, cfg.env_runner.env_config)
        spaces = (probe.observation_space, probe.action_space)
        observation_space, reward_threshold = repr(spaces[0]), probe.reward_threshold
        runner_config = (
            dataclasses.replace(
                cfg.env_runner, env_to_module_connectors=(*cfg.env_runner.env_to_module_connectors, MeanStdFilter())
            )
            if filtered
            else cfg.env_runner
        )
        # The module sees what the runners' env-to-module pieces make of the observations (e.g. a stack).
        module_spaces = (env_to_module_observation_space(spaces[0], cfg.env_runner.env_to_module_connectors), spaces[1])
        runners = EnvRunnerGroup(runner_config, cfg.env_runner_group)
        policy_runner = runner_config
        make_learners = lambda: LearnerGroup(  # noqa: E731
            lambda: build_module(cfg.env_runner, *module_spaces),
            cfg.ppo,
            learner_class=ppo_learner_class(cfg.framework),
            num_learners=cfg.num_learners,
            num_cpus_per_learner=cfg.num_cpus_per_learner,
            gradient_sync=cfg.gradient_sync,
            learner_kwargs={"view_pieces": view_pieces(cfg.env_runner.env_to_module_connectors)},
        )
    try:
        learners = make_learners()
    except BaseException:
        runners.stop()  # the runners started first: they stop with the error
        raise
    tracker = ReturnTracker(target_for(cfg.target_return, reward_threshold), cfg.stop_window)
    tracker.expect(return_keys)
    steps, timings = 0, {"sample_s": 0.0, "update_s": 0.0, "learner_connector_s": 0.0, "runner_s": 0.0}
    it, done = 0, {"num_env_runner_restarts": 0, "num_env_steps_lost": 0}  # done: before a resume
    agent_steps = 0
    completed = (0, 0)  # (iterations, env steps) finished: what a checkpoint counts

    def is_over() -> bool:
        """Whether a budget is used (the target ends the loop after its record)."""
        return budget_used(cfg, iterations=it, env_steps=steps, elapsed_s=tracker.elapsed) is not None

    def make_policy(weights: Any = None, connector_states: Any = None) -> Any:
        """The policy of ``weights`` and ``connector_states`` (None: the learners' and runners' now)."""
        info = run_info(
            "ppo", env_name(cfg.env_runner.env), cfg.env_runner.env_config, Framework(cfg.framework).value,
            iteration=completed[0], env_steps=completed[1],
        )  # fmt: skip
        weights = learners.get_weights() if weights is None else weights
        states = runners.merged_connector_states if connector_states is None else connector_states
        if ma_runner is not None:
            return build_multi_agent_policy(
                policy_runner, spaces_by_module, agents, weights=weights, connector_states=states, info=info
            )
        return build_policy(policy_runner, *spaces, weights=weights, connector_state=states, info=info)

    keeper = PolicyKeeper(make_policy, policy_dir=policy_dir, log=log)
    evaluation: TrainingEvaluation | None = None
    saved_at = -1  # the iteration of the newest checkpoint this loop saved

    def save_to(saver: Checkpointer) -> Path:
        if cfg.env_runner.env_to_module_connectors or filtered:
            runners.sync_connector_states()  # the filters' statistics, merged, go in the checkpoint
        return saver.save(state(), policy=keeper.build())

    def save_checkpoint() -> None:
        nonlocal saved_at
        assert checkpointer is not None
        save_to(checkpointer)
        saved_at = completed[0]

    def state() -> TrainingState:
        group = runners.metrics
        counters = {k: done[k] + getattr(group, k) for k in done}
        return TrainingState(
            algo="ppo",
            env=env_name(cfg.env_runner.env),
            observation_space=observation_space,
            iteration=completed[0],
            env_steps=completed[1],
            learner=learners.get_states()[0],
            connector_states=runners.merged_connector_states,
            counters=counters,
            **tracker.checkpoint_fields(),
        )

    try:
        if resume is not None:
            restore_training(resume, learners, runners, tracker)
            it, steps = completed = resume.iteration, resume.env_steps
            saved_at = resume.iteration  # that checkpoint is this run's newest: its end saves again only if it moved on
            done.update({k: int(resume.counters.get(k, 0)) for k in done})
        runners.sync_weights(learners.get_weights())  # multi-agent: every module, frozen ones too
        num_runners = runners.num_env_runners
        evaluation = training_evaluation(
            cfg, policy_runner, learners, runners, make_policy, policy_dir=policy_dir, return_keys=return_keys, log=log
        )
        tracker.stop_on_evaluation = cfg.stop_on is StopOn.EVALUATION
        handle.attach(
            learners=learners, runners=runners, evaluation=evaluation, make_policy=make_policy, save_to=save_to,
            is_done=lambda: is_over() or tracker.reached, iteration=lambda: completed[0],
        )  # fmt: skip
        yield None  # the actors are up
        while not is_over():
            it += 1
            evaluation.begin(it)
            t0 = time.perf_counter()
            episodes: list[Any] = runners.sample()  # MultiAgentEpisode chunks in a multi-agent run
            t1 = time.perf_counter()
            timings["runner_s"] += runners.metrics.runner_sampling_s
            steps += sum(len(ep) for ep in episodes)
            if ma_runner is not None:
                agent_steps += sum(ep.agent_steps() for ep in episodes)
            for line in runners.metrics.runner_failures + runners.metrics.sub_env_failures:  # recovered: went on
                log(line)
            tracker.add(runners.metrics.episode_returns, by=returns_by(runners.metrics))
            if filtered:  # the learners normalize as the runners did: with the moments merged from all
                learners.set_connector_states(runners.sync_connector_states())
            metrics = learners.update_from_episodes(episodes)
            timings["sample_s"] += t1 - t0
            timings["update_s"] += time.perf_counter() - t1
            timings["learner_connector_s"] += metrics.learner_connector_s
            trained = learners.trained_module_ids if ma_runner is not None else None  # frozen ones never change
            version = runners.sync_weights(
                learners.get_weights(trained) if trained is not None else learners.get_weights()
            )
            group = runners.metrics
            completed = (it, steps)
            evaluated = evaluation.end(it)
            tracker.evaluation_mean = evaluation.last.get("episode_return_mean", float("nan"))
            record = tracker.record(
                it,
                steps,
                losses=ppo_losses(metrics),
                restarts=done["num_env_runner_restarts"] + group.num_env_runner_restarts,
                lost=done["num_env_steps_lost"] + group.num_env_steps_lost,
                evaluation=evaluated,
            )
            if checkpointer is not None and checkpointer.due(it):
                save_checkpoint()
            if on_iteration is not None:
                on_iteration(record)
            else:
                per_module = "".join(
                    f", {key.removeprefix('module/')} {value:.1f}"
                    for key, value in record.returns_by.items()
                    if key.startswith("module/")
                )
                log(
                    f"iter {it}: {steps} env steps, mean return {tracker.mean:.1f} (last {tracker.count} episodes"
                    f"{per_module}), policy loss {metrics.policy_loss:.3f}, weights v{version}, {tracker.elapsed:.1f} s"
                )
            if on_train_result is not None:
                on_train_result(TrainingLoop(it, record, runners, learners))
            yield record
            if tracker.reached:
                break
        can_save = checkpointer is not None and completed[0] > 0
        policy = keeper.end(save_checkpoint if can_save else None, is_saved=saved_at == completed[0])
    except KeyboardInterrupt:  # what the finished iterations made is kept
        can_save = checkpointer is not None and completed[0] > 0
        keeper.end(save_checkpoint if can_save else None, is_saved=saved_at == completed[0])
        raise
    finally:
        if evaluation is not None:
            evaluation.stop()
        learners.stop()
        runners.stop()
    result = PPOTrainResult(
        **tracker.finish(steps, log),
        iterations=it,
        sample_s=timings["sample_s"],
        update_s=timings["update_s"],
        learner_connector_s=timings["learner_connector_s"],
        agent_steps=agent_steps if ma_runner is not None else steps,
        runner_utilization=timings["runner_s"] / max(num_runners * (timings["sample_s"] + timings["update_s"]), 1e-9),
    )
    stopped_by = stop_reason(cfg, tracker, iterations=it, env_steps=steps)
    return dataclasses.replace(result, policy=policy, stopped_by=stopped_by)


LOOPS[Optimizer.SYNC_SAMPLES] = sync_iterations
