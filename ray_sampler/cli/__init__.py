"""The ``ray-sampler`` command line.

``ray-sampler train`` (the main job) trains PPO with remote env runners on a Ray cluster started in
this process (or the one ``--address`` names); ``train-dqn`` trains DQN through a replay actor;
``sample`` only samples with the runners; ``demo`` builds, cuts, joins and packs real episodes
without Ray; ``plot`` draws the learning curves of run directories; ``tune`` runs a sweep of
trials with Ray Tune; ``evaluate`` runs a trained policy's episodes; ``export`` writes it as ONNX
or npz + JSON.

Every option comes from a typed config (``ray_sampler.cli.options``, with tyro): ``ray-sampler
COMMAND --help`` lists them with their docs and choices (for ``train`` and ``train-dqn``, those
most runs need; ``--help-all`` lists every one). A usage error is one line on stderr and exit
status 2, before Ray starts; a misspelt command, flag or key comes with the closest known names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ray_sampler.cli.options import UsageError, parse
from ray_sampler.cli.ray_cluster import check_address, ray_cluster
from ray_sampler.cli.user_env import use_working_directory
from ray_sampler.errors import (
    ConfigError,
    EnvCreatorError,
    EnvError,
    EnvRunnerFailedError,
    InsufficientResourcesError,
    MultiAgentEnvError,
)
from ray_sampler.suggest import did_you_mean

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_TARGET_MISSED",
    "EXIT_USAGE",
    "check_address",
    "main",
    "parse",
    "ray_cluster",
]

EXIT_TARGET_MISSED = 1
"""Exit status of a training run that had a target return and did not reach it."""
EXIT_USAGE = 2
"""Exit status of a usage error (a bad flag or value, a request the cluster can never hold)."""
EXIT_FAILED = 3
"""Exit status of a run an env or its runners ended: an env that broke the multi-agent contract or
raised with sub-env restarts off, or env runners whose restarts were used up (one line)."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), once the actors are stopped."""


def _train(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.phases import mark
    from ray_sampler.cli.train import TrainPPO, command_from_args, run_training

    mark("imports")
    return run_training(command_from_args(TrainPPO, args, prog=prog))


def _train_dqn(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.train import TrainDQN, command_from_args, run_training

    return run_training(command_from_args(TrainDQN, args, prog=prog))


def _sample(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.jobs import SampleJobConfig, run_sample_job
    from ray_sampler.cli.user_env import gather_env_config

    args = gather_env_config(args)
    return run_sample_job(parse(SampleJobConfig, args, prog=prog, description=SampleJobConfig.__doc__ or ""))


def _serve_env(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.serve_env import ServeEnvCommand, run_serve_env

    return run_serve_env(parse(ServeEnvCommand, args, prog=prog, description=ServeEnvCommand.__doc__ or ""))


def _demo(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.jobs import DemoConfig, run_demo

    return run_demo(parse(DemoConfig, args, prog=prog, description=DemoConfig.__doc__ or ""))


def _plot(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.plot import PlotCommand, run_plot

    return run_plot(parse(PlotCommand, args, prog=prog, description=PlotCommand.__doc__ or ""))


def _tune(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.sweep import TuneCommand, run_sweep

    return run_sweep(parse(TuneCommand, args, prog=prog, description=TuneCommand.__doc__ or ""))


def _evaluate(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.evaluate import EvaluateCommand, run_evaluate
    from ray_sampler.cli.user_env import gather_env_config

    args = gather_env_config(args)
    return run_evaluate(parse(EvaluateCommand, args, prog=prog, description=EvaluateCommand.__doc__ or ""))


def _export(args: list[str], prog: str) -> Any:
    from ray_sampler.cli.export import ExportCommand, run_export

    return run_export(parse(ExportCommand, args, prog=prog, description=ExportCommand.__doc__ or ""))


COMMANDS: dict[str, tuple[Callable[[list[str], str], Any], str]] = {
    "train": (_train, "train PPO with remote env runners (the main job)"),
    "train-dqn": (_train_dqn, "train DQN: env runners -> replay actor -> learners"),
    "sample": (_sample, "sample with a group of env runners and print the throughput"),
    "serve-env": (_serve_env, "collect what external simulators send into a replay actor, saved as Parquet"),
    "demo": (_demo, "build, cut, join and pack episodes from a real gymnasium env (no Ray)"),
    "plot": (_plot, "draw the learning curves of run directories on one figure"),
    "tune": (_tune, "run a sweep of training trials with Ray Tune (search space in a TOML file)"),
    "evaluate": (_evaluate, "run a trained policy's episodes and print their returns (videos with --video)"),
    "export": (_export, "export a trained policy: ONNX for torch modules, npz + JSON for numpy ones"),
}
"""Each command: (run(args, prog), one line of help)."""


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return (
        "usage: ray-sampler COMMAND [OPTIONS]  (ray-sampler COMMAND --help: its main options; --help-all: every one)"
        "\n\ncommands:\n" + "\n".join(lines)
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ray-sampler`` command: exits 0 (done; a target reached or the budget used
    without one), 1 (a target missed), 2 (a usage error, one line), 3 (the env or its runners failed,
    one line) or 130 (Ctrl-C, actors stopped)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        raise SystemExit(0 if args else EXIT_USAGE)
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        hint = "; " + did_you_mean(name, COMMANDS) if did_you_mean(name, COMMANDS) else ""
        print(f"ray-sampler: error: unknown command {name!r}{hint} (allowed: {', '.join(COMMANDS)})", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    run, _ = COMMANDS[name]
    use_working_directory()  # --env mymodule:MyEnv finds the user's module where they run the command
    try:
        result = run(rest, f"ray-sampler {name}")
    except (UsageError, ConfigError, EnvCreatorError, InsufficientResourcesError) as e:  # the user's input: one line
        print(f"ray-sampler {name}: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except (MultiAgentEnvError, EnvError, EnvRunnerFailedError) as e:  # the env's own failure: one line too
        print(f"ray-sampler {name}: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        raise SystemExit(EXIT_FAILED) from None
    except KeyboardInterrupt:  # the actors and Ray were stopped on the way out (finally blocks)
        print(f"ray-sampler {name}: interrupted; actors stopped", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    if getattr(result, "target_return", None) is not None and not result.reached:
        raise SystemExit(EXIT_TARGET_MISSED)
