"""PPO training on a local Ray cluster's runners: the loop behind ``ray-sampler train``.

Each iteration the EnvRunnerGroup samples, the LearnerGroup updates, and the new weights go to
the runners with one ``ray.put``; a line per iteration goes to ``log``, and one per runner that
failed and was replaced (``EnvRunnerGroupConfig``'s restart fields). Ray must be running.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any, TypeVar

import gymnasium as gym

from connectors.env_to_module import EnvToModulePiece
from learner.checkpoint import Checkpointer, CheckpointError, TrainingState
from learner.evaluation_loop import TrainingEvaluation
from learner.frameworks import Framework, with_framework
from learner.keep_policy import best_policy_dir
from learner.learner import PPOConfig
from learner.learner_group import GradientSync, LearnerGroup
from learner.metrics import IterationRecord, PPOTrainResult, StopReason
from learner.multi_agent_learner_group import MultiAgentLearnerGroup
from learner.optimizers import AsyncGradientsConfig, AsyncSamplesConfig, Optimizer
from learner.return_tracker import ReturnTracker
from ray_sampler.errors import ConfigError
from ray_sampler.resources import Demand, check_demands
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_creator import MultiAgentEnvGiven, probe_env
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.evaluation import EvaluationConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env_runner import probe_multi_agent, resolve_multi_agent
from ray_sampler.sampling.placement import runner_demand
from ray_sampler.validate import check_enum, check_int, check_number, check_type, replace_field

__all__ = [
    "LOOPS",
    "LoopHandle",
    "PPOTrainingConfig",
    "ReturnTracker",
    "StopOn",
    "TrainingLoop",
    "budget_used",
    "check_budgets",
    "check_evaluation",
    "check_stop_rule",
    "check_training_components",
    "check_training_resources",
    "env_spaces",
    "multi_agent_runner",
    "ppo_iterations",
    "ppo_losses",
    "resolve_target",
    "restore_training",
    "returns_by",
    "run_observation_space",
    "run_to_end",
    "set_learner_state",
    "stop_reason",
    "target_for",
    "train_ppo",
    "training_demands",
    "training_evaluation",
]


DEFAULT_MAX_ENV_STEPS = 500_000
"""``PPOTrainingConfig.max_env_steps``' default."""


class StopOn(str, enum.Enum):
    TRAINING = "training"
    EVALUATION = "evaluation"


def _default_ppo_runner() -> EnvRunnerConfig:
    return EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=128, seed=0)


def _default_ppo_runner_group() -> EnvRunnerGroupConfig:
    return EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOTrainingConfig:
    """Knobs of ``ray-sampler train``: the component configs, and the loop's own budget and stop rule.

    The learners' module is built as the runners build theirs (``env_runner.module_class`` and
    ``module_config``; the built-in MLP seeded with ``env_runner.seed``), so both start equal."""

    env_runner: EnvRunnerConfig = dataclasses.field(default_factory=_default_ppo_runner)
    """What each runner steps (a gymnasium id) and how it samples: 4 CartPole-v1 sub-envs, 128 steps
    each per iteration, seed 0 (with 2 runners, 1,024 env steps per iteration: half of the 2,048 of
    the defaults before they were tuned on CartPole-v1, so twice the updates per env step;
    bench/RESULTS.md)."""
    env_runner_group: EnvRunnerGroupConfig = dataclasses.field(default_factory=_default_ppo_runner_group)
    """The runner actors: 2, half a CPU each."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    """PPO's hyperparameters (learning rate, epochs, minibatches, the shuffling seed)."""
    framework: Framework | str = Framework.NUMPY
    """``"numpy"`` (no extra needed) or ``"torch"`` (``ray-sampler[torch]``): the learner, and the
    built-in module the runners and learners build (learner/frameworks.py)."""
    num_learners: int = 0
    """Learner actors (0: one local learner)."""
    num_cpus_per_learner: float = 0.5
    """CPUs each learner actor reserves."""
    gradient_sync: GradientSync | str = GradientSync.DRIVER
    """How learner actors average their gradients at every step: ``"driver"`` (gathered by the
    driver, one mean sent back) or ``"allreduce"`` (among themselves, torch.distributed's gloo: the
    driver sends only the data; needs torch). Unused with one local learner."""
    max_iterations: int | None = None
    """Stop after this many iterations (None: no bound on them). What an iteration is depends on the
    optimizer: with ``"sync_samples"`` a batch from every runner (1,024 env steps with the default
    runners), with the asynchronous ones one update on one fragment (512 env steps by default)."""
    max_env_steps: int | None = DEFAULT_MAX_ENV_STEPS
    """Stop once the loop has trained on this many env steps (None: no bound on them); the same
    measure for every optimizer. The default reaches CartPole-v1's 475 with each optimizer's
    command in docs/optimizers.md (the slowest measured took 305k)."""
    max_time_s: float | None = None
    """Stop once the run's wall time (a resumed run's earlier time included) reaches this many
    seconds, checked between iterations (None: no bound)."""
    target_return: float | str | None = "auto"
    """Stop once the mean return of the last ``stop_window`` finished episodes reaches this; ``"auto"``:
    the env spec's ``reward_threshold`` (475 for CartPole-v1); None, or ``"auto"`` for an env without
    one: no target, the run uses its budget."""
    stop_window: int = 100
    """Finished episodes in the stop rule's mean (stricter than RLlib 2.60's ``episode_return_mean``,
    which averages the episodes that finished in its last iteration: bench/RESULTS.md)."""
    optimizer: Optimizer | str = Optimizer.SYNC_SAMPLES
    """``"sync_samples"``: a batch from every runner, then an update while they wait (PPO, A2C);
    ``"async_samples"``: the runners never wait, the learner updates on each fragment as it comes,
    with V-trace's advantages (APPO, IMPALA: ``ppo.policy_loss``); ``"async_gradients"``: the
    runners compute gradients, the driver applies them as they come (A3C). Asynchronous: an
    iteration is one update."""
    async_samples: AsyncSamplesConfig = dataclasses.field(default_factory=AsyncSamplesConfig)
    """With ``optimizer="async_samples"``: how often the weights go out, and the policy-lag bound."""
    async_gradients: AsyncGradientsConfig = dataclasses.field(default_factory=AsyncGradientsConfig)
    """With ``optimizer="async_gradients"``: the staleness bound."""
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    """Evaluation runners, with RLlib's names (``evaluation_interval``, ``evaluation_duration``, ...):
    off by default; greedy episodes on runners of their own, reported as ``evaluation/`` columns."""
    stop_on: StopOn | str = StopOn.TRAINING
    """Which return ``target_return`` applies to: ``"training"`` (the stop window's exploring
    returns) or ``"evaluation"`` (the last evaluation's mean; needs evaluation on)."""

    def __post_init__(self) -> None:
        check_training_components(self.env_runner, self.env_runner_group)
        replace_field(self, "optimizer", check_enum("optimizer", Optimizer, self.optimizer))
        check_type("async_samples", self.async_samples, AsyncSamplesConfig)
        check_type("async_gradients", self.async_gradients, AsyncGradientsConfig)
        replace_field(self, "framework", check_enum("framework", Framework, self.framework))
        replace_field(self, "env_runner", with_framework(self.framework, self.env_runner))
        check_type("ppo", self.ppo, PPOConfig)
        check_int("num_learners", self.num_learners, minimum=0)
        check_number("num_cpus_per_learner", self.num_cpus_per_learner, minimum=0)
        replace_field(self, "gradient_sync", check_enum("gradient_sync", GradientSync, self.gradient_sync))
        check_budgets(self)
        check_stop_rule(self.target_return, self.stop_window)
        check_evaluation(self)


def check_budgets(cfg: Any) -> None:
    """A training config's budgets (``max_iterations`` where it has one, ``max_env_steps``,
    ``max_time_s``): each None or positive, and at least one given."""
    names = [n for n in ("max_iterations", "max_env_steps", "max_time_s") if hasattr(cfg, n)]
    for name in names[:-1]:  # None is no bound; the message names the ints, as when they were the only form
        if getattr(cfg, name) is not None:
            check_int(name, getattr(cfg, name), minimum=1)
    if cfg.max_time_s is not None:
        check_number("max_time_s", cfg.max_time_s, minimum=0, exclusive_minimum=True)
    if all(getattr(cfg, n) is None for n in names):
        raise ConfigError(f"give a budget: {', '.join(repr(n) for n in names)} may not all be None")


def budget_used(cfg: Any, *, iterations: int, env_steps: int, elapsed_s: float) -> StopReason | None:
    """The first of ``cfg``'s budgets that ``iterations``, ``env_steps`` and ``elapsed_s`` reached
    (checked in that order); None while every one has room.

    >>> cfg = PPOTrainingConfig(max_iterations=10, max_env_steps=2048)
    >>> budget_used(cfg, iterations=3, env_steps=2048, elapsed_s=1.0)
    <StopReason.MAX_ENV_STEPS: 'max_env_steps'>
    >>> budget_used(cfg, iterations=3, env_steps=1024, elapsed_s=1.0) is None
    True
    """
    max_iterations = getattr(cfg, "max_iterations", None)
    if max_iterations is not None and iterations >= max_iterations:
        return StopReason.MAX_ITERATIONS
    if cfg.max_env_steps is not None and env_steps >= cfg.max_env_steps:
        return StopReason.MAX_ENV_STEPS
    if cfg.max_time_s is not None and elapsed_s >= cfg.max_time_s:
        return StopReason.MAX_TIME_S
    return None


def stop_reason(cfg: Any, tracker: ReturnTracker, *, iterations: int, env_steps: int) -> StopReason | None:
    """What ended a loop that returned: its target, else the first budget it reached."""
    if tracker.reached:
        return StopReason.TARGET_RETURN
    return budget_used(cfg, iterations=iterations, env_steps=env_steps, elapsed_s=tracker.elapsed)


def check_evaluation(cfg: Any) -> None:
    """A training config's ``evaluation`` and ``stop_on`` (a replace_field on ``cfg``): the target on the
    evaluation return needs evaluation on."""
    check_type("evaluation", cfg.evaluation, EvaluationConfig)
    replace_field(cfg, "stop_on", check_enum("stop_on", StopOn, cfg.stop_on))
    if cfg.stop_on is StopOn.EVALUATION and not cfg.evaluation.is_on:
        raise ConfigError(
            "'stop_on' 'evaluation' needs evaluation on: 'evaluation.evaluation_interval' must be >= 1 (got "
            f"{cfg.evaluation.evaluation_interval})"
        )
    if cfg.evaluation.evaluation_opponent is not None and not cfg.evaluation.is_on:
        raise ConfigError(
            f"'evaluation.evaluation_opponent' {cfg.evaluation.evaluation_opponent!r} needs evaluation on: "
            f"'evaluation.evaluation_interval' must be >= 1 (got {cfg.evaluation.evaluation_interval})"
        )


def check_stop_rule(target_return: float | str | None, stop_window: int) -> None:
    """The stop rule's fields: a finite target, ``"auto"`` or None, and a window of at least one episode."""
    if target_return != "auto" and target_return is not None:
        try:
            check_number("target_return", target_return)
        except ConfigError:
            raise ConfigError(
                f"'target_return' must be a finite number, 'auto' or None (got {target_return!r})"
            ) from None
    check_int("stop_window", stop_window, minimum=1)


def resolve_target(
    env: str | Callable[..., Any], target_return: float | str | None, env_config: dict[str, Any] | None = None
) -> float | None:
    """The target of a run on ``env`` (any form ``EnvRunnerConfig.env`` takes): ``target_return`` if a
    number, None if None, and for ``"auto"`` the env spec's ``reward_threshold`` (None: it has none,
    or the env has no spec, so there is no target)."""
    if target_return != "auto":
        return target_for(target_return, None)
    return probe_env(env, env_config).reward_threshold


def target_for(target_return: float | str | None, reward_threshold: float | None) -> float | None:
    """``target_return`` as a number or None, with ``"auto"`` standing for ``reward_threshold``."""
    if target_return == "auto":
        return reward_threshold
    return None if target_return is None else float(target_return)


def check_training_components(env_runner: Any, env_runner_group: Any) -> None:
    """The runner configs of a training loop: the right types and at least one runner (the env is
    any form ``EnvRunnerConfig`` takes, checked there)."""
    check_type("env_runner", env_runner, EnvRunnerConfig)
    check_type("env_runner_group", env_runner_group, EnvRunnerGroupConfig)
    check_int("env_runner_group.num_env_runners", env_runner_group.num_env_runners, minimum=1)


def training_demands(
    env_runner_group: EnvRunnerGroupConfig,
    num_learners: int,
    num_cpus_per_learner: float,
    evaluation: EvaluationConfig | None = None,
) -> list[Demand]:
    """What a training loop's runner, learner and remote evaluation runner actors reserve (the replay
    actor reserves no CPU; evaluation runners take the training runners' resources each)."""
    demands = [runner_demand(env_runner_group, env_runner_group.num_env_runners)]
    if num_learners:
        demands.append(Demand("num_learners x num_cpus_per_learner", num_learners, {"CPU": num_cpus_per_learner}))
    if evaluation is not None and evaluation.is_on and evaluation.evaluation_num_env_runners:
        each = runner_demand(env_runner_group, evaluation.evaluation_num_env_runners)
        demands.append(dataclasses.replace(each, fields="evaluation_num_env_runners x num_cpus_per_env_runner"))
    return demands


def check_training_resources(
    env_runner_group: EnvRunnerGroupConfig,
    num_learners: int,
    num_cpus_per_learner: float,
    evaluation: EvaluationConfig | None = None,
) -> None:
    """Raises InsufficientResourcesError before any actor starts if the runners, learner actors and
    evaluation runners together can never fit the cluster (``ray_sampler.resources``)."""
    check_demands(training_demands(env_runner_group, num_learners, num_cpus_per_learner, evaluation))


def env_spaces(env: str | Callable[..., Any], env_config: dict[str, Any] | None = None) -> tuple[gym.Space, gym.Space]:
    """The (observation, action) spaces of ``env`` with ``env_config``, from one sub-env built as the
    runners build theirs (``probe_env``: the same resolution, never a second ``gymnasium.make``)."""
    probe = probe_env(env, env_config)
    return probe.observation_space, probe.action_space


def restore_training(
    resume: TrainingState,
    learners: LearnerGroup | MultiAgentLearnerGroup,
    runners: EnvRunnerGroup | None,
    tracker: ReturnTracker,
) -> None:
    """Puts a loop's components in a checkpoint's state: every learner (weights, optimizer, RNG),
    the runners' connector states (when saved, and ``runners`` given) and the stop rule's window.
    CheckpointError if the learner state does not fit this run's learners (another architecture)."""
    set_learner_state(learners.set_states, resume)
    tracker.restore(resume)
    if runners is not None and resume.connector_states is not None:
        runners.set_connector_states(resume.connector_states)


def set_learner_state(set_state: Callable[[dict[str, Any]], None], resume: TrainingState) -> None:
    """``set_state(resume.learner)``; CheckpointError if it does not fit this run's learners."""
    try:
        set_state(resume.learner)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint of {resume.algo} on {resume.env} at iteration {resume.iteration}: its learner state does not "
            f"fit this run's learners ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None


def multi_agent_runner(env_runner: EnvRunnerConfig) -> EnvRunnerConfig | None:
    """The runner config of a multi-agent run (``multi_agent`` set, or the env is a MultiAgentEnv or
    a PettingZoo env), its modules made explicit (``resolve_multi_agent``: one module for every agent,
    or one per distinct pair of spaces where the agents' differ); None for a single-agent env."""
    if env_runner.multi_agent is None:
        try:
            probe_env(env_runner.env, env_runner.env_config)
        except MultiAgentEnvGiven:
            env_runner = dataclasses.replace(env_runner, multi_agent=MultiAgentConfig())
        else:
            return None
    return resolve_multi_agent(env_runner)


def run_observation_space(env_runner: EnvRunnerConfig) -> str:
    """The observation space a run's checkpoints are tied to, as they record it: the env's repr, or
    in a multi-agent run every module's, by module id."""
    ma_runner = multi_agent_runner(env_runner)
    if ma_runner is None:
        return repr(env_spaces(env_runner.env, env_runner.env_config)[0])
    return repr({mid: spaces[0] for mid, spaces in probe_multi_agent(ma_runner)[1].items()})


def returns_by(metrics: Any) -> dict[str, list[float]]:
    """A group call's finished-episode returns per module (``module/<id>``) and per agent
    (``agent/<id>``); empty for single-agent runners."""
    out = {f"module/{mid}": v for mid, v in getattr(metrics, "module_episode_returns", {}).items()}
    out.update({f"agent/{aid}": v for aid, v in getattr(metrics, "agent_episode_returns", {}).items()})
    return out


_LOGGED_LOSSES = ("policy_loss", "vf_loss", "entropy", "mean_kl_approx")


def ppo_losses(metrics: Any) -> dict[str, float]:
    """The loss terms an iteration record keeps: PPO's main four, and per trained module
    ``<term>/<module id>`` in a multi-agent run."""
    out = {k: metrics[k] for k in _LOGGED_LOSSES}
    for mid, m in getattr(metrics, "module_metrics", {}).items():
        out.update({f"{k}/{mid}": m[k] for k in _LOGGED_LOSSES})
    return out


def view_pieces(env_to_module_connectors: tuple[Any, ...]) -> tuple[Any, ...]:
    """The learner twins (``learner_piece()``) of the runners' env-to-module pieces that have one, in
    order: the learner rebuilds the inputs the module acted on (stacked frames, previous actions)."""
    twins = (p.learner_piece() for p in env_to_module_connectors if isinstance(p, EnvToModulePiece))
    return tuple(t for t in twins if t is not None)


@dataclasses.dataclass(frozen=True)
class TrainingLoop:
    """What ``train_ppo``'s ``on_train_result`` callback gets after each iteration (RLlib's
    ``on_train_result``): the iteration's record, and the runners and learners, to change between
    iterations (e.g. self-play: ``add_frozen_copy``)."""

    iteration: int
    record: IterationRecord
    runners: EnvRunnerGroup
    learners: Any

    def add_frozen_copy(
        self, module_id: str, *, copy_of: str, policy_mapping_fn: Callable[..., str] | None = None
    ) -> None:
        """Multi-agent: adds module ``module_id``, a frozen copy of module ``copy_of``'s weights now
        (the same ModuleSpec), to the learners and every runner, with the new ``policy_mapping_fn``
        if given. A run whose modules changed this way cannot be resumed from its checkpoints yet."""
        ma = self.runners.config.multi_agent
        if ma is None:
            raise ConfigError("add_frozen_copy: this run trains a single-agent env (it has one module)")
        weights = self.learners.get_weights((copy_of,))[copy_of]
        self.learners.add_frozen(module_id, weights)
        self.runners.add_module(module_id, weights, spec=ma.spec(copy_of), policy_mapping_fn=policy_mapping_fn)

    def remove_module(self, module_id: str, *, policy_mapping_fn: Callable[..., str] | None = None) -> None:
        """Multi-agent: removes module ``module_id`` from the learners and every runner, with the new
        ``policy_mapping_fn`` if given (episodes running with an agent on it start afresh; nothing
        shipped is lost). The same caveat on resuming as ``add_frozen_copy``."""
        if self.runners.config.multi_agent is None:
            raise ConfigError("remove_module: this run trains a single-agent env (it has one module)")
        self.runners.remove_module(module_id, policy_mapping_fn=policy_mapping_fn)
        self.learners.remove_module(module_id)


def training_evaluation(
    cfg: Any,
    runner: EnvRunnerConfig,
    learners: Any,
    runners: Any,
    make_policy: Callable[[Any, Any], Any],
    *,
    policy_dir: Path | None,
    return_keys: list[str],
    log: Callable[[str], None],
    weights: Callable[[], Any] | None = None,
) -> TrainingEvaluation:
    """A loop's evaluation (``cfg.evaluation``) of what ``learners`` and ``runners`` hold now (``weights``:
    what the runners would be sent, default the learners' weights); the best policy goes beside
    ``policy_dir`` (``best_policy/``)."""
    return TrainingEvaluation(
        cfg.evaluation,
        runner,
        weights=learners.get_weights if weights is None else weights,
        connector_states=lambda: runners.merged_connector_states if runners is not None else None,
        make_policy=make_policy,
        best_dir=best_policy_dir(policy_dir),
        return_keys=tuple(return_keys),
        group=cfg.env_runner_group,
        log=log,
    )


LOOPS: dict[Optimizer, Callable[..., Generator[IterationRecord | None, None, PPOTrainResult]]] = {}
"""Each optimizer's loop, as a generator of its iterations (``ppo_iterations``): learner/ppo_loop.py,
learner/train_async.py and learner/train_async_gradients.py register theirs on import (the
``learner`` package imports all three), as they build on this module."""

Result = TypeVar("Result")


@dataclasses.dataclass
class LoopHandle:
    """What a running loop shows the ``Algorithm`` that steps it: set by the loop once its actors are up."""

    learners: Any = None
    runners: Any = None
    evaluation: Any = None
    """The loop's ``TrainingEvaluation``."""
    make_policy: Callable[..., Any] | None = None
    """``make_policy(weights=None, connector_states=None)``: the policy of what the loop holds now."""
    save_to: Callable[[Checkpointer], Path] | None = None
    """Saves a checkpoint of the loop now with a Checkpointer; returns its directory."""
    is_done: Callable[[], bool] = lambda: False
    """Whether the loop used its budget or reached its target (its next step ends it)."""
    iteration: Callable[[], int] = lambda: 0
    """Iterations done."""

    def attach(self, **fields: Any) -> None:
        """Sets these fields (a loop's, once its actors are up)."""
        for name, value in fields.items():
            if name not in {f.name for f in dataclasses.fields(self)}:
                raise TypeError(f"LoopHandle has no field {name!r}")
            setattr(self, name, value)


def run_to_end(steps: Generator[IterationRecord | None, None, Result]) -> Result:
    """Runs a loop's generator of iterations to its end; returns what it returned. Ctrl-C between two
    steps goes into the loop, which keeps what it made (its checkpoint and policy) and stops its actors."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value
        except KeyboardInterrupt:
            steps.throw(KeyboardInterrupt())  # a finished loop raises it at once; a paused one handles it first
            raise


def train_ppo(
    cfg: PPOTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    checkpointer: Checkpointer | None = None,
    resume: TrainingState | None = None,
    on_train_result: Callable[[TrainingLoop], None] | None = None,
    policy_dir: Path | None = None,
) -> PPOTrainResult:
    """Trains until ``target_return`` or the first budget (``max_iterations``, ``max_env_steps``,
    ``max_time_s``; the result's ``stopped_by`` says which); returns what it reached, with the
    time spent sampling, updating, and in the learner pipeline (a part of updating; NaN with
    learner actors). Each iteration's record goes to ``on_iteration``; without one, a line to ``log``.

    With ``checkpointer``, a checkpoint is saved when it is due, and once more on Ctrl-C; with
    ``resume`` (a loaded checkpoint), the run carries on from it: learner state (weights, optimizer,
    RNG), connector states, counters and the stop rule's window. ``on_train_result`` is called after
    each iteration's record, with a ``TrainingLoop``.

    However the loop ends (its budget, its target, Ctrl-C), the policy the runners act with is built
    and returned in the result's ``policy`` (and written to ``policy_dir`` when given); with a
    ``checkpointer``, a last checkpoint is saved then too. Every checkpoint holds the policy of its
    iteration (``policy/``).

    The loop is ``ppo_iterations``' (``learner.algorithm.Algorithm`` steps the same one): the optimizer
    ``"sync_samples"``'s here, ``"async_samples"``'s in learner/train_async.py and
    ``"async_gradients"``'s in learner/train_async_gradients.py."""
    steps = ppo_iterations(
        cfg, log=log, on_iteration=on_iteration, checkpointer=checkpointer, resume=resume,
        on_train_result=on_train_result, policy_dir=policy_dir,
    )  # fmt: skip
    return run_to_end(steps)


def ppo_iterations(
    cfg: PPOTrainingConfig,
    *,
    log: Callable[[str], None] = print,
    on_iteration: Callable[[IterationRecord], None] | None = None,
    checkpointer: Checkpointer | None = None,
    resume: TrainingState | None = None,
    on_train_result: Callable[[TrainingLoop], None] | None = None,
    policy_dir: Path | None = None,
    handle: LoopHandle | None = None,
) -> Generator[IterationRecord | None, None, PPOTrainResult]:
    """The loop of ``cfg.optimizer`` as a generator: its first ``next()`` starts the actors and gives
    None, each later one runs an iteration and gives its record; it returns the result (StopIteration's
    value). ``handle`` is filled once the actors are up. Closing it stops the actors."""
    if cfg.optimizer is not Optimizer.SYNC_SAMPLES and on_train_result is not None:
        raise ConfigError("the asynchronous loops take no 'on_train_result' (they have no TrainingLoop)")
    options: dict[str, Any] = {"on_train_result": on_train_result} if cfg.optimizer is Optimizer.SYNC_SAMPLES else {}
    return LOOPS[Optimizer(cfg.optimizer)](
        cfg, log=log, on_iteration=on_iteration, checkpointer=checkpointer, resume=resume, policy_dir=policy_dir,
        handle=handle if handle is not None else LoopHandle(), **options,
    )  # fmt: skip
