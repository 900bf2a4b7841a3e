"""``ray-sampler tune``: a sweep of training trials with Ray Tune, from a TOML file.

    algo = "ppo"                      # ppo (the train command's loop) or dqn (train-dqn's)
    num_samples = 2                   # trials per point of the grid
    scheduler = "asha"                # fifo, asha or pbt

    [config]                          # every trial's options, as in a run's config.toml
    max_iterations = 30
    target_return = 200.0

    [space]                           # the searched options: one domain each
    ppo.lr = { loguniform = [1e-4, 1e-2] }
    ppo.entropy_coeff = { choice = [0.0, 0.01] }

    [asha]
    grace_period = 4

The sweep's directory (``--sweeps-dir``/``--name``) holds ``sweep.toml`` (the file as run), Tune's
experiment state, one directory per trial with the trial's run directory in it, ``summary.csv``
(every trial, best first) and ``curves.png`` (every trial's learning curve). Ctrl-C stops the
trials and keeps the state; ``--resume DIR`` goes on with it. See docs/tune.md.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import tomli_w

from learner.evaluation_loop import EVALUATION_KEYS
from learner.metrics import IterationRecord
from learner.train import PPOTrainingConfig, budget_used
from learner.train_dqn import DQNTrainingConfig
from ray_sampler.cli.curve import draw_curves
from ray_sampler.cli.options import UsageError
from ray_sampler.cli.ray_cluster import ray_cluster
from ray_sampler.cli.run_dir import EVALUATION_PREFIX, load_config, read_metrics
from ray_sampler.cli.train import TrainDQN, TrainPPO, config_of, job_runtime_env, local_cpus
from ray_sampler.cli.trials import (
    RESTORED_PREFIX,
    check_mutations,
    check_param_space,
    command_of,
    trainable,
    trial_resources,
)
from ray_sampler.errors import ConfigError
from ray_sampler.suggest import did_you_mean

__all__ = [
    "DOMAINS",
    "SCHEDULERS",
    "SUMMARY_FILE",
    "SWEEP_FILE",
    "ClampToRange",
    "Sweep",
    "TuneCommand",
    "all_trials_fit",
    "check_scheduler",
    "check_sweep_file",
    "read_sweep",
    "run_sweep",
]

DOMAINS = ("choice", "grid", "uniform", "loguniform", "quniform", "randint", "lograndint")
"""A searched option's forms in ``[space]``: ``{ loguniform = [1e-4, 1e-2] }`` and so on."""
SCHEDULERS = ("fifo", "asha", "pbt")
SWEEP_FILE = "sweep.toml"
"""In the sweep's directory: the sweep file as run (``--resume`` reads it)."""
SUMMARY_FILE = "summary.csv"
CURVES_FILE = "curves.png"
TIME_ATTRS = ("iteration", "env_steps", "elapsed_s")
"""What a scheduler counts time in: metrics.csv columns that grow."""
_TOP_KEYS = (
    "algo",
    "metric",
    "mode",
    "num_samples",
    "scheduler",
    "max_concurrent_trials",
    "max_failures",
    "seed",
    "config",
    "space",
    "asha",
    "pbt",
)
_ASHA_KEYS = ("time_attr", "max_t", "grace_period", "reduction_factor")
_PBT_KEYS = ("time_attr", "perturbation_interval", "quantile_fraction", "resample_probability", "mutations")
_METRIC_COLUMNS = tuple(
    f.name
    for f in dataclasses.fields(IterationRecord)
    if f.name not in ("losses", "returns_by", "evaluation", "asynchronous", "outcomes", "is_zero_sum")
)
_EVALUATION_COLUMNS = tuple(f"{EVALUATION_PREFIX}{key}" for key in EVALUATION_KEYS)
"""A sweep whose trials evaluate (``evaluation.evaluation_interval`` >= 1 in ``[config]``) may rank them by these."""


def _evaluation_interval(config: Any) -> int:
    """The ``evaluation.evaluation_interval`` a sweep file's ``[config]`` sets (0: none)."""
    table = config.get("evaluation", {}) if isinstance(config, dict) else {}
    value = table.get("evaluation_interval", 0) if isinstance(table, dict) else 0
    if isinstance(config, dict) and "evaluation.evaluation_interval" in config:
        value = config["evaluation.evaluation_interval"]
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sweep:
    """A sweep file's contents, checked (``read_sweep``). Option keys are dotted (``"ppo.lr"``)."""

    algo: str
    metric: str = "return_mean"
    mode: str = "max"
    num_samples: int = 1
    scheduler: str = "fifo"
    max_concurrent_trials: int = 0
    max_failures: int = 2
    seed: int | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    space: dict[str, Any] = dataclasses.field(default_factory=dict)
    asha: dict[str, Any] = dataclasses.field(default_factory=dict)
    pbt: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def time_attr(self) -> str:
        """ASHA counts in the trials' budget's unit (dqn: env steps); PBT in iterations."""
        if self.scheduler == "asha":
            return str(self.asha.get("time_attr", "iteration" if self.algo == "ppo" else "env_steps"))
        return str(self.pbt.get("time_attr", "iteration"))

    def param_space(self) -> dict[str, Any]:
        """Tune's param_space: the fixed options, then one Tune domain per searched option (and,
        with pbt, a starting value for each mutated option not otherwise given)."""
        space = {**self.config, **{k: _domain(f"space.{k}", v) for k, v in self.space.items()}}
        if self.scheduler == "pbt":
            space.update({k: _domain(f"pbt.mutations.{k}", v) for k, v in self.mutations.items() if k not in space})
        return space

    @property
    def mutations(self) -> dict[str, Any]:
        return dict(self.pbt.get("mutations", {}))

    def to_toml(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: _nest(v) if k in ("config", "space", "asha", "pbt") else v for k, v in out.items() if v is not None}


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *tables, name = key.split(".")
        table = out
        for part in tables:
            table = table.setdefault(part, {})
        table[name] = _nest(value) if isinstance(value, Mapping) and name == "mutations" else value
    return out


def _flat(table: Mapping[str, Any], where: str, *, leaves_are_domains: bool) -> dict[str, Any]:
    """A TOML table of options (``ppo.lr = ...`` or ``"ppo.lr" = ...``) as dotted keys; a table whose
    one key is a domain's name is a leaf."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping) and not value:
            raise UsageError(f"{where}.{key}: an empty table (a value, or a domain: {', '.join(DOMAINS)})")
        if leaves_are_domains and isinstance(value, Mapping) and len(value) == 1:
            ((name, args),) = value.items()
            if name not in DOMAINS and isinstance(args, list):
                hint = did_you_mean(name, DOMAINS)
                raise UsageError(
                    f"{where}.{key}: {name!r} is no domain{'; ' + hint if hint else ''} (allowed: {', '.join(DOMAINS)})"
                )
        if isinstance(value, Mapping) and not (len(value) == 1 and next(iter(value)) in DOMAINS):
            for sub, leaf in _flat(value, f"{where}.{key}", leaves_are_domains=leaves_are_domains).items():
                out[f"{key}.{sub}"] = leaf
            continue
        if leaves_are_domains and not isinstance(value, Mapping):
            raise UsageError(
                f"{where}.{key}: a searched option is one domain, such as {{ loguniform = [1e-4, 1e-2] }} "
                f"(allowed: {', '.join(DOMAINS)}; a fixed value goes under [config]; got {value!r})"
            )
        if not leaves_are_domains and isinstance(value, Mapping):
            raise UsageError(f"{where}.{key}: a fixed value goes here; a domain goes under [space] (got {value!r})")
        out[key] = value
    return out


def _domain(where: str, spec: Mapping[str, Any]) -> Any:
    """The Tune search domain of ``{name: args}``; UsageError naming ``where`` for bad arguments."""
    from ray import tune

    ((name, args),) = spec.items()
    if name in ("choice", "grid"):
        if not isinstance(args, list) or not args:
            raise UsageError(f"{where}: {name} takes a non-empty list of values (got {args!r})")
        return tune.choice(args) if name == "choice" else tune.grid_search(args)
    size = 3 if name == "quniform" else 2
    whole = name in ("randint", "lograndint")
    shape = "[low, high, step]" if size == 3 else "[low, high]"
    kinds = (int,) if whole else (int, float)
    if (
        not isinstance(args, list)
        or len(args) != size
        or not all(isinstance(a, kinds) and not isinstance(a, bool) and math.isfinite(a) for a in args)
        or not args[0] < args[1]
        or (name.startswith("log") and args[0] <= 0)
        or (size == 3 and args[2] <= 0)
    ):
        need = "integers" if whole else "numbers"
        extra = ", low > 0" if name.startswith("log") else ", step > 0" if size == 3 else ""
        raise UsageError(f"{where}: {name} takes {shape} ({need}, low < high{extra}; got {args!r})")
    make: dict[str, Callable[..., Any]] = {
        "uniform": tune.uniform,
        "loguniform": tune.loguniform,
        "quniform": tune.quniform,
        "randint": tune.randint,
        "lograndint": tune.lograndint,
    }
    return make[name](*args)


def _int(where: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UsageError(f"{where} must be an integer >= {minimum} (got {value!r})")
    return value


def _number(where: str, value: Any, low: float, high: float, *, open_low: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value > high or value < low or (open_low and value == low):
        bound = f"> {low:g}" if open_low else f">= {low:g}"
        raise UsageError(f"{where} must be a number {bound} and <= {high:g} (got {value!r})")
    return float(value)


def _table(where: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        raise UsageError(f"{where} must be a table (got {table!r})")
    return dict(table)


def _known(where: str, table: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    for key in _table(where, table):
        if key not in keys:
            hint = did_you_mean(key, keys)
            raise UsageError(f"{where}: unknown key {key!r}{'; ' + hint if hint else ''} (allowed: {', '.join(keys)})")
    return dict(table)


def read_sweep(
    path: Path, *, num_samples: int | None = None, scheduler: str | None = None, flag: str = "--config"
) -> Sweep:
    """The sweep in the TOML file ``path``, with the command line's ``num_samples`` and ``scheduler``
    over the file's; UsageError (one line naming the key) for anything wrong in it."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"{flag}: cannot read {str(path)!r} ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{flag}: {str(path)!r} is not valid TOML ({e})") from None
    data = _known(str(path), data, _TOP_KEYS)
    if "algo" not in data:
        raise UsageError(f"{path}: 'algo' is missing (allowed: ppo, dqn)")
    algo = data["algo"]
    if algo not in ("ppo", "dqn"):
        raise UsageError(f"algo must be ppo or dqn (got {algo!r})")
    metric = data.get("metric", "return_mean")
    evaluates = _evaluation_interval(data.get("config")) >= 1
    if metric in _EVALUATION_COLUMNS and not evaluates:
        raise UsageError(
            f"metric {metric!r}: only a sweep whose trials evaluate has it: set evaluation.evaluation_interval >= 1 "
            "in [config]"
        )
    if metric not in _METRIC_COLUMNS + _EVALUATION_COLUMNS:
        columns = _METRIC_COLUMNS + (_EVALUATION_COLUMNS if evaluates else ())
        hint = did_you_mean(str(metric), columns)
        raise UsageError(
            f"metric: {metric!r} is no metrics.csv column of every run{'; ' + hint if hint else ''} "
            f"(allowed: {', '.join(columns)})"
        )
    mode = data.get("mode", "max")
    if mode not in ("max", "min"):
        raise UsageError(f"mode must be max or min (got {mode!r})")
    chosen = scheduler if scheduler is not None else data.get("scheduler", "fifo")
    if chosen not in SCHEDULERS:
        raise UsageError(f"scheduler must be one of {', '.join(SCHEDULERS)} (got {chosen!r})")
    seed = data.get("seed")
    sweep = Sweep(
        algo=algo,
        metric=metric,
        mode=mode,
        num_samples=_int(
            "--num-samples" if num_samples is not None else "num_samples",
            num_samples if num_samples is not None else data.get("num_samples", 1),
            1,
        ),
        scheduler=chosen,
        max_concurrent_trials=_int("max_concurrent_trials", data.get("max_concurrent_trials", 0), 0),
        max_failures=_int("max_failures", data.get("max_failures", 2), 0),
        seed=None if seed is None else _int("seed", seed, 0),
        config=_flat(_table("[config]", data.get("config", {})), "config", leaves_are_domains=False),
        space=_flat(_table("[space]", data.get("space", {})), "space", leaves_are_domains=True),
        asha=_known("[asha]", data.get("asha", {}), _ASHA_KEYS),
        pbt=_known("[pbt]", data.get("pbt", {}), _PBT_KEYS),
    )
    both = sorted(set(sweep.config) & set(sweep.space))
    if both:
        raise UsageError(f"{both[0]!r} is both fixed ([config]) and searched ([space]): keep one")
    for table in ("asha", "pbt"):
        attr = getattr(sweep, table).get("time_attr", "iteration")
        if attr not in TIME_ATTRS:
            raise UsageError(f"{table}.time_attr must be one of {', '.join(TIME_ATTRS)} (got {attr!r})")
    if chosen == "pbt":
        sweep = _checked_pbt(sweep)
    return sweep


def _checked_pbt(sweep: Sweep) -> Sweep:
    """The pbt table checked; the trials save a checkpoint every iteration unless the file says how often."""
    raw = sweep.pbt.get("mutations")
    if not isinstance(raw, Mapping) or not raw:
        raise UsageError("pbt.mutations: population-based training needs at least one option to mutate")
    mutations = _flat(raw, "pbt.mutations", leaves_are_domains=True)
    for key, spec in mutations.items():
        if next(iter(spec)) == "grid":
            raise UsageError(f"pbt.mutations.{key}: a mutation is a choice or a range, not a grid")
        _mutation(f"pbt.mutations.{key}", spec)  # its arguments
    try:
        check_mutations(sweep.algo, mutations)
    except ConfigError as e:
        raise UsageError(f"pbt.mutations: {e}") from None
    pbt = {**sweep.pbt, "mutations": mutations}
    _int("pbt.perturbation_interval", pbt.get("perturbation_interval", 4), 1)
    _number("pbt.quantile_fraction", pbt.get("quantile_fraction", 0.25), 0.0, 0.5, open_low=True)
    _number("pbt.resample_probability", pbt.get("resample_probability", 0.25), 0.0, 1.0)
    config = dict(sweep.config)
    if "checkpoint_every" in sweep.space:
        raise UsageError("checkpoint_every: population-based training takes one value for every trial ([config])")
    # A trial exploits another's newest checkpoint at each perturbation: one saved then.
    every = pbt.get("perturbation_interval", 4) if sweep.time_attr == "iteration" else 1
    config.setdefault("checkpoint_every", every)
    return dataclasses.replace(sweep, pbt=pbt, config=config)


def check_scheduler(sweep: Sweep, first: TrainPPO | TrainDQN) -> dict[str, Any]:
    """The scheduler's settings, checked before Ray starts (UsageError naming the key): ASHA's
    rungs, and each PBT mutation's range as options the trials accept at both ends."""
    if sweep.scheduler == "asha":
        table = sweep.asha
        budget_key = "max_iterations" if sweep.algo == "ppo" else "max_env_steps"
        if "max_t" not in table and budget_key in sweep.space:
            raise UsageError(f"asha.max_t: give it when the trials' budget ({budget_key}) is searched")
        max_t = _int("asha.max_t", table.get("max_t", _budget(sweep, first)), 1)
        grace = _int("asha.grace_period", table.get("grace_period", max(1, max_t // 8)), 1)
        if grace > max_t:
            raise UsageError(f"asha.grace_period must be <= max_t ({max_t}; got {grace})")
        factor = _number("asha.reduction_factor", table.get("reduction_factor", 2), 1.0, 100.0, open_low=True)
        return {"time_attr": sweep.time_attr, "max_t": max_t, "grace_period": grace, "reduction_factor": factor}
    if sweep.scheduler == "pbt":
        options = config_of(first)
        ints = [
            k
            for k in sweep.mutations
            if isinstance(_option(options, k), int) and not isinstance(_option(options, k), bool)
        ]
        return {
            "time_attr": sweep.time_attr,
            "perturbation_interval": sweep.pbt.get("perturbation_interval", 4),
            "quantile_fraction": sweep.pbt.get("quantile_fraction", 0.25),
            "resample_probability": sweep.pbt.get("resample_probability", 0.25),
            "integers": ints,
        }
    return {}


def check_mutation_ends(sweep: Sweep) -> None:
    """UsageError (naming the mutation) if the trials refuse a value at either end of a PBT
    mutation's range, or one of its choices: checked before any draw of it."""
    if sweep.scheduler != "pbt":
        return
    base = {**sweep.config, **{k: _first(_domain(f"space.{k}", v)) for k, v in sweep.space.items()}}
    for key, spec in sweep.mutations.items():
        ((name, args),) = spec.items()
        ends = list(args) if name == "choice" else [args[0], args[1] - 1 if "randint" in name else args[1]]
        for end in ends:
            try:
                command_of(sweep.algo, {**base, key: end})
            except ConfigError as e:
                raise UsageError(f"pbt.mutations.{key}: {end!r} is refused: {e}") from None


def _option(options: Mapping[str, Any], key: str) -> Any:
    """A dotted key's value in a nested config (a run's config.toml)."""
    table: Any = options
    for part in key.split("."):
        table = table.get(part) if isinstance(table, Mapping) else None
    return table


def _scheduler(sweep: Sweep, settings: dict[str, Any], *, all_fit: bool = False) -> Any:
    from ray.tune.schedulers import ASHAScheduler

    if sweep.scheduler == "asha":
        return ASHAScheduler(**settings)
    if sweep.scheduler == "pbt":
        settings = dict(settings)
        integers = settings.pop("integers")
        return _pbt_class()(
            all_fit=all_fit,
            hyperparam_mutations={k: _mutation(f"pbt.mutations.{k}", v) for k, v in sweep.mutations.items()},
            custom_explore_fn=ClampToRange(sweep.mutations, integers=integers),
            **settings,
        )
    return None


def _pbt_class() -> type:
    """Tune's PopulationBasedTraining, without its time sharing when every trial fits at once.

    At a trial's perturbation point Tune pauses it if another trial waits (pending, or paused
    by an exploit), so that trials which do not fit at once take turns. Each pause stops the
    trial's process and restarts it from its checkpoint. When the cluster holds every trial at
    once, a waiting trial starts anyway, and those pauses only cost restarts: on CartPole they
    made a sweep several times slower. ``all_fit`` (the population's bundles fit the cluster's
    resources) turns them into ``CONTINUE``."""
    from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler

    class PBT(PopulationBasedTraining):
        def __init__(self, *, all_fit: bool, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.all_fit = all_fit

        def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
            decision = super().on_trial_result(tune_controller, trial, result)
            return TrialScheduler.CONTINUE if self.all_fit and decision == TrialScheduler.PAUSE else decision

    return PBT


def _mutation(where: str, spec: Mapping[str, Any]) -> Any:
    """What PBT mutates an option with: a choice's list (it moves to a neighbouring value), a
    range's domain (it scales the value by 0.8 or 1.2, or draws anew; ``ClampToRange`` keeps it in range)."""
    domain = _domain(where, spec)  # its arguments checked
    ((name, args),) = spec.items()
    return list(args) if name == "choice" else domain


class ClampToRange:
    """PBT's explore step, after Tune's: a perturbed value back into its declared range, rounded
    for a ``randint`` or an integer option (``integers``) and onto a ``quniform``'s step, so no
    mutation makes a config the trial would refuse."""

    def __init__(self, mutations: Mapping[str, Any], *, integers: list[str] | tuple[str, ...] = ()) -> None:
        self.ranges = {
            k: (name, args) for k, spec in mutations.items() for name, args in spec.items() if name != "choice"
        }
        self.integers = set(integers)

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for key, (name, args) in self.ranges.items():
            if key in config and isinstance(config[key], int | float):
                low, high = args[0], args[1]
                value = config[key]
                if name == "quniform":
                    value = round(value / args[2]) * args[2]
                if name in ("randint", "lograndint"):
                    config[key] = int(min(max(round(value), low), high - 1))
                elif key in self.integers:
                    config[key] = int(min(max(round(value), math.ceil(low)), math.floor(high)))
                else:
                    config[key] = float(min(max(value, low), high))
        return config


def _budget(sweep: Sweep, command: TrainPPO | TrainDQN) -> int:
    """A trial's budget in the scheduler's time unit (ASHA's default max_t)."""
    cfg = command.to_config()
    if sweep.time_attr == "iteration" and isinstance(cfg, PPOTrainingConfig) and cfg.max_iterations is not None:
        return int(cfg.max_iterations)
    if sweep.time_attr == "env_steps" and isinstance(cfg, DQNTrainingConfig) and cfg.max_env_steps is not None:
        return int(cfg.max_env_steps)
    if "max_t" not in sweep.asha and sweep.scheduler == "asha":
        raise UsageError(f"asha.max_t: give it when time_attr is {sweep.time_attr} for {sweep.algo}")
    return 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneCommand:
    """Run a sweep of training trials with Ray Tune: the algorithm, the trials' options, the search
    space and the scheduler come from a TOML file (docs/tune.md). Prints a line per trial as it
    ends, then the trials best first; the sweep's directory keeps summary.csv and curves.png. The
    trials' options are the training command's, keyed as in its config.toml (ppo.lr for --ppo.lr):
    ray-sampler train --help-all lists them (algo "ppo"), train-dqn --help-all for "dqn"."""

    config: Path | None = None
    """The sweep's TOML file (required, unless --resume)."""
    num_samples: int | None = None
    """Trials per point of the search grid (default: the file's num_samples, else 1)."""
    scheduler: Literal["fifo", "asha", "pbt"] | None = None
    """fifo runs every trial to its end; asha stops the worse trials early; pbt (population-based
    training) copies the better trials' checkpoints to the worse and mutates their options (default:
    the file's scheduler, else fifo)."""
    address: str = ""
    """Ray cluster to run on (host:port, ray://host:port, auto); empty: RAY_ADDRESS, else a Ray started
    in this process."""
    num_cpus: int | None = None
    """Logical CPUs of the Ray this process starts (default: this machine's); with an address, the
    cluster's count."""
    sweeps_dir: Path = Path("sweeps")
    """Where the sweep's directory goes."""
    name: str | None = None
    """The sweep directory's name (default: <algo>-<time>)."""
    resume: Path | None = None
    """A sweep directory to go on with (after Ctrl-C or a crash): its unfinished and failed trials
    resume from their checkpoints."""
    verbose: bool = False
    """Show Ray's and Tune's own log lines."""


def run_sweep(command: TuneCommand) -> Any:
    """Runs the sweep ``command`` names; returns Tune's ResultGrid. KeyboardInterrupt after Ctrl-C,
    once the trials are stopped and the state kept (``--resume`` goes on with it)."""
    if (command.config is None) == (command.resume is None):
        raise UsageError("--config FILE starts a sweep and --resume DIR goes on with one: give one of them")
    if command.resume is not None:
        path = command.resume.resolve()
        if not (path / SWEEP_FILE).is_file():
            raise UsageError(
                f"--resume: a sweep directory with a {SWEEP_FILE} is allowed (got {str(command.resume)!r})"
            )
        if command.num_samples is not None or command.scheduler is not None or command.name is not None:
            raise UsageError("--resume: a resumed sweep keeps its file's num_samples, scheduler and name")
        sweep = read_sweep(path / SWEEP_FILE, flag="--resume")
    else:
        assert command.config is not None
        sweep = read_sweep(command.config, num_samples=command.num_samples, scheduler=command.scheduler)
        name = command.name or f"{sweep.algo}-{datetime.now():%Y%m%d-%H%M%S}"
        path = (command.sweeps_dir / name).resolve()
        if path.exists():
            raise UsageError(f"--name: the sweep directory {str(path)!r} exists (--resume {path} goes on with it)")
    if command.num_cpus is not None:
        _int("--num-cpus", command.num_cpus, 1)
    check_mutation_ends(sweep)
    param_space = sweep.param_space()
    check_param_space(sweep.algo, param_space)  # before Ray starts: every grid value and choice, a draw of the rest
    first = command_of(sweep.algo, {k: _first(v) for k, v in param_space.items()})
    settings = check_scheduler(sweep, first)
    attached = (command.address or os.environ.get("RAY_ADDRESS", "") or "local") != "local"
    runtime_env, _ = job_runtime_env(first, attached=attached, output_dirs=(command.sweeps_dir,))
    cluster = ray_cluster(
        command.address, num_cpus=command.num_cpus or local_cpus(), verbose=command.verbose, runtime_env=runtime_env
    )
    with cluster as where:
        check_param_space(sweep.algo, param_space)  # again, now that Ray is up: whether a trial can ever fit
        if command.resume is None:
            path.mkdir(parents=True)
            (path / SWEEP_FILE).write_text(tomli_w.dumps(sweep.to_toml()), encoding="utf-8")
        print(
            f"ray-sampler tune: {sweep.algo} sweep, scheduler {sweep.scheduler}, {sweep.num_samples} sample(s) of "
            f"{len(sweep.space) or 'no'} searched option(s) ({where})\nsweep directory: {path}",
            flush=True,
        )
        results = _fit(sweep, path, first, settings, resume=command.resume is not None, verbose=command.verbose)
        trials = summarize(sweep, results, path)
        interrupted = any(t["status"] == "unfinished" for t in trials)
        if interrupted:
            print(f"interrupted: the sweep's state is kept; go on with: ray-sampler tune --resume {path}", flush=True)
            raise KeyboardInterrupt
    return results


def check_sweep_file(path: Path) -> Sweep:
    """The sweep in ``path``, checked as ``ray-sampler tune`` checks it before Ray starts (its first
    trial's training command built); UsageError (one line) otherwise."""
    sweep = read_sweep(path)
    check_mutation_ends(sweep)
    check_param_space(sweep.algo, sweep.param_space())
    check_scheduler(sweep, command_of(sweep.algo, {k: _first(v) for k, v in sweep.param_space().items()}))
    return sweep


def _first(value: Any) -> Any:
    """A value of a param_space entry to build the first trial's command with."""
    from ray.tune.search.sample import Domain

    if isinstance(value, Mapping) and set(value) == {"grid_search"}:
        return value["grid_search"][0]
    return value.sample() if isinstance(value, Domain) else value


def _fit(
    sweep: Sweep, path: Path, first: TrainPPO | TrainDQN, settings: dict[str, Any], *, resume: bool, verbose: bool
) -> Any:
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    if not verbose:  # Tune's newer console output prints its banner and paths even at verbose 0
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    if resume:  # Tune's state holds the scheduler, the search's state and the progress callback
        tuner = tune.Tuner.restore(
            str(path), trainable=trainable(sweep.algo), resume_unfinished=True, resume_errored=True
        )
    else:
        tuner = tune.Tuner(
            trainable(sweep.algo),
            param_space=sweep.param_space(),
            tune_config=tune.TuneConfig(
                metric=sweep.metric,
                mode=sweep.mode,
                num_samples=sweep.num_samples,
                scheduler=_scheduler(sweep, settings, all_fit=all_trials_fit(sweep)),
                search_alg=BasicVariantGenerator(random_state=sweep.seed),
                max_concurrent_trials=sweep.max_concurrent_trials or None,
                reuse_actors=False,
            ),
            run_config=tune.RunConfig(
                storage_path=str(path.parent),
                name=path.name,
                verbose=1 if verbose else 0,
                failure_config=tune.FailureConfig(max_failures=sweep.max_failures),
                # PBT: every checkpoint kept, since a trial may load another's after that one saved more.
                checkpoint_config=tune.CheckpointConfig(
                    num_to_keep=None if sweep.scheduler == "pbt" else first.keep_checkpoints
                ),
                callbacks=[_progress_callback(sweep)],
            ),
        )
    return tuner.fit()


def all_trials_fit(sweep: Sweep) -> bool:
    """Whether the cluster's resources hold every trial of the sweep at once (their bundles summed)."""
    import ray
    from ray.tune.search.sample import Domain

    space = sweep.param_space()
    grid = math.prod(len(v["grid_search"]) for v in space.values() if isinstance(v, Mapping) and "grid_search" in v)
    count = grid * sweep.num_samples
    if sweep.max_concurrent_trials and sweep.max_concurrent_trials < count:
        return False
    first = {k: _first(v) for k, v in space.items()}
    need = trial_resources(sweep.algo, first).required_resources
    have = ray.cluster_resources()
    if any(isinstance(v, Domain | Mapping) for k, v in space.items() if "num_" in k):
        return False  # trial sizes differ: no sum to compare
    return all(have.get(r, 0.0) >= count * v for r, v in need.items())


def _progress_callback(sweep: Sweep) -> Any:
    from ray import tune

    class Progress(tune.Callback):
        """One line per trial as it starts, ends or fails."""

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            print(f"trial {trial.trial_id} started: {_shown(sweep, trial.config)}", flush=True)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            last = trial.last_result or {}
            value = last.get(sweep.metric)
            shown = "-" if value is None else f"{value:.4g}"
            print(
                f"trial {trial.trial_id} ended at iteration {last.get('iteration', 0)}: {sweep.metric} {shown}",
                flush=True,
            )

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            print(f"trial {trial.trial_id} failed (its error: {trial.path})", flush=True)

    return Progress()


def _shown(sweep: Sweep, config: Mapping[str, Any]) -> str:
    keys = [*sweep.space, *(k for k in sweep.mutations if k not in sweep.space)]
    return ", ".join(f"{k}={_value(config.get(k))}" for k in keys) or "(fixed options)"


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trial_run_dir(trial_path: Path) -> Path | None:
    """The trial's newest run directory: a restarted or exploited trial has one per start (the
    first, then ``restored-<start time>-...`` ones), and the newest holds the whole curve it
    carries on."""
    runs = [p.parent for p in Path(trial_path).glob("*/metrics.csv")]
    return max(runs, key=lambda d: (d.name.startswith(RESTORED_PREFIX), d.name)) if runs else None


def summarize(sweep: Sweep, results: Any, path: Path) -> list[dict[str, Any]]:
    """Writes ``summary.csv`` (each trial, best first) and ``curves.png``; prints the table and the
    best trial; returns the rows."""
    import csv

    trials: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, int | float]]] = {}
    target = None
    for result in results:
        run_dir = trial_run_dir(Path(result.path))
        rows = read_metrics(run_dir) if run_dir is not None else []
        values = [float(r[sweep.metric]) for r in rows if sweep.metric in r and not math.isnan(float(r[sweep.metric]))]
        top = (max if sweep.mode == "max" else min)(values) if values else math.nan
        last = rows[-1] if rows else {}
        # The run directory says what the trial ran last (population-based training changes a
        # trial's options, and Tune's last result of a trial cloned at its very end is the donor's).
        config = _run_options(run_dir, [*sweep.config, *sweep.space, *sweep.mutations]) if run_dir else {}
        cfg = command_of(sweep.algo, config).to_config() if config else None
        target = _target(cfg) if cfg is not None else target
        status = "error" if result.error is not None else _status(result, last, cfg, target) if cfg else "unfinished"
        trial_id = _trial_id(Path(result.path))
        trials.append(
            {
                "trial": trial_id,
                "status": status,
                "iterations": int(last.get("iteration", 0)),
                "env_steps": int(last.get("env_steps", 0)),
                f"best_{sweep.metric}": top,
                f"last_{sweep.metric}": float(last.get(sweep.metric, math.nan)),
                **{k: config.get(k) for k in dict.fromkeys([*sweep.space, *sweep.mutations])},
                "run_dir": str(run_dir) if run_dir is not None else "",
            }
        )
        if rows:
            curves[f"{trial_id} {_shown(sweep, config)}"] = rows
    key = f"best_{sweep.metric}"
    sign = -1.0 if sweep.mode == "max" else 1.0
    trials.sort(key=lambda t: (math.isnan(t[key]), sign * t[key] if not math.isnan(t[key]) else 0.0))
    for rank, trial in enumerate(trials, 1):
        trial["rank"] = rank
    columns = ["rank", *(c for c in trials[0] if c != "rank")] if trials else ["rank"]
    with open(path / SUMMARY_FILE, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(trials)
    _print_table(trials, columns)
    if trials and not math.isnan(trials[0][key]):
        best = trials[0]
        chosen = ", ".join(f"{k}={_value(best[k])}" for k in columns if k in sweep.space or k in sweep.mutations)
        print(f"best: trial {best['trial']} ({chosen or 'fixed options'}): {key} {best[key]:.4g}", flush=True)
        print(f"best run directory: {best['run_dir']}", flush=True)
    if curves:
        try:
            out = draw_curves(
                curves, path / CURVES_FILE, title=f"{path.name}: {len(curves)} trials", target_return=target
            )
            print(f"summary: {path / SUMMARY_FILE}; curves: {out}", flush=True)
        except ConfigError as e:
            print(f"summary: {path / SUMMARY_FILE}; no curves ({e})", flush=True)
    return trials


def _run_options(run_dir: Path, keys: list[str]) -> dict[str, Any]:
    """The dotted ``keys``' values in a run directory's config.toml (a trial's config)."""
    saved = load_config(run_dir)
    return {key: _option(saved, key) for key in keys}


def _trial_id(trial_path: Path) -> str:
    """Tune's trial id (``6f8d4_00001``) from the trial directory's name."""
    match = re.search(r"_([0-9a-f]+_\d{5})_", trial_path.name)
    return match.group(1) if match else trial_path.name


def _target(cfg: Any) -> float | None:
    target = getattr(cfg, "target_return", None)
    return float(target) if isinstance(target, int | float) else None


def _status(result: Any, last: Mapping[str, Any], cfg: Any, target: float | None) -> str:
    """done (its budget used), reached (its target), stopped (early, by the scheduler), error or unfinished."""
    if not (result.metrics or {}).get("done", False):
        return "unfinished"
    if target is not None and float(last.get("best_return_mean", math.nan)) >= target:
        return "reached"
    used = budget_used(
        cfg,
        iterations=int(last.get("iteration", 0)),
        env_steps=int(last.get("env_steps", 0)),
        elapsed_s=float(last.get("elapsed_s", 0.0)),
    )
    return "stopped" if used is None else "done"


def _print_table(trials: list[dict[str, Any]], columns: list[str]) -> None:
    shown = [c for c in columns if c != "run_dir"]
    cells = [[_value(t[c]) if t.get(c) is not None else "-" for c in shown] for t in trials]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(shown)]
    print("  ".join(c.ljust(w) for c, w in zip(shown, widths, strict=True)), flush=True)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)), flush=True)
    sys.stdout.flush()
