"""Ray Tune trials of the training loops: the trainables behind ``ray_sampler.tune`` and
``ray-sampler tune`` (the module docstring of ``ray_sampler.tune`` says what a trial does).

A trial's config maps the dotted keys of a run's ``config.toml`` to values; the trial runs the
training command with them, reports each ``metrics.csv`` row, hands each checkpoint to Tune and
resumes from Tune's checkpoint. ``MUTABLE`` names the options population-based training may change
mid-run.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from learner.metrics import IterationRecord
from ray_sampler.cli.options import HELP_ALL, config_file_flags
from ray_sampler.cli.run_dir import RunDirectory, write_config
from ray_sampler.cli.train import (
    TrainDQN,
    TrainPPO,
    check_module_builds,
    check_optimizer,
    command_from_args,
    config_of,
    run_training,
)
from ray_sampler.errors import ConfigError
from ray_sampler.resources import Demand, lend_bundles, never_fits
from ray_sampler.sampling.placement import runner_demand

__all__ = [
    "ALGOS",
    "MUTABLE",
    "check_mutations",
    "check_param_space",
    "command_of",
    "trainable",
    "trial_resources",
    "tuner",
]

ALGOS: dict[str, type[TrainPPO] | type[TrainDQN]] = {"ppo": TrainPPO, "dqn": TrainDQN}
"""The training loops a trial can run, by name: the commands ``train`` and ``train-dqn``."""

MUTABLE: dict[str, tuple[str, ...]] = {
    "ppo": (
        "ppo.lr",
        "ppo.entropy_coeff",
        "ppo.clip_param",
        "ppo.vf_coeff",
        "ppo.vf_clip_param",
        "ppo.grad_clip",
        "ppo.gamma",
        "ppo.lambda_",
        "ppo.num_epochs",
        "ppo.minibatch_size",
    ),
    "dqn": (
        "dqn.lr",
        "dqn.gamma",
        "dqn.target_update_every",
        "dqn.huber_delta",
        "dqn.grad_clip",
        "batch_size",
        "updates_per_env_step",
    ),
}
"""The options a trial may change mid-run (population-based training's mutations), by algorithm.
Each is read from the config at every update and none is in a checkpoint: the optimizer's step
size comes from ``lr`` (its moments from the checkpoint), PPO computes advantages from each batch's
rewards with ``gamma`` and ``lambda_``, and DQN's n-step targets use ``gamma`` as each batch is
drawn from the replay, which keeps the raw rewards. Everything else (the model, the observation
filter, the runners, the seeds, the exploration schedule) is fixed for a run's life."""

DRIVER_BUNDLE = {"CPU": 1.0}
"""Bundle 0 of a trial's placement group: the trial's own process (the driver of its run)."""

RESTORED_PREFIX = "restored-"
"""A trial's run directory rebuilt from a Tune checkpoint: ``restored-<ns since the epoch>-<random>``."""
RUN_FOLDER = "run"
"""In a Tune checkpoint: the run directory's config.toml, metrics.csv and one checkpoint."""


def _command_class(algo: str) -> type[TrainPPO] | type[TrainDQN]:
    if algo not in ALGOS:
        raise ConfigError(f"'algo' must be one of {sorted(ALGOS)} (got {algo!r})")
    return ALGOS[algo]


def _nested(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"ppo.lr": 1e-3}`` -> ``{"ppo": {"lr": 1e-3}}``."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"a trial config's keys are option paths such as 'ppo.lr' (got {key!r})")
        *tables, name = key.split(".")
        table = out
        for part in tables:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{key!r}: {part!r} is an option, not a table of options")
        table[name] = value
    return out


def command_of(algo: str, config: Mapping[str, Any], *extra: str) -> TrainPPO | TrainDQN:
    """The training command a trial of ``algo`` with ``config`` runs (``extra``: more flags);
    the command's one-line ConfigError (a UsageError) for a key that is no option or a bad value."""
    cls = _command_class(algo)
    see = f"see ray-sampler {cls.command_name} {HELP_ALL}"
    flags = [*config_file_flags(_nested(config), cls, source="trial config", see=see), *extra]
    prog = f"ray_sampler.tune ({algo})"
    return (
        command_from_args(TrainPPO, flags, prog=prog)
        if cls is TrainPPO
        else command_from_args(TrainDQN, flags, prog=prog)
    )


def check_mutations(algo: str, mutations: Mapping[str, Any]) -> None:
    """ConfigError (one line) for a mutation of an option that cannot change mid-run (``MUTABLE``)."""
    _command_class(algo)
    for key in mutations:
        if key not in MUTABLE[algo]:
            raise ConfigError(
                f"'{key}' cannot change mid-run, so population-based training may not mutate it "
                f"(mutable for {algo}: {', '.join(MUTABLE[algo])})"
            )


def _bundles(command: TrainPPO | TrainDQN) -> list[dict[str, float]]:
    cfg = command.to_config()
    runner = {r: float(v) for r, v in runner_demand(cfg.env_runner_group, 1).bundle.items() if v > 0}
    learner = {"CPU": float(cfg.num_cpus_per_learner)} if cfg.num_cpus_per_learner > 0 else {}
    learners = [learner] * cfg.num_learners if learner else []
    return [dict(DRIVER_BUNDLE), *[dict(runner)] * cfg.env_runner_group.num_env_runners, *learners]


def trial_resources(algo: str, config: Mapping[str, Any]) -> Any:
    """The placement group factory of one trial: the trial, its runners and its learner actors."""
    from ray import tune

    command = command_of(algo, config)
    return tune.PlacementGroupFactory(_bundles(command), strategy="PACK")


def _samples(value: Any) -> list[Any]:
    """The values of a search-space entry to check: every grid value and choice, one sample of
    another domain."""
    from ray.tune.search.sample import Categorical, Domain

    if isinstance(value, Mapping) and set(value) == {"grid_search"}:
        return list(value["grid_search"])
    if isinstance(value, Categorical):
        return list(value.categories)
    if isinstance(value, Domain):
        return [value.sample()]
    return [value]


def check_param_space(algo: str, param_space: Mapping[str, Any]) -> None:
    """The one-line ConfigError a trial of this space would raise, before any starts: each key an
    option, each grid value and choice and one sample of each other domain accepted; and, with Ray running, a trial
    whose placement group can never fit the cluster refused."""
    if not isinstance(param_space, Mapping):
        raise ConfigError(f"'param_space' must be a dict of option paths to values (got {type(param_space).__name__})")
    keys = list(param_space)
    choices = [_samples(param_space[k]) for k in keys]
    configs = [{k: c[0] for k, c in zip(keys, choices, strict=True)}]
    for i, key in enumerate(keys):  # each value of each key, the others at their first
        configs += [{**configs[0], key: v} for v in choices[i][1:]]
    import ray

    for config in configs:
        command = command_of(algo, config)
        check_optimizer(command, command.to_config())
        check_module_builds(command, command.to_config())
        if ray.is_initialized():
            bundles = _bundles(command)
            totals = {k: float(v) for k, v in ray.cluster_resources().items()}
            nodes = [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
            demands = [Demand(f"trial bundle {i}", 1, b) for i, b in enumerate(bundles)]
            reason = never_fits([Demand("one trial", 1, _sum(bundles))], totals, nodes) or never_fits(
                demands, totals, nodes
            )
            if reason is not None:
                raise ConfigError(f"a trial of {dict(config)} can never be placed: {reason}")


def _sum(bundles: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for bundle in bundles:
        for r, v in bundle.items():
            out[r] = out.get(r, 0.0) + v
    return out


def trainable(algo: str) -> Any:
    """The Ray Tune trainable of ``algo`` (``"ppo"`` or ``"dqn"``), with its per-trial resources
    (see the module docstring)."""
    from ray import tune

    _command_class(algo)

    def run(config: dict[str, Any]) -> None:
        _run_trial(algo, config)

    run.__name__ = run.__qualname__ = f"ray_sampler_{algo}"
    return tune.with_resources(run, lambda config: trial_resources(algo, config))


def tuner(algo: str, param_space: Mapping[str, Any], **kwargs: Any) -> Any:
    """``tune.Tuner(trainable(algo), param_space=param_space, **kwargs)`` once ``check_param_space`` passed."""
    from ray import tune

    check_param_space(algo, param_space)
    return tune.Tuner(trainable(algo), param_space=dict(param_space), **kwargs)


def _run_trial(algo: str, config: dict[str, Any]) -> None:
    """One trial: its run (resumed from Tune's checkpoint if it has one), reporting every row."""
    import ray
    from ray import tune

    trial_dir = Path(tune.get_context().get_trial_dir())
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        command = command_of(algo, config, "--runs-dir", str(trial_dir), "--plain")
    else:
        # Named in start order (``trial_run_dir`` takes the newest): Tune's copy of a trial's files
        # does not keep their times
        restored = Path(tempfile.mkdtemp(prefix=f"{RESTORED_PREFIX}{time.time_ns():020d}-", dir=trial_dir))
        with checkpoint.as_directory() as saved:
            shutil.copytree(Path(saved) / RUN_FOLDER, restored, dirs_exist_ok=True)
        command = command_of(algo, config, "--resume", str(restored), "--plain")
        # Population-based training may have handed this trial another trial's checkpoint with
        # mutated options: the run directory says what runs from here.
        write_config(restored, config_of(command))
    group = ray.util.get_current_placement_group()
    if group is not None:  # its bundles past the trial's own: the runners' and the learners'
        lend_bundles(group, {i: spec for i, spec in enumerate(group.bundle_specs) if i > 0})
    try:
        run_training(command, on_record=_report)
    finally:
        lend_bundles(None, None)


def _report(record: IterationRecord, run_dir: RunDirectory, saved: Path | None) -> None:
    """``tune.report`` of ``record``'s metrics.csv row, with the checkpoint saved at it (if any)."""
    from ray import tune

    row = run_dir.row(record)
    if saved is None:
        tune.report(row)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / RUN_FOLDER
        (folder / "checkpoints").mkdir(parents=True)
        for name in ("config.toml", "metrics.csv"):
            shutil.copy2(run_dir.path / name, folder / name)
        shutil.copytree(saved, folder / "checkpoints" / saved.name)
        tune.report(row, checkpoint=tune.Checkpoint.from_directory(tmp))
