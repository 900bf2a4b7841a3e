"""Bad command lines: each exits 2 with one line on stderr that names the flag (or the command),
before Ray starts, with no traceback and no hang."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ray_sampler.cli.jobs
import ray_sampler.cli.train
from ray_sampler.cli import COMMANDS, EXIT_USAGE, main
from ray_sampler.errors import EnvError, EnvRunnerFailedError

BAD_TOML = Path(__file__).with_name("bad_config.toml")
USER_ENVS = "tests.ray_sampler.sampling.user_envs"  # a user's env module (creators that fail)

# (argv, a piece of the one-line message: the flag named, what is allowed or what came)
CASES: list[tuple[list[str], str]] = [
    (["train", "--ppo.lr", "abc"], "--ppo.lr: could not convert string to float: 'abc'"),
    # An option with a short alias is named as the user typed it (the last spelling given wins).
    (["train", "--lr", "-1"], "--lr must be a finite number > 0 (got -1.0)"),
    (["train", "--lr", "nan"], "--lr must be a finite number > 0 (got nan)"),
    (["train", "--ppo.lr", "-1"], "--ppo.lr must be a finite number > 0 (got -1.0)"),
    (["train", "--lr=-1"], "--lr must be a finite number > 0 (got -1.0)"),
    (["train", "--lr", "abc"], "--lr: could not convert string to float: 'abc'"),
    (["train", "--lr"], "--lr: a value is needed (got none)"),
    (["train", "--ppo.lr"], "--ppo.lr: a value is needed (got none)"),
    (["train", "--ppo.lr", "1", "--lr", "-1"], "--lr must be a finite number > 0 (got -1.0)"),
    (["train", "--lr", "1", "--ppo.lr", "-1"], "--ppo.lr must be a finite number > 0 (got -1.0)"),
    (["train-dqn", "--lr", "0"], "--lr must be a finite number > 0 (got 0.0)"),
    (["train", "--ppo.gamma", "1.5"], "--ppo.gamma must be in [0, 1] (got 1.5)"),
    (["train", "--ppo.num-epochs", "0"], "--ppo.num-epochs must be an int >= 1 (got 0)"),
    (["train", "--ppo.minibatch-size", "0"], "--ppo.minibatch-size must be an int >= 1 (got 0)"),
    (["train", "--ppo.clip-param", "-0.1"], "--ppo.clip-param must be a finite number > 0"),
    (["train", "--ppo.grad-clip", "x"], "--ppo.grad-clip: {None} or FLOAT allowed (got 'x')"),
    (["train", "--ppo.standardize-advantages", "yes"], "unrecognized option(s): yes"),
    (["train", "--max-iterations", "0"], "--max-iterations must be an int >= 1 (got 0)"),
    (["train", "--max-iterations", "1.5"], "--max-iterations: {None} or INT allowed (got '1.5')"),
    (["train", "--stop-window", "0"], "--stop-window must be an int >= 1 (got 0)"),
    (["train", "--target-return", "xyz"], "--target-return: {None} or FLOAT or {auto} allowed (got 'xyz')"),
    (["train", "--target-return", "inf"], "--target-return must be a finite number, 'auto' or None (got inf)"),
    (["train", "--env", "CartPol-v1"], "--env 'CartPol-v1' is neither a name given to register_env nor a gymnasium id"),
    (["train", "--env", "NoSuchEnv-v0"], "--env 'NoSuchEnv-v0' is neither a name given to register_env nor a gym"),
    (["train", "--env", "no_such_module:Env"], "--env 'no_such_module:Env': module 'no_such_module' does not import: "),
    (["train-dqn", "--env", "json:Env"], "--env 'json:Env': module 'json' imported, but it has no env class or "),
    (["train", "--env-config", "{size: 5}"], "--env-config: a JSON object is allowed, e.g. '{\"size\": 5}' (got '{"),
    (["train", "--env-config", "[1, 2]"], "--env-config: a JSON object is allowed, e.g. '{\"size\": 5}' (got '[1, 2]"),
    (["train", "--env-config.size"], "--env-config.size: a value is needed (got none)"),
    (["train", "--env", f"{USER_ENVS}:fails"], "failed for worker_index=0, vector_index=0: ValueError: size must be"),
    (["sample", "--env", f"{USER_ENVS}:not_an_env"], "must return a gymnasium.Env (got builtins.dict for worker_index"),
    (
        ["train", "--env", "external", "--external.port", "9899", "--external.wait-s", "0.3"],
        "--env external: no client sent its spaces within 0.3 s (--external.wait-s)",
    ),
    (
        ["train", "--env", "external", "--external.spaces-from", "CartPole-v1", "--external.host", "0.0.0.0"],
        "--external.token must be set to listen on '0.0.0.0' (only a loopback host needs none)",
    ),
    (
        ["train-dqn", "--env", "external", "--external.spaces-from", "CartPole-v1", "--external.port", "0"],
        "--external.port: a port of 1 to 65535 allowed (got 0)",
    ),
    (["train", "--env", "external", "--external.spaces-from", "CartPol-v1"], "--env 'CartPol-v1' is neither a name"),
    (["train", "--py-modules", "no/such/module.py"], "--py-modules: 'no/such/module.py' is not a file or directory"),
    (["train", "--working-dir", "no/such/dir"], "--working-dir: 'no/such/dir' is not a directory"),
    (["train", "--runtime-env", "no/such.yaml"], "--runtime-env: cannot read 'no/such.yaml' (No such file or director"),
    (["train", "--env"], "--env: a value is needed (got none)"),
    (["train", "--num-env-runners", "0"], "--num-env-runners must be an int >= 1 (got 0)"),
    (["train", "--num-env-runners", "-3"], "--num-env-runners must be an int >= 0 (got -3)"),
    (["train", "--num-env-runners", "x"], "--num-env-runners: invalid literal for int() with base 10: 'x'"),
    (["train", "--env-runner-group.num-env-runners", "0"], "--env-runner-group.num-env-runners must be an int >= 1"),
    (["train", "--num-env-runners", "64"], "cannot place the actors on the local Ray cluster: num_env_runners x"),
    (["train", "--num-cpus-per-env-runner", "-1"], "--num-cpus-per-env-runner must be"),
    (["train", "--num-envs-per-env-runner", "0"], "--num-envs-per-env-runner must be an int >= 1"),
    (["train", "--rollout-fragment-length", "0"], "--rollout-fragment-length must be an int >= 1 (got 0)"),
    (["train", "--env-runner.rollout-fragment-length", "0"], "--env-runner.rollout-fragment-length must be an int"),
    (["train", "--env-runner.batch-mode", "bad"], "--env-runner.batch-mode: one of 'truncate_episodes', "),
    (["train", "--env-runner.episode-lookback-horizon", "-1"], "--env-runner.episode-lookback-horizon must be"),
    (["train", "--env-runner.max-episode-steps", "0"], "--env-runner.max-episode-steps must be an int >= 1 or None"),
    (["train", "--env-runner-group.placement-strategy", "X"], "--env-runner-group.placement-strategy: one of 'PACK'"),
    (["train", "--env-runner-group.sample-timeout-s", "0"], "--env-runner-group.sample-timeout-s must be"),
    (["train", "--env-runner-group.max-num-env-runner-restarts", "-1"], "--env-runner-group.max-num-env-runner-res"),
    (["train", "--num-learners", "-1"], "--num-learners must be an int >= 0 (got -1)"),
    (["train", "--optimizer", "async"], "--optimizer: one of 'sync_samples', 'async_samples', 'async_gradients'"),
    (["train", "--optimizer", "async_gradients", "--ppo.observation-filter", "mean_std"], "loop takes no 'observa"),
    (["train", "--ppo.policy-loss", "a2c"], "--ppo.policy-loss: one of 'clipped', 'pg' allowed"),
    (["train-dqn", "--gradient-sync", "nccl"], "--gradient-sync: one of 'driver', 'allreduce' allowed"),
    (["train-dqn", "--num-replay-shards", "3"], "--num-replay-shards (3) must be <= 'num_env_runners' (2): each"),
    (["train", "--async-samples.max-policy-lag", "-1"], "--async-samples.max-policy-lag must be an int >= 0"),
    (["train", "--optimizer", "async_samples", "--num-learners", "2"], "'num_learners' must be 0 (the driver's) or 1"),
    (["train", "--num-learners", "8", "--num-cpus-per-learner", "1"], "num_learners x num_cpus_per_learner = 8 x"),
    (
        ["train", "--env-runner-group.custom-resources-per-env-runner", "gpu_node", "1"],
        "2 x 1 gpu_node = 2.0 gpu_node, but the cluster has 0.0 gpu_node",
    ),
    (["train", "--address", "foo"], "--address (or RAY_ADDRESS) must be auto, local, host:port or ray://host:port"),
    (["train", "--address", "ray://"], "--address (or RAY_ADDRESS) must be auto, local, host:port"),
    (["train", "--config", "/nonexistent/run.toml"], "--config: cannot read '/nonexistent/run.toml'"),
    (["train", "--config", "run.yaml"], "--config: a .toml file is allowed (got 'run.yaml')"),
    (["train", "--config", str(BAD_TOML)], "is not valid TOML"),
    (["train", "--hidden-sizes", "0"], "--hidden-sizes: one or more positive ints allowed (got [0])"),
    (["train", "--seed", "abc"], "--seed: {None} or INT allowed (got 'abc')"),
    (["train", "--foo"], "'--foo' is no option of this command (see --help-all)"),
    (["train", "--max-iteration", "3"], "'--max-iteration' is no option of this command; did you mean '--max-iterati"),
    (["train-dqn", "--env", "CartPol-v1"], "a gymnasium id (registered: none; a module's env: 'module:Name'); did you"),
    (["sample", "--iteration", "2"], "'--iteration' is no option of this command; did you mean '--iterations'? (see "),
    (["train", "--optimizer", "async", "--help"], "--optimizer: one of 'sync_samples', 'async_samples', 'async_gr"),
    (["train", "positional"], "unrecognized option(s): positional"),
    (
        ["nosuchcommand"],
        "unknown command 'nosuchcommand' (allowed: train, train-dqn, sample, serve-env, demo, plot, tune, evaluate, "
        "export)",
    ),
    (["trian", "--lr", "1"], "unknown command 'trian'; did you mean 'train'? (allowed: train, train-dqn, sample, "),
    (["train-dqn", "--replay.capacity-env-steps", "0"], "--replay.capacity-env-steps must be an int >= 1"),
    (["train-dqn", "--batch-size", "0"], "--batch-size must be an int >= 1 (got 0)"),
    (["train-dqn", "--n-step", "0"], "--n-step must be an int >= 1 (got 0)"),
    (["train-dqn", "--epsilon-final", "2"], "--epsilon-final must be in [0, 1] (got 2.0)"),
    (["train-dqn", "--replay.min-size-to-sample", "100000"], "--replay.capacity-env-steps (50000) must be >= "),
    (["train-dqn", "--dqn.target-update-every", "0"], "--dqn.target-update-every must be an int >= 1 (got 0)"),
    (["train-dqn", "--updates-per-env-step", "-1"], "--updates-per-env-step must be a finite number > 0"),
    (["train-dqn", "--env", "Pendulum-v1"], "--env 'Pendulum-v1' cannot be trained with DQN: "),
    (
        ["train", "--evaluation-opponent", "random", "--evaluation-interval", "1"],
        "--evaluation-opponent: 'evaluation_opponent' 'random' plays two-player multi-agent games; this run's env is",
    ),
    (
        ["train", "--env", "ma-cartpole:3", "--evaluation-opponent", "random", "--evaluation-interval", "1"],
        "--evaluation-opponent: 'evaluation_opponent' 'random' plays two-player games; the env has 3 possible agents",
    ),
    (["train", "--evaluation-opponent", "random"], "--evaluation-opponent 'random' needs evaluation on: "),
    (["train", "--evaluation-opponent", "rand"], "--evaluation-opponent: one of 'random', 'None' allowed (got 'rand')"),
    (["sample", "--iterations", "0"], "--iterations must be an int >= 1 (got 0)"),
    (["sample", "--batch-mode", "x"], "--batch-mode: one of 'truncate_episodes', 'complete_episodes' allowed"),
    (["sample", "--num-env-runners", "0"], "--num-env-runners must be an int >= 1 (got 0)"),
    (["sample", "--env", "Nope-v0"], "--env 'Nope-v0' is neither a name given to register_env nor a gymnasium id"),
    (["demo", "--num-env-steps", "0"], "--num-env-steps must be an int >= 1 (got 0)"),
    (["demo", "--lookback", "-1"], "--lookback must be an int >= 0 (got -1)"),
    (["demo", "--env", "Nope-v0"], "--env: a registered gymnasium id is allowed (got 'Nope-v0'"),
    (["train", "--checkpoint-every", "-1"], "--checkpoint-every: an int >= 0 allowed (got -1)"),
    (["train", "--keep-checkpoints", "0"], "--keep-checkpoints: an int >= 1 allowed (got 0)"),
    (["train", "--resume", "/nonexistent/run"], "--resume: a run directory with a config.toml is allowed"),
    (["train", "--resume", "/x", "--config", "/y.toml"], "--resume: a resumed run takes its run directory's config"),
    (["plot"], "'run_dirs' must name at least one run directory (got none)"),
    (["plot", "/nonexistent/run"], "run directory /nonexistent/run does not exist"),
    (["plot", str(BAD_TOML)], "is a file, not a run directory"),
]


def _no_ray(*args: object, **kwargs: object) -> None:
    raise AssertionError("Ray was started for a command line that is wrong")


def _run(argv: list[str]) -> tuple[object, str, str]:
    """(exit code or the exception raised, stdout, stderr) of ``main(argv)``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code: object = 0
        except SystemExit as e:
            code = e.code
        except BaseException as e:  # a traceback would reach the user
            code = e
    return code, out.getvalue(), err.getvalue()


def test_there_are_at_least_40_cases() -> None:
    assert len(CASES) >= 40 and len({tuple(argv) for argv, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(argv) or "none" for argv, _ in CASES])
def test_a_bad_command_line_exits_2_with_one_line_before_ray_starts(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_sampler.cli.train, "ray_cluster", _no_ray)
    monkeypatch.setattr(ray_sampler.cli.jobs, "ray_cluster", _no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    result: list[tuple[object, str, str]] = []
    worker = threading.Thread(target=lambda: result.append(_run(argv)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert result, f"{argv} did not finish within 10 s"
    code, out, err = result[0]
    assert code == EXIT_USAGE, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"ray-sampler{' ' + argv[0] if argv[0] in COMMANDS else ''}: error: ")
    assert message in lines[0]
    assert "Traceback" not in out + err


def test_no_command_prints_the_commands_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == EXIT_USAGE
    assert capsys.readouterr().out.startswith("usage: ray-sampler COMMAND [OPTIONS]")


@pytest.mark.parametrize(
    "argv",
    [["train", "--ppo.lr", "abc"], ["train", "--env", "CartPol-v1"], ["train-dqn", "--num-env-runners", "64"]],
    ids=["value", "env", "resources"],
)
def test_in_a_real_process_the_error_is_one_line_on_stderr(argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, "-m", "ray_sampler", *argv], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == EXIT_USAGE
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("NaNObs-v0", "env 'NaNObs-v0' failed its check at step 3: observation has NaN at index [1]"),
        ("OutsideObs-v0", "env 'OutsideObs-v0' failed its check at step 2: observation [ 2. 2. 1000.] is outside"),
        ("NoneReward-v0", "env 'NoneReward-v0' failed its check at step 1: reward is None of type NoneType"),
    ],
    ids=["nan", "outside", "none_reward"],
)
def test_an_env_that_fails_its_check_is_refused_before_ray_starts(
    env_id: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.ray_sampler.sampling.test_env_check  # noqa: F401  # registers the bad envs

    monkeypatch.setattr(ray_sampler.cli.train, "ray_cluster", _no_ray)
    code, out, err = _run(["train", "--env", env_id, "--runs-dir", "/nonexistent/never-made"])
    assert code == EXIT_USAGE, (code, out, err)
    (line,) = err.strip().splitlines()
    assert line.startswith("ray-sampler train: error: ") and message in line and "--no-env-check" in line


def test_no_env_check_lets_the_run_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import tests.ray_sampler.sampling.test_env_check  # noqa: F401  # registers the bad envs

    monkeypatch.setattr(ray_sampler.cli.train, "ray_cluster", _no_ray)
    code, _, _ = _run(["train", "--env", "NaNObs-v0", "--no-env-check", "--runs-dir", str(tmp_path)])
    assert isinstance(code, AssertionError) and str(code) == "Ray was started for a command line that is wrong"


@pytest.mark.parametrize(
    "error",
    [
        EnvRunnerFailedError(
            "env runner 1 failed: MultiAgentEnvError: sub-env worker_index=1, vector_index=0: the env's observations "
            "at env step 16 name agent 'ghost'; the env broke the multi-agent env contract\nmore"
        ),
        EnvError("sub-env worker_index=1, vector_index=0 failed: x"),
    ],
    ids=["runners-failed", "env-error"],
)
def test_an_env_that_fails_the_run_ends_it_with_one_line_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception
) -> None:
    from ray_sampler.cli import EXIT_FAILED

    def run(args: list[str], prog: str) -> None:
        raise error

    monkeypatch.setitem(COMMANDS, "train", (run, COMMANDS["train"][1]))
    with pytest.raises(SystemExit) as exited:
        main(["train"])
    assert exited.value.code == EXIT_FAILED == 3
    assert capsys.readouterr().err == f"ray-sampler train: error: {str(error).splitlines()[0]}\n"
