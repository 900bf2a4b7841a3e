"""``ray-sampler train`` (PPO) and ``ray-sampler train-dqn``: the commands, checked before Ray starts.

The options are the training configs' fields (``learner.train.PPOTrainingConfig``,
``learner.train_dqn.DQNTrainingConfig``) plus the run's own (``RunOptions``). Defaults come in
layers: the config's defaults, the env's preset (``learner.presets``), a ``--config`` file, then
the flags. Everything the user gave is checked before Ray starts: option values, the env id (with
a close match suggested), the env itself (``--no-env-check`` skips it), the extras asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import sys
import sysconfig
import traceback
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import gymnasium as gym
import tyro

from learner.checkpoint import Checkpointer, latest_checkpoint, load_checkpoint
from learner.metrics import IterationRecord, StopReason, TrainResult
from learner.optimizers import Optimizer, algorithm_name
from learner.presets import has_preset, ppo_preset
from learner.train import (
    PPOTrainingConfig,
    ReturnTracker,
    StopOn,
    env_spaces,
    ppo_iterations,
    resolve_target,
    run_observation_space,
    run_to_end,
    target_for,
    training_demands,
)
from learner.train_async import check_async
from learner.train_async_gradients import check_async_gradients
from learner.train_dqn import DQNTrainingConfig, dqn_iterations
from ray_sampler.cli.external import ExternalOptions, addresses_line, check_ports_free, rewrite_external_args
from ray_sampler.cli.options import (
    UsageError,
    changed_options,
    config_file_flags,
    parse,
    read_toml,
    to_toml_dict,
)
from ray_sampler.cli.phases import mark
from ray_sampler.cli.progress import RunSummary, TrainingProgress
from ray_sampler.cli.ray_cluster import check_address, ray_cluster
from ray_sampler.cli.run_dir import RunDirectory, load_config
from ray_sampler.cli.user_env import (
    DEFAULT_ENV,
    EnvOptions,
    check_env_builds,
    check_env_name,
    gather_env_config,
    job_runtime_env,
)
from ray_sampler.errors import ConfigError, EnvCheckError, SpaceError
from ray_sampler.policy import POLICY_FILE
from ray_sampler.resources import never_fits
from ray_sampler.sampling.config import BatchMode, EnvRunnerGroupConfig
from ray_sampler.sampling.env_check import check_env
from ray_sampler.sampling.env_runner import build_module
from ray_sampler.sampling.evaluation import check_evaluation_opponent
from ray_sampler.sampling.external_spaces import EXTERNAL_SPACES_ENV, register_external_spaces
from ray_sampler.sampling.horizon import env_time_limit
from ray_sampler.sampling.multi_agent_config import AgentTable, MultiAgentConfig, policy_mapping
from ray_sampler.sampling.multi_agent_env_runner import build_multi_rl_module, probe_multi_agent

__all__ = [
    "RunOptions",
    "TrainDQN",
    "TrainPPO",
    "algorithm_of",
    "budget_line",
    "command_from_args",
    "config_of",
    "modules_line",
    "preset_line",
    "run_training",
    "stopped_by_line",
    "target_hint",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions(EnvOptions):
    """Options of a training run that are not the algorithm's config."""

    config: Path | None = None
    """A TOML file of options, in the form of a run directory's config.toml; flags override it."""
    address: str = ""
    """Ray cluster to attach to: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if set, else
    a Ray started in this process and stopped at the end)."""
    seed: int | None = None
    """Seed of everything (envs, network, shuffling, exploration, replay); default: the config's seeds."""
    hidden_sizes: tuple[int, ...] | None = None
    """Units of each hidden layer of the network (default: the config's, 64 64)."""
    env_check: bool = True
    """Check the env on the driver before Ray starts: gymnasium's env checker, then random steps that
    refuse NaN or inf values, observations outside the space and non-numeric rewards."""
    runs_dir: Path = Path("runs")
    """Where the run directory <algo>-<env>-<time>/ is made (config.toml, metrics.csv, curve.png)."""
    tensorboard: bool = False
    """Also write TensorBoard event files into the run directory (needs ray-sampler[tensorboard])."""
    plain: bool = False
    """One plain line per iteration instead of the live progress display (the default when the
    output is not a terminal)."""
    verbose: Annotated[bool, tyro.conf.arg(aliases=("-v",))] = False
    """Show Ray's own log lines (startup, token authentication, its workers' output)."""
    checkpoint_every: int = 0
    """Save a checkpoint into the run directory every this many iterations (DQN: progress reports),
    and once more on Ctrl-C: weights, optimizer, connector states, counters, RNG, DQN's replay; 0: none."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints are kept."""
    resume: Path | None = None
    """A run directory to carry on from its newest checkpoint, with its config.toml (flags given
    after it override that config, e.g. a larger --max-iterations)."""
    policy_mapping: str | None = None
    """Multi-agent envs: which module acts for each agent: by-spaces (the default: agents with equal
    observation and action spaces share a module, named after their common prefix; one module,
    shared, where all agree), shared (one module for every agent), per-agent (a module per agent,
    named by its id), or module:Name (a MultiAgentConfig, or a policy_mapping_fn(agent_id, episode,
    **kwargs) whose modules are the ids it gives the agents)."""
    centralized_critic: bool = False
    """Multi-agent envs: MAPPO's centralized critic (the value function reads the global state, the
    policy the agent's own observation; numpy modules)."""
    global_state: Literal["concat", "state"] = "concat"
    """With --centralized-critic: concat (every agent's latest observation) or state (the env's state())."""
    external: ExternalOptions = dataclasses.field(default_factory=ExternalOptions)
    """Simulators outside Ray that connect to the runners (--env external)."""

    def __post_init__(self) -> None:
        check_address(self.address or os.environ.get("RAY_ADDRESS", ""))
        if self.checkpoint_every < 0:
            raise UsageError(f"--checkpoint-every: an int >= 0 allowed (got {self.checkpoint_every})")
        if self.keep_checkpoints < 1:
            raise UsageError(f"--keep-checkpoints: an int >= 1 allowed (got {self.keep_checkpoints})")
        if self.hidden_sizes is not None and (not self.hidden_sizes or min(self.hidden_sizes) < 1):
            raise UsageError(f"--hidden-sizes: one or more positive ints allowed (got {list(self.hidden_sizes)})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainPPO(RunOptions):
    """Train PPO with remote env runners: sample, update, send the weights back, until the target
    return (the mean of the last stop_window finished episodes) or the budget."""

    training: Annotated[PPOTrainingConfig, tyro.conf.arg(name="")] = dataclasses.field(
        default_factory=PPOTrainingConfig
    )
    """The PPO training config (learner.train.PPOTrainingConfig)."""

    algo = "ppo"
    command_name = "train"

    def to_config(self) -> PPOTrainingConfig:
        """The training config with the run options (env, seed, hidden sizes, and for a multi-agent
        env the policy mapping) applied."""
        cfg = self.training
        ppo = cfg.ppo if self.seed is None else dataclasses.replace(cfg.ppo, seed=self.seed)
        runner, group = _with_runner_options(self, cfg.env_runner), _with_group_options(self, cfg.env_runner_group)
        runner, group = self.external.apply(_with_multi_agent(self, runner), group)
        return dataclasses.replace(cfg, env_runner=runner, env_runner_group=group, ppo=ppo)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainDQN(RunOptions):
    """Train DQN: env runners send their chunks straight to a replay actor, learners pull batches
    from it, until the target return (the mean of the last stop_window finished episodes) or the
    budget."""

    training: Annotated[DQNTrainingConfig, tyro.conf.arg(name="")] = dataclasses.field(
        default_factory=DQNTrainingConfig
    )
    """The DQN training config (learner.train_dqn.DQNTrainingConfig)."""

    algo = "dqn"
    command_name = "train-dqn"

    def to_config(self) -> DQNTrainingConfig:
        """The training config with the run options (env, seed, hidden sizes, and for a multi-agent
        env the policy mapping) applied."""
        cfg = self.training
        replay = cfg.replay if self.seed is None else dataclasses.replace(cfg.replay, seed=self.seed)
        runner, group = _with_runner_options(self, cfg.env_runner), _with_group_options(self, cfg.env_runner_group)
        runner, group = self.external.apply(_with_multi_agent(self, runner), group)
        return dataclasses.replace(cfg, env_runner=runner, env_runner_group=group, replay=replay)


def _with_runner_options(options: RunOptions, runner: Any) -> Any:
    module_config = dict(runner.module_config)
    if options.seed is not None:
        module_config["seed"] = options.seed
    if options.hidden_sizes is not None:
        module_config["hidden_sizes"] = tuple(options.hidden_sizes)
    seed = {} if options.seed is None else {"seed": options.seed}
    env_config = {**runner.env_config, **options.env_config_dict()}
    return dataclasses.replace(runner, env=options.env, env_config=env_config, module_config=module_config, **seed)


def _with_multi_agent(options: RunOptions, runner: Any) -> Any:
    """``runner`` with the policy mapping of ``--policy-mapping`` for a multi-agent env; UsageError for
    ``--policy-mapping`` on a single-agent env, or a mapping that is not one."""
    if options.global_state != "concat" and not options.centralized_critic:
        raise UsageError(f"--global-state {options.global_state}: only with --centralized-critic")
    agents = check_env_builds(options.env, runner.env_config, multi_agent_ok=True)
    if agents is None:
        given = "--policy-mapping" if options.policy_mapping is not None else None
        given = given or ("--centralized-critic" if options.centralized_critic else None)
        if given is not None:
            raise UsageError(f"{given}: only a multi-agent env takes it (--env {options.env!r} is single-agent)")
        return runner
    try:
        mapping = policy_mapping(options.policy_mapping or "by-spaces", list(agents), agent_spaces=agents)
        mapping = dataclasses.replace(
            mapping, centralized_critic=options.centralized_critic or mapping.centralized_critic,
            global_state=options.global_state if options.centralized_critic else mapping.global_state,
        )  # fmt: skip
        return dataclasses.replace(runner, multi_agent=mapping)
    except ConfigError as e:
        raise UsageError(f"--global-state: {e}" if "global_state" in str(e) else str(e)) from None


def _with_group_options(options: RunOptions, group: EnvRunnerGroupConfig) -> EnvRunnerGroupConfig:
    return group if options.env_check else dataclasses.replace(group, check_env=False)


Command = TypeVar("Command", TrainPPO, TrainDQN)


def _last_value(args: list[str], flag: str) -> str | None:
    """The value the last ``flag VALUE`` or ``flag=VALUE`` in ``args`` gives (None: none)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _default_config(cls: type[TrainPPO] | type[TrainDQN], env: str) -> Any:
    """The training config's defaults for ``env``, without a preset."""
    cfg = PPOTrainingConfig() if cls is TrainPPO else DQNTrainingConfig()
    return dataclasses.replace(cfg, env_runner=dataclasses.replace(cfg.env_runner, env=env))


def _base_config(cls: type[TrainPPO] | type[TrainDQN], env: str) -> Any:
    """The training config's defaults for ``env``, with the env's preset applied."""
    cfg = _default_config(cls, env)
    return ppo_preset(env, cfg) if cls is TrainPPO else cfg


def _has_preset(command: TrainPPO | TrainDQN) -> bool:
    """Whether the command's config was built on its env's preset (a resumed run's comes whole from
    its config.toml, which no preset changes)."""
    return isinstance(command, TrainPPO) and has_preset(command.env) and command.resume is None


def preset_line(command: TrainPPO | TrainDQN) -> str | None:
    """The line that tells a run on an env with a preset the values the preset sets (those the flags
    or ``--config`` changed marked so); None for a run without one."""
    if not _has_preset(command):
        return None
    plain = _default_config(type(command), command.env)
    changes = changed_options(plain, ppo_preset(command.env, plain), final=command.training)
    sets = ", ".join(changes)
    return f"preset {command.env} (learner/presets.py) sets: {sets}; your flags and --config override it"


def target_hint(command: TrainPPO | TrainDQN, result: TrainResult) -> str | None:
    """A line for a run that had a target and missed it (exit status 1): where the target came from,
    and how to run the budget without one; None for any other run."""
    if result.target_return is None or result.reached:
        return None
    cfg = command.training
    if cfg.target_return == "auto":
        source = f"{command.env}'s reward_threshold"
    elif _has_preset(command) and cfg.target_return == _base_config(type(command), command.env).target_return:
        source = f"the {command.env} preset's"
    else:
        source = "from --target-return or --config"
    return (
        f"hint: the run had a target return ({result.target_return:g}, {source}) and missed it, hence exit "
        "status 1; --target-return none runs the budget without a target"
    )


def command_from_args(cls: type[Command], args: list[str], *, prog: str) -> Command:
    """The command ``cls`` from the command line ``args``: the config's defaults for the env, then
    the ``--config`` file's options, then the flags. UsageError (one line) for anything wrong."""
    config_path = _last_value(args, "--config")
    resume = _last_value(args, "--resume")
    if resume is not None and config_path is not None:
        raise UsageError("--resume: a resumed run takes its run directory's config.toml, not --config")
    if resume is not None:
        if not (Path(resume) / "config.toml").is_file():
            raise UsageError(f"--resume: a run directory with a config.toml is allowed (got {resume!r})")
        config_path = str(Path(resume) / "config.toml")
    try:
        file_flags = config_file_flags(read_toml(Path(config_path)), cls) if config_path else []
    except UsageError as e:
        if resume is None:
            raise
        raise UsageError(f"--resume: {resume!r} is not a run of this command ({e})") from None
    env = _last_value(file_flags + args, "--env") or DEFAULT_ENV
    if any(a in ("-h", "--help", "--help-all") for a in args):
        env = env if env in gym.registry else DEFAULT_ENV
    else:
        args, env = rewrite_external_args(args, env, lambda flag: _last_value(file_flags + args, flag))
        if env == EXTERNAL_SPACES_ENV:  # a run of the first client's spaces (resumed, or just received)
            register_external_spaces()
        check_env_name(env)
    default = cls(env=env, training=_base_config(cls, env))
    # The file's env config and the flags' merge, key by key (the flags' last).
    flags = gather_env_config(file_flags + args)
    return parse(cls, flags, default=default, prog=prog, description=cls.__doc__ or "")


def local_cpus() -> int:
    """CPUs of the Ray cluster a command starts in this process."""
    return max(os.cpu_count() or 1, 2)


def check_fits_locally(command: TrainPPO | TrainDQN, cfg: PPOTrainingConfig | DQNTrainingConfig) -> None:
    """UsageError before Ray starts if the run starts its own Ray and its actors can never fit it
    (an attached cluster is checked once attached: ``check_training_resources``)."""
    import ray

    if (command.address or os.environ.get("RAY_ADDRESS", "") or "local") != "local" or ray.is_initialized():
        return  # attached, or a Ray Tune trial (its placement group holds the actors' resources)
    cpus = {"CPU": float(local_cpus())}
    demands = training_demands(cfg.env_runner_group, cfg.num_learners, cfg.num_cpus_per_learner, cfg.evaluation)
    reason = never_fits(demands, cpus, [cpus])
    if reason is not None:
        raise UsageError(
            f"cannot place the actors on the local Ray cluster: {reason} (lower the options named, "
            "or attach to a larger cluster with --address)"
        )


def check_optimizer(command: TrainPPO | TrainDQN, cfg: PPOTrainingConfig | DQNTrainingConfig) -> None:
    """ConfigError for the settings an asynchronous optimizer's loop refuses, before Ray starts."""
    if isinstance(cfg, PPOTrainingConfig) and cfg.optimizer is not Optimizer.SYNC_SAMPLES:
        (check_async if cfg.optimizer is Optimizer.ASYNC_SAMPLES else check_async_gradients)(cfg)


def check_module_builds(command: TrainPPO | TrainDQN, cfg: PPOTrainingConfig | DQNTrainingConfig) -> None:
    """UsageError before Ray starts if the algorithm's module cannot be built for the env's spaces
    (DQN on continuous actions, say)."""
    check_env_builds(command.env, cfg.env_runner.env_config, multi_agent_ok=True)
    multi_agent = cfg.env_runner.multi_agent
    if multi_agent is not None:
        _check_multi_agent_flags(command, cfg, multi_agent)
    try:
        if multi_agent is not None:
            build_multi_rl_module(cfg.env_runner)
        else:
            build_module(cfg.env_runner, *env_spaces(command.env, cfg.env_runner.env_config))
    except (ConfigError, SpaceError) as e:
        raise UsageError(f"--env {command.env!r} cannot be trained with {command.algo.upper()}: {e}") from None
    if cfg.evaluation.evaluation_opponent is not None:
        agents = probe_multi_agent(cfg.env_runner)[0] if multi_agent is not None else None
        try:
            check_evaluation_opponent(cfg.evaluation, cfg.env_runner, agents)
        except ConfigError as e:
            raise UsageError(f"--evaluation-opponent: {e}") from None


def _check_same_modules(command: TrainPPO | TrainDQN) -> None:
    """UsageError if a resumed run is given another policy mapping or critic than its config.toml's
    (its checkpoint's modules would not fit)."""
    saved = load_config(command.resume) if command.resume is not None else {}
    for flag, key, now in (
        ("--policy-mapping", "policy_mapping", command.policy_mapping),
        ("--centralized-critic", "centralized_critic", command.centralized_critic),
        ("--global-state", "global_state", command.global_state),
    ):
        before = saved.get(key, False if key == "centralized_critic" else "concat" if key == "global_state" else None)
        if before != now:
            raise UsageError(
                f"{flag}: a resumed run keeps its modules: its config.toml has {before!r}, this command {now!r}"
            )


def _check_multi_agent_flags(command: TrainPPO | TrainDQN, cfg: Any, multi_agent: MultiAgentConfig) -> None:
    """UsageError naming the flag for what a multi-agent run of this command does not take."""
    if isinstance(cfg, DQNTrainingConfig):
        if multi_agent.centralized_critic:
            raise UsageError("--centralized-critic: PPO's only (a value head on the global state; DQN has none)")
        if cfg.replay.prioritized:
            raise UsageError(
                "--replay.prioritized (the default): a multi-agent DQN run samples each module uniformly for now: "
                "pass --replay.no-prioritized"
            )
    if multi_agent.centralized_critic and multi_agent.global_state == "state":
        try:
            probe_multi_agent(cfg.env_runner)
        except ConfigError as e:
            raise UsageError(f"--global-state state: {e}") from None


def run_training(
    command: TrainPPO | TrainDQN,
    *,
    on_record: Callable[[IterationRecord, RunDirectory, Path | None], None] | None = None,
) -> TrainResult:
    """Runs a parsed training command on its Ray cluster, with a progress display and a run
    directory (config.toml, metrics.csv, curve.png); returns what it reached. ``on_record(record,
    run_dir, checkpoint)`` gets each record once its row is in metrics.csv, with the checkpoint
    directory saved at that iteration (None: none was). The run directory is named after the
    algorithm (``appo-CartPole-v1-<time>``); an error before the actors start (the checks on the
    driver, then the runner group's own) leaves no new one behind, and one the user's code raised
    there is one line naming its class and call."""
    with _user_code_errors(command):  # the driver's checks, before Ray starts
        cfg, target, resume = _checked(command)
    mark("preflight")
    if command.resume is not None and resume is not None:
        run_dir = RunDirectory.open(command.resume, tensorboard=command.tensorboard)  # it keeps its name
        run_dir.drop_rows_after(resume.iteration)
    else:
        run_dir = RunDirectory.create(
            command.runs_dir, algorithm_of(cfg).lower(), command.env, config_of(command),
            tensorboard=command.tensorboard,
        )  # fmt: skip
    is_started = [False]  # whether the actors started; before, a new run directory goes with the error
    try:
        result = _train_in(command, cfg, run_dir, target, resume, on_record, is_started=is_started)
    except Exception:
        if resume is None and not is_started[0]:
            shutil.rmtree(run_dir.path, ignore_errors=True)
        raise
    hint = target_hint(command, result)
    if hint is not None:  # on stderr, beside Ray's own lines: stdout keeps the run's record
        print(hint, file=sys.stderr, flush=True)
    return result


def _checked(command: TrainPPO | TrainDQN) -> tuple[Any, float | None, Any]:
    """The command's training config, target and checkpoint to resume (None: a new run), once every
    check before Ray starts passed (UsageError or ConfigError otherwise)."""
    cfg = command.to_config()
    if (command.address or os.environ.get("RAY_ADDRESS", "") or "local") == "local":  # a Ray of this machine's
        check_ports_free(command.external, cfg.env_runner_group.num_env_runners)
    check_optimizer(command, cfg)
    check_module_builds(command, cfg)
    check_fits_locally(command, cfg)
    multi_agent = cfg.env_runner.multi_agent
    if (
        command.env_check and multi_agent is None and not command.external.serve
    ):  # here, before Ray starts; the runner group need not check it again
        runner = cfg.env_runner
        check_env(
            command.env,
            runner.env_config,
            seed=runner.seed,
            max_episode_steps=env_time_limit(runner),
            tolerate_errors=runner.restart_failed_sub_environments,
        )
        cfg = dataclasses.replace(cfg, env_runner_group=dataclasses.replace(cfg.env_runner_group, check_env=False))
    # A multi-agent env has no spec's reward_threshold: "auto" is no target.
    target = (
        resolve_target(command.env, cfg.target_return, cfg.env_runner.env_config)
        if multi_agent is None
        else target_for(cfg.target_return, None)
    )
    resume = None
    if command.resume is not None:  # checked before Ray starts: a checkpoint of this run's kind
        found = latest_checkpoint(command.resume / "checkpoints")
        if found is None:
            raise UsageError(
                f"--resume: {str(command.resume)!r} has no checkpoint (save some with --checkpoint-every N)"
            )
        _check_same_modules(command)
        resume = load_checkpoint(
            found, algo=command.algo, env=command.env, observation_space=run_observation_space(cfg.env_runner)
        )
    return cfg, target, resume


def _train_in(
    command: TrainPPO | TrainDQN,
    cfg: Any,
    run_dir: RunDirectory,
    target: float | None,
    resume: Any,
    on_record: Callable[[IterationRecord, RunDirectory, Path | None], None] | None,
    *,
    is_started: list[bool],
) -> TrainResult:
    """``run_training``'s run in ``run_dir``, on its Ray cluster; ``is_started[0]`` is set once the
    actors are up (the runner group's own checks passed)."""
    checkpointer = None
    if command.checkpoint_every:
        checkpointer = Checkpointer(
            run_dir.path / "checkpoints", every=command.checkpoint_every, keep=command.keep_checkpoints
        )
    attached = (command.address or os.environ.get("RAY_ADDRESS", "") or "local") != "local"
    runtime_env, shipped = job_runtime_env(command, attached=attached, output_dirs=(command.runs_dir,))
    cluster = ray_cluster(command.address, num_cpus=local_cpus(), verbose=command.verbose, runtime_env=runtime_env)
    multi_agent = cfg.env_runner.multi_agent
    with run_dir, cluster as where:
        mark("ray_init")
        num_runners = cfg.env_runner_group.num_env_runners
        runners = f"{num_runners} env runner{'' if num_runners == 1 else 's'}"
        spaces = "the first client's spaces" if command.env == EXTERNAL_SPACES_ENV else f"{command.env}'s spaces"
        on = (
            f"external clients with {spaces}, {runners}"
            if command.external.serve
            else f"{command.env}, {runners} x {cfg.env_runner.num_envs_per_env_runner} sub-envs"
        )
        shipped_note = f"; {shipped}" if shipped else ""
        print(f"ray-sampler {command.command_name}: {algorithm_of(cfg)} on {on} ({where}{shipped_note})", flush=True)
        preset = preset_line(command)
        if preset is not None:
            print(preset, flush=True)
        if multi_agent is not None:
            print(modules_line(multi_agent), flush=True)
        if command.external.serve:
            print(addresses_line(command.external, cfg.env_runner_group.num_env_runners), flush=True)
        tracker = ReturnTracker(target, cfg.stop_window)
        tracker.stop_on_evaluation = cfg.stop_on is StopOn.EVALUATION
        stop_rule = tracker.describe()
        print(f"{stop_rule}\n{budget_line(cfg)}\nrun directory: {run_dir.path}", flush=True)
        if resume is not None:
            print(f"resumed from iteration {resume.iteration} ({resume.env_steps} env steps)", flush=True)
        progress = TrainingProgress(
            sys.stdout,
            plain=True if command.plain else None,
            total_env_steps=cfg.max_env_steps,
            total_iterations=getattr(cfg, "max_iterations", None),
        )
        last: list[IterationRecord] = []  # only the latest record: a run's records stay in metrics.csv
        evaluated: dict[str, float] = {}  # the latest evaluation's fields (empty: none yet)
        saved = [latest_checkpoint(run_dir.path / "checkpoints")]  # the newest checkpoint reported

        def on_iteration(record: IterationRecord) -> None:
            if not last:
                mark("first_iteration")
            last[:] = [record]
            if not math.isnan(record.evaluation.get("episode_return_mean", math.nan)):
                evaluated.clear()
                evaluated.update(record.evaluation)
            run_dir.append(record)
            progress.update(record)
            if on_record is not None:
                found = latest_checkpoint(run_dir.path / "checkpoints")
                on_record(record, run_dir, found if found != saved[0] else None)
                saved[0] = found

        loop_options: dict[str, Any] = {
            "log": progress.log,
            "on_iteration": on_iteration,
            "checkpointer": checkpointer,
            "resume": resume,
            "policy_dir": run_dir.path / "policy",
        }
        with progress:
            try:
                steps: Generator[IterationRecord | None, None, Any] = (
                    ppo_iterations(cfg, **loop_options)
                    if isinstance(cfg, PPOTrainingConfig)
                    else dqn_iterations(cfg, **loop_options)
                )
                with _user_code_errors(command):
                    next(steps)  # the runner group checks the env and module on the driver, then the actors start
                is_started[0] = True
                mark("actors")
                result: TrainResult = run_to_end(steps)
                mark("loop")
            except KeyboardInterrupt:  # the actors are stopped: the curve so far and what was done
                notes = (*_policy_note(run_dir.path), run_dir.close(target_return=target))
                summary = RunSummary.of(
                    None, last[0] if last else None, run_dir=run_dir.path, notes=notes, evaluation=evaluated
                )
                progress.close(summary)
                raise
            notes = (*_policy_note(run_dir.path), run_dir.close(target_return=target))
            summary = RunSummary.of(
                result, last[0] if last else None, run_dir=run_dir.path, notes=notes,
                stopped_by=stopped_by_line(cfg, result), evaluation=evaluated,
                stop_on_evaluation=cfg.stop_on is StopOn.EVALUATION,
            )  # fmt: skip
            progress.close(summary)
    return result


def _policy_note(run_dir: Path) -> tuple[str, ...]:
    """The summary's line on the final policy (none if the loop could not write it: it logged why)."""
    if not (run_dir / "policy" / POLICY_FILE).is_file():
        return ()
    return (f"policy: {run_dir / 'policy'} (ray-sampler evaluate {run_dir})",)


def algorithm_of(cfg: PPOTrainingConfig | DQNTrainingConfig) -> str:
    """The algorithm a training config runs, by its usual name (PPO, A2C, APPO, IMPALA, DQN)."""
    if isinstance(cfg, PPOTrainingConfig):
        return algorithm_name(Optimizer(cfg.optimizer), cfg.ppo.policy_loss)
    return "DQN"


def budget_line(cfg: PPOTrainingConfig | DQNTrainingConfig) -> str:
    """The run's budgets and what one of its iterations is, for its first lines.

    >>> budget_line(PPOTrainingConfig(optimizer="async_samples", max_iterations=600))
    'budget: 600 iterations or 500,000 env steps, the first reached; an iteration: one update on one 512-step fragment'
    """
    budgets = []
    max_iterations = getattr(cfg, "max_iterations", None)
    if max_iterations is not None:
        budgets.append(f"{max_iterations:,} iterations")
    if cfg.max_env_steps is not None:
        budgets.append(f"{cfg.max_env_steps:,} env steps")
    if cfg.max_time_s is not None:
        budgets.append(f"{cfg.max_time_s:g} s")
    words = budgets[0] if len(budgets) == 1 else f"{', '.join(budgets[:-1])} or {budgets[-1]}, the first reached"
    return f"budget: {words}; an iteration: {iteration_meaning(cfg)}"


def iteration_meaning(cfg: PPOTrainingConfig | DQNTrainingConfig) -> str:
    """What one iteration (a row of metrics.csv) of ``cfg``'s loop is."""
    runner, group = cfg.env_runner, cfg.env_runner_group
    fragment = runner.rollout_fragment_length * runner.num_envs_per_env_runner
    if isinstance(cfg, DQNTrainingConfig):
        return "one progress report (about one a second; the runners send every step to the replay)"
    if cfg.optimizer is Optimizer.ASYNC_SAMPLES:
        return f"one update on one {fragment:,}-step fragment"
    if cfg.optimizer is Optimizer.ASYNC_GRADIENTS:
        return f"one gradient of one {fragment:,}-step fragment applied"
    if runner.batch_mode is BatchMode.COMPLETE_EPISODES:
        return f"one update on complete episodes of at least {fragment * group.num_env_runners:,} env steps"
    return f"one update on a {fragment * group.num_env_runners:,}-step batch from every runner"


def stopped_by_line(cfg: PPOTrainingConfig | DQNTrainingConfig, result: TrainResult) -> str:
    """What ended a run that returned, for its summary (empty: not recorded).

    >>> from learner.metrics import TrainResult
    >>> done = TrainResult(reached=False, mean_return=1.0, env_steps=1, seconds=1.0, stopped_by="max_env_steps")
    >>> stopped_by_line(PPOTrainingConfig(max_env_steps=4096), done)
    '--max-env-steps 4,096 (the first budget reached)'
    """
    if result.stopped_by is None:
        return ""
    reason = StopReason(result.stopped_by)
    if reason is StopReason.TARGET_RETURN:
        return "the target return"
    value = getattr(cfg, reason.value)
    flag = "--" + reason.value.replace("_", "-")
    return f"{flag} {value:,} (the first budget reached)" if isinstance(value, int) else f"{flag} {value:g}"


@contextlib.contextmanager
def _user_code_errors(command: TrainPPO | TrainDQN) -> Iterator[None]:
    """An error that the user's code (an env, a module, a policy mapping) raised in the checks before
    the actors start, as one UsageError line naming its class and call (``--env 'my_env:Broken':
    Broken.reset() raised ValueError: ...``); the library's own errors pass as they are."""
    try:
        yield
    except Exception as e:
        if isinstance(e, ConfigError) and not isinstance(e, EnvCheckError):
            raise  # one line already (a creator that failed names itself)
        found = _user_frame(e)
        if found is None:
            raise
        call, raised = found
        message = str(raised).splitlines()[0] if str(raised) else ""
        flag = "--policy-mapping" if _is_mapping_call(command, call) else "--env"
        given = command.policy_mapping if flag == "--policy-mapping" else command.env
        said = f"{call}() raised {type(raised).__name__}" + (f": {message}" if message else "")
        raise UsageError(f"{flag} {given!r}: {said}") from e


_NOT_USER_CODE = tuple(
    {str(Path(__file__).resolve().parents[2] / name) for name in ("ray_sampler", "learner", "connectors", "replay")}
    | {str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "purelib", "platlib")}
)
"""Where the library, the standard library and installed packages live: a frame elsewhere is the user's."""


def _user_frame(error: BaseException) -> tuple[str, BaseException] | None:
    """(``Class.method``, the exception it raised) of the outermost frame of user code in ``error``'s
    traceback or those it was raised from or during; None if none ran user code."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for frame, _ in traceback.walk_tb(current.__traceback__):
            file = frame.f_code.co_filename
            if not file.startswith("<") and not str(Path(file).resolve()).startswith(_NOT_USER_CODE):
                return frame.f_code.co_qualname.rpartition("<locals>.")[2], current
        current = current.__cause__ or current.__context__
    return None


def _is_mapping_call(command: TrainPPO | TrainDQN, call: str) -> bool:
    """Whether ``call`` is of the ``--policy-mapping module:Name`` object (a class or a function named so)."""
    mapping = command.policy_mapping or ""
    name = mapping.partition(":")[2]
    return bool(name) and call.split(".")[0] == name


def modules_line(multi_agent: MultiAgentConfig) -> str:
    """The run's modules, for its first lines: each one, and whether it learns."""
    trained = multi_agent.trained_module_ids
    table = multi_agent.policy_mapping_fn.table if isinstance(multi_agent.policy_mapping_fn, AgentTable) else {}
    parts = []
    for mid in multi_agent.module_ids:
        agents = [str(a) for a, m in table.items() if m == mid]
        parts.append(mid + (f" ({', '.join(agents)})" if agents else "") + ("" if mid in trained else " (frozen)"))
    why = "; a module per distinct pair of spaces" if table else ""
    return f"modules: {', '.join(parts)}{why}; summed return over every agent, and per module"


def config_of(command: TrainPPO | TrainDQN) -> dict[str, Any]:
    """The command's full resolved options as nested tables (a run directory's config.toml)."""
    training = to_toml_dict(command.training)
    return {**to_toml_dict(command, skip=("training", "config", "resume")), **training}
