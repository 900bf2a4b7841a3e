"""The ``ray-sampler`` commands: what they print, their config errors, and the training flags
composed into the nested training configs."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from learner.checkpoint import load_checkpoint
from learner.metrics import TrainResult
from ray_sampler.cli import COMMANDS, main
from ray_sampler.cli.jobs import DemoConfig, SampleJobConfig
from ray_sampler.cli.options import UsageError, parse
from ray_sampler.cli.run_dir import load_config, read_metrics
from ray_sampler.cli.train import (
    TrainDQN,
    TrainPPO,
    budget_line,
    command_from_args,
    config_of,
    preset_line,
    run_training,
    stopped_by_line,
    target_hint,
)
from ray_sampler.errors import ConfigError
from ray_sampler.policy import Policy
from ray_sampler.sampling.config import BatchMode
from tests.helpers import greedy_return


def test_demo_prints_what_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    main(["demo", "--num-env-steps", "300", "--cut-every", "40", "--lookback", "2", "--seed", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ray-sampler demo: CartPole-v1, 300 env steps, random actions, seed 3"
    assert lines[1].startswith("collected ") and "(cut every 40 steps, lookback 2)" in lines[1]
    assert "300 steps (no step lost or duplicated)" in lines[3]
    assert lines[4].startswith("columnar: 300 steps + ")
    assert lines[5].endswith("round trip equal: yes")


def test_demo_runs_as_a_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ray_sampler", "demo", "--num-env-steps", "50", "--cut-every", "7"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "50 steps (no step lost or duplicated)" in out and "round trip equal: yes" in out


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_env_steps": 0}, "'num_env_steps' must be an int >= 1 \\(got 0\\)"),
        ({"cut_every": -2}, "'cut_every' must be an int >= 1"),
        ({"lookback": -1}, "'lookback' must be an int >= 0"),
    ],
    ids=["steps", "cut_every", "lookback"],
)
def test_demo_config_rejects_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DemoConfig(**kwargs)


def test_sample_job_prints_a_line_per_iteration(ray_address: str) -> None:
    # Attached to the session's Ray: the embedded start is the train job's test, below.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_sampler",
            "sample",
            "--iterations",
            "2",
            "--num-env-runners",
            "2",
            "--num-envs-per-env-runner",
            "2",
            "--rollout-fragment-length",
            "16",
            "--address",
            ray_address,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert re.fullmatch(
        r"ray-sampler sample: CartPole-v1, 2 env runners x 2 sub-envs, truncate_episodes, "
        rf"2 iterations \(Ray cluster at {re.escape(ray_address)} \(4 CPUs\)\)",
        lines[0],
    )
    assert lines[1].startswith("iter 1: 64 env steps, ") and "runners 1: " in lines[1] and ", 2: " in lines[1]
    assert lines[2].startswith("iter 2: 64 env steps, ")
    assert lines[3].startswith("total: 128 env steps in ")


def test_sample_starts_the_runners_train_starts_by_default() -> None:
    sample = parse(SampleJobConfig, [], prog="t", description="")
    train = command_from_args(TrainPPO, [], prog="t").to_config()
    runner, group = train.env_runner, train.env_runner_group
    assert (sample.env, sample.num_env_runners, sample.num_cpus_per_env_runner) == ("CartPole-v1", 2, 0.5)
    assert (sample.num_envs_per_env_runner, sample.rollout_fragment_length, sample.batch_mode) == (
        4,
        128,
        BatchMode.TRUNCATE_EPISODES,
    )
    assert (sample.env, sample.num_env_runners, sample.num_cpus_per_env_runner) == (
        runner.env,
        group.num_env_runners,
        group.num_cpus_per_env_runner,
    )
    assert (sample.num_envs_per_env_runner, sample.rollout_fragment_length, sample.batch_mode) == (
        runner.num_envs_per_env_runner,
        runner.rollout_fragment_length,
        runner.batch_mode,
    )


def test_train_job_prints_progress_learns_and_keeps_a_run_directory(tmp_path: Path) -> None:
    out = run_cli("train", "--max-iterations", "12", "--num-env-runners", "2", runs_dir=tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]  # the target (CartPole-v1's reward_threshold) was missed
    assert "Token authentication" not in out.stderr and "Ray instance" not in out.stderr  # hidden without -v
    lines = out.stdout.splitlines()
    assert lines[0] == "ray-sampler train: PPO on CartPole-v1, 2 env runners x 4 sub-envs (local Ray cluster)"
    assert lines[1] == "stop once the mean return of the last 100 finished episodes reaches 475"
    assert lines[2] == (
        "budget: 12 iterations or 500,000 env steps, the first reached; "
        "an iteration: one update on a 1,024-step batch from every runner"
    )
    (run_dir,) = tmp_path.iterdir()
    assert lines[3] == f"run directory: {run_dir}" and run_dir.name.startswith("ppo-CartPole-v1-")
    iters = [line for line in lines if line.startswith("iter ")]  # not a terminal: one plain line each
    assert len(iters) == 12 and iters[0].startswith("iter 1/12: 1024/500000 env steps, ")  # both budgets
    assert iters[-1].startswith("iter 12/12: 12288/500000 env steps, ")
    summary = lines.index(next(line for line in lines if line.startswith("Target missed: mean return ")))
    assert lines[summary].endswith("over the last 100 episodes (target 475)")
    assert lines[summary + 1].split() == ["env", "steps", "12,288"]
    assert "  stopped by  --max-iterations 12 (the first budget reached)" in lines[summary:]
    assert lines[-2:] == [
        f"policy: {run_dir / 'policy'} (ray-sampler evaluate {run_dir})",
        f"learning curve: {run_dir / 'curve.png'}",
    ]
    final = float(lines[summary].split("mean return ")[1].split(" ")[0])
    assert final > 60  # random play averages about 22
    policy = Policy.from_checkpoint(run_dir)  # the final policy, loaded with no Ray
    assert policy.info == {
        "algo": "ppo", "env": "CartPole-v1", "env_config": {}, "framework": "numpy", "iteration": 12, "env_steps": 12288
    }  # fmt: skip
    assert greedy_return(policy) > 40  # greedy: an untrained policy pushes one way and ends near 10
    rows = read_metrics(run_dir)
    assert [r["iteration"] for r in rows] == list(range(1, 13)) and rows[-1]["env_steps"] == 12288
    assert rows[-1]["return_mean"] == pytest.approx(final, abs=0.05)
    assert load_config(run_dir)["max_iterations"] == 12
    assert (run_dir / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_asynchronous_optimizer_trains_impala_from_the_command_line(tmp_path: Path, ray_address: str) -> None:
    args = ["train", "--optimizer", "async_samples", "--ppo.policy-loss", "pg", "--rollout-fragment-length", "32"]
    args += ["--max-iterations", "6", "--target-return", "none", "--address", ray_address]
    out = run_cli(*args, runs_dir=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("ray-sampler train: IMPALA on CartPole-v1, 2 env runners x 4 sub-envs (")
    assert lines[2] == (
        "budget: 6 iterations or 500,000 env steps, the first reached; "
        "an iteration: one update on one 128-step fragment"
    )
    (run_dir,) = tmp_path.iterdir()
    assert lines[3] == f"run directory: {run_dir}" and run_dir.name.startswith("impala-CartPole-v1-")
    iters = [line for line in lines if line.startswith("iter ")]
    assert len(iters) == 6 and re.search(r", lag [\d.]+ \(max \d+\), dropped/unused/lost 0/\d+/0, ", iters[-1])
    summary = lines[lines.index(next(line for line in lines if line.startswith("Budget used: "))) :]
    assert "  stopped by  --max-iterations 6 (the first budget reached)" in summary
    assert any(re.fullmatch(r"  policy lag  mean [\d.]+, max \d+ updates", line) for line in summary)
    assert any(re.fullmatch(r"  not learned 0 dropped, [\d,]+ unused, 0 lost env steps", line) for line in summary)
    rows = read_metrics(run_dir)  # an iteration is one update, on one runner's 128-step fragment
    assert [r["iteration"] for r in rows] == list(range(1, 7)) and rows[-1]["env_steps"] == 6 * 128
    assert [r["async/num_env_steps_dropped"] for r in rows] == [0] * 6
    assert rows[-1]["async/policy_lag_max"] >= rows[-1]["async/policy_lag_mean"] >= 0
    config = load_config(run_dir)
    assert config["optimizer"] == "async_samples" and config["ppo"]["policy_loss"] == "pg"


class TestTrainingOptions:
    def test_no_flags_give_the_default_training_configs(self) -> None:
        from learner.train import PPOTrainingConfig
        from learner.train_dqn import DQNTrainingConfig

        assert command_from_args(TrainPPO, [], prog="t").to_config() == PPOTrainingConfig()
        assert command_from_args(TrainDQN, [], prog="t").to_config() == DQNTrainingConfig()

    def test_ppo_flags_set_their_component_fields(self) -> None:
        args = ["--env", "Acrobot-v1", "--num-env-runners", "3", "--env-runner.num-envs-per-env-runner", "2"]
        args += ["--rollout-fragment-length", "16", "--num-learners", "2", "--lr", "0.01", "--max-iterations", "5"]
        args += ["--target-return", "-100", "--seed", "7", "--ppo.no-standardize-advantages", "--ppo.grad-clip", "None"]
        cfg = command_from_args(TrainPPO, args, prog="t").to_config()
        runner = cfg.env_runner
        assert (runner.env, runner.num_envs_per_env_runner, runner.rollout_fragment_length, runner.seed) == (
            "Acrobot-v1",
            2,
            16,
            7,
        )
        assert runner.module_config["seed"] == 7
        assert (cfg.env_runner_group.num_env_runners, cfg.env_runner_group.num_cpus_per_env_runner) == (3, 0.5)
        assert (cfg.ppo.lr, cfg.ppo.seed, cfg.ppo.standardize_advantages, cfg.ppo.grad_clip) == (0.01, 7, False, None)
        assert (cfg.num_learners, cfg.max_iterations, cfg.target_return) == (2, 5, -100.0)

    def test_dqn_flags_set_their_component_fields(self) -> None:
        args = ["--num-env-runners", "1", "--env-runner-group.no-keep-sampling", "--lr", "0.01"]
        args += ["--hidden-sizes", "16", "16", "--dqn.target-update-every", "7", "--replay.min-size-to-sample", "1"]
        args += ["--replay.capacity-env-steps", "100", "--replay.no-prioritized", "--batch-size", "8", "--n-step", "1"]
        cfg = command_from_args(TrainDQN, [*args, "--seed", "3"], prog="t").to_config()
        assert cfg.env_runner.seed == 3 and cfg.env_runner.module_config == {"hidden_sizes": (16, 16), "seed": 3}
        assert (cfg.env_runner_group.num_env_runners, cfg.env_runner_group.keep_sampling) == (1, False)
        assert (cfg.dqn.lr, cfg.dqn.target_update_every) == (0.01, 7)
        replay = cfg.replay
        assert (replay.capacity_env_steps, replay.min_size_to_sample, replay.prioritized, replay.seed) == (
            100,
            1,
            False,
            3,
        )
        assert (cfg.batch_size, cfg.n_step) == (8, 1)

    def test_an_env_with_a_preset_gets_it_and_flags_override_it(self) -> None:
        from learner.presets import ppo_preset

        cfg = command_from_args(TrainPPO, ["--env", "Pendulum-v1"], prog="t").to_config()
        assert cfg == ppo_preset("Pendulum-v1", dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, lr=1.0)))
        assert (cfg.ppo.gamma, cfg.target_return, cfg.env_runner.normalize_actions) == (0.95, -300.0, True)
        cfg = command_from_args(TrainPPO, ["--env", "Pendulum-v1", "--ppo.gamma", "0.9"], prog="t").to_config()
        assert (cfg.ppo.gamma, cfg.ppo.lr) == (0.9, 3e-4)

    @pytest.mark.parametrize("env", ["pettingzoo:tictactoe_v3", "pettingzoo:classic.tictactoe_v3"])
    def test_a_pettingzoo_env_gets_its_preset_by_either_name(self, env: str) -> None:
        command = command_from_args(TrainPPO, ["--env", env], prog="t")
        cfg = command.to_config()
        assert (cfg.evaluation.evaluation_opponent, cfg.stop_on, cfg.target_return) == ("random", "evaluation", 0.75)
        line = preset_line(command)
        assert line is not None and line.startswith(f"preset {env} (learner/presets.py) sets: --max-env-steps 150000")
        assert "--evaluation.evaluation-opponent random, --stop-on evaluation" in line

    def test_a_run_on_an_env_with_a_preset_prints_the_preset_first(self, tmp_path: Path, ray_address: str) -> None:
        args = ["train", "--env", "Pendulum-v1", "--max-iterations", "1", "--num-env-runners", "1", "--lr", "1e-3"]
        out = run_cli(*args, "--target-return", "none", "--address", ray_address, runs_dir=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        assert lines[0].startswith("ray-sampler train: PPO on Pendulum-v1, 1 env runner x 4 sub-envs (")
        assert lines[1] == (
            "preset Pendulum-v1 (learner/presets.py) sets: --env-runner.rollout-fragment-length 256, "
            "env_runner.module_config.initial_log_std 0, --env-runner.normalize-actions, "
            "--ppo.lr 0.0003 (overridden: 0.001), --ppo.gamma 0.95, --ppo.lambda_ 0.1, --ppo.vf-clip-param 10, "
            "--ppo.num-epochs 6, --ppo.minibatch-size 64, --ppo.grad-clip None, "
            "--max-iterations 195 (overridden: 1), --target-return -300 (overridden: None); "
            "your flags and --config override it"
        )
        assert lines[2].startswith("no target return: the run uses its budget")

    def test_a_run_stopped_on_its_evaluations_says_so_first(self, tmp_path: Path, ray_address: str) -> None:
        out = run_cli(
            "train", "--env", "pettingzoo:tictactoe_v3", "--max-iterations", "1", "--address", ray_address,
            runs_dir=tmp_path,
        )  # fmt: skip
        assert out.returncode == 1, out.stderr[-2000:]  # one iteration: no evaluation, the target missed
        lines = out.stdout.splitlines()
        assert lines[1].startswith("preset pettingzoo:tictactoe_v3 (learner/presets.py) sets: --max-env-steps")
        assert lines[3] == (
            "stop once an evaluation's mean return reaches 0.75; the mean return of the last 100 finished "
            "episodes is reported"
        )

    @pytest.mark.parametrize(
        ("cls", "env", "resume"),
        [
            (TrainPPO, "CartPole-v1", None),
            (TrainPPO, "Acrobot-v1", None),
            (TrainPPO, "Pendulum-v1", Path("runs/x")),  # a resumed run's config comes whole from its config.toml
            (TrainDQN, "Acrobot-v1", None),
        ],
        ids=["cartpole", "acrobot", "resumed", "dqn"],
    )
    def test_no_preset_line_without_a_preset(self, cls: type[TrainPPO | TrainDQN], env: str, resume: Path) -> None:
        command = dataclasses.replace(command_from_args(cls, ["--env", env], prog="t"), resume=resume)
        assert preset_line(command) is None

    def test_enum_options_take_their_values_and_give_enums(self) -> None:
        from ray_sampler.resources import PlacementStrategy
        from ray_sampler.sampling.config import BatchMode

        args = ["--env-runner.batch-mode", "complete_episodes", "--env-runner-group.placement-strategy", "PACK"]
        cfg = command_from_args(TrainPPO, args, prog="t").to_config()
        assert cfg.env_runner.batch_mode is BatchMode.COMPLETE_EPISODES
        assert cfg.env_runner_group.placement_strategy is PlacementStrategy.PACK

    def test_a_config_file_gives_options_and_flags_after_it_override_them(self, tmp_path: Path) -> None:
        path = tmp_path / "run.toml"
        path.write_text(
            'env = "Acrobot-v1"\nmax_iterations = 9\ntarget_return = "none"\n[ppo]\nlr = 0.02\n'
            'num_epochs = 3\nstandardize_advantages = false\ngrad_clip = "none"\n'
            "[env_runner_group]\nnum_env_runners = 1\n"
        )
        cfg = command_from_args(TrainPPO, ["--config", str(path), "--ppo.num-epochs", "5"], prog="t").to_config()
        assert (cfg.env_runner.env, cfg.max_iterations, cfg.target_return) == ("Acrobot-v1", 9, None)
        assert (cfg.ppo.lr, cfg.ppo.num_epochs, cfg.ppo.standardize_advantages, cfg.ppo.grad_clip) == (
            0.02,
            5,
            False,
            None,
        )
        assert cfg.env_runner_group.num_env_runners == 1

    def test_the_resolved_options_read_back_as_a_config_file_give_the_same_command(self, tmp_path: Path) -> None:
        args = ["--env", "Acrobot-v1", "--seed", "4", "--ppo.grad-clip", "None", "--env-runner.batch-mode"]
        args += ["complete_episodes", "--hidden-sizes", "32", "8", "--no-env-check"]
        args += ["--env-runner-group.custom-resources-per-env-runner", "env_node", "0.5"]
        command = command_from_args(TrainPPO, args, prog="t")
        path = tmp_path / "config.toml"
        path.write_text(_toml(config_of(command)))
        again = command_from_args(TrainPPO, ["--config", str(path)], prog="t")
        assert again.to_config() == command.to_config()
        assert dataclasses.replace(again, config=None) == command

    def test_help_all_lists_every_option_with_its_doc_and_choices(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["train", "--help-all"])
        assert exit_info.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for flag in ("--env-runner-group.num-env-runners", "--ppo.lr", "--max-iterations", "--no-env-check"):
            assert flag in text
        assert "Adam learning rate." in text  # the field's docstring
        assert "{truncate_episodes,complete_episodes}" in text  # an enum's choices
        assert "``" not in text  # docstrings read as plain text


_ISSUE_NUMBER = re.compile(r"[Ii]ssue\s*#?\d|#\d+")


@pytest.mark.parametrize("argv", [[], *([name] for name in COMMANDS)], ids=["ray-sampler", *COMMANDS])
def test_help_names_no_issue_numbers(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # Help comes from the configs' docstrings: it describes the features, not the tickets behind them.
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())  # tyro's boxes wrap lines: join them again
    assert text.startswith("usage: ray-sampler")
    assert _ISSUE_NUMBER.findall(text) == []


def test_the_presets_docs_name_no_issue_numbers() -> None:
    import learner.presets

    docs = [learner.presets.__doc__ or "", learner.presets.ppo_preset.__doc__ or ""]
    assert _ISSUE_NUMBER.findall(" ".join(docs)) == []


def _toml(table: dict[str, Any], prefix: str = "") -> str:
    """A TOML text of a nested dict of plain values (None as "none"), for the round-trip test."""

    def value(v: Any) -> str:
        if v is None:
            return '"none"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines = [f"{k} = {value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines.append(f"[{prefix}{k}]")
            lines.append(_toml(v, f"{prefix}{k}."))  # a dict option's table: its KEY = VALUE lines
    return "\n".join(lines) + "\n"


def run_cli(*args: str, runs_dir: Path, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    argv = [sys.executable, "-m", "ray_sampler", *args, "--runs-dir", str(runs_dir)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)


@pytest.fixture(scope="module")
def budget_run(
    tmp_path_factory: pytest.TempPathFactory, ray_address: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One short run without a target and without checkpoints (``-v``), attached to the session's Ray,
    and its runs directory: TestExitCodes checks what it printed, TestResume resumes its run directory
    (which has no checkpoint)."""
    runs_dir = tmp_path_factory.mktemp("budget-run")
    args = ("train", "--max-iterations", "1", "--target-return", "none", "--num-env-runners", "1", "-v")
    return run_cli(*args, "--address", ray_address, runs_dir=runs_dir), runs_dir


def _no_ray(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("Ray was started for a command line that is wrong")


class TestExitCodes:
    """0: target reached or budget used without a target; 1: target missed; 2: usage; 130: Ctrl-C."""

    def test_a_run_without_a_target_that_uses_its_budget_exits_0(
        self, budget_run: tuple[subprocess.CompletedProcess[str], Path]
    ) -> None:
        out, _ = budget_run
        assert out.returncode == 0, out.stderr[-2000:]
        assert "Connecting to existing Ray cluster at address" in out.stderr  # -v: Ray's own lines show
        lines = out.stdout.splitlines()
        assert lines[1].startswith("no target return: the run uses its budget; ")
        assert lines[2].startswith("budget: 1 iterations or 500,000 env steps, the first reached; ")
        assert any(line.startswith("Budget used: mean return ") for line in lines)

    def test_a_run_that_reaches_its_target_exits_0(self, tmp_path: Path, ray_address: str) -> None:
        args = ["train", "--max-iterations", "3", "--target-return", "5", "--stop-window", "5"]
        args += ["--num-env-runners", "1", "--address", ray_address]  # attached: this test is about the exit code
        out = run_cli(*args, runs_dir=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert any(line.startswith("Target reached: mean return ") for line in out.stdout.splitlines())

    # A missed target (exit 1, "Target missed: mean return ...") is checked by
    # test_train_job_prints_progress_learns_and_keeps_a_run_directory.

    def test_a_missed_automatic_target_exits_1_with_a_hint_on_stderr(self, tmp_path: Path, ray_address: str) -> None:
        # A smoke run: CartPole-v1's reward_threshold (475) is the target, far out of reach in 1 iteration.
        args = ["train", "--max-iterations", "1", "--num-env-runners", "1", "--address", ray_address]
        out = run_cli(*args, runs_dir=tmp_path)
        assert out.returncode == 1, out.stderr[-2000:]
        assert out.stderr.strip().splitlines()[-1] == (
            "hint: the run had a target return (475, CartPole-v1's reward_threshold) and missed it, hence exit "
            "status 1; --target-return none runs the budget without a target"
        )
        assert "hint:" not in out.stdout

    @pytest.mark.parametrize(
        ("args", "source"),
        [
            ([], "475, CartPole-v1's reward_threshold"),
            (["--env", "Pendulum-v1"], "-300, the Pendulum-v1 preset's"),
            (["--target-return", "500"], "500, from --target-return or --config"),
            (["--env", "Pendulum-v1", "--target-return", "-200"], "-200, from --target-return or --config"),
        ],
        ids=["auto", "preset", "flag", "flag-over-preset"],
    )
    def test_the_hint_names_where_the_target_came_from(self, args: list[str], source: str) -> None:
        from learner.train import resolve_target

        command = command_from_args(TrainPPO, args, prog="t")
        target = resolve_target(command.env, command.training.target_return)
        missed = TrainResult(reached=False, target_return=target, mean_return=20.0, env_steps=1, seconds=1.0)
        assert target_hint(command, missed) == (
            f"hint: the run had a target return ({source}) and missed it, hence exit status 1; "
            "--target-return none runs the budget without a target"
        )
        assert target_hint(command, dataclasses.replace(missed, reached=True)) is None
        assert target_hint(command, dataclasses.replace(missed, target_return=None)) is None

    def test_a_usage_error_exits_2_with_one_line(self, tmp_path: Path) -> None:
        out = run_cli("train", "--stop-window", "0", runs_dir=tmp_path)
        assert out.returncode == 2
        assert out.stderr.strip().splitlines() == [
            "ray-sampler train: error: --stop-window must be an int >= 1 (got 0)"
        ]
        assert list(tmp_path.iterdir()) == []  # no run directory for a run that never started

    def test_ctrl_c_stops_the_actors_and_exits_130_without_a_traceback(self, tmp_path: Path, ray_address: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        args = ["train", "--max-iterations", "500", "--target-return", "none", "--runs-dir", str(tmp_path)]
        args += ["--address", ray_address]  # attached: its actors must stop though the cluster stays up
        args += ["--checkpoint-every", "1000"]  # none is due: the one saved is Ctrl-C's
        args += ["--num-env-runners", "1", "--rollout-fragment-length", "32"]  # short iterations
        proc = subprocess.Popen(
            [sys.executable, "-m", "ray_sampler", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            # As from a terminal: a suite run in the background of a shell (`.ci/run &`) ignores
            # SIGINT, and a child inherits that, so Ctrl-C would never reach it.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert proc.stdout is not None
        for line in proc.stdout:  # training has begun: runners and a learner are up
            if line.startswith("iter 2/500:"):
                break
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (rest[-2000:], err[-2000:])
        assert "Traceback" not in err + rest
        assert err.strip().splitlines()[-1] == "ray-sampler train: interrupted; actors stopped"
        assert "Interrupted: mean return " in rest  # the summary of what was done
        (run_dir,) = tmp_path.iterdir()
        rows = read_metrics(run_dir)
        assert len(rows) >= 2 and (run_dir / "curve.png").exists()
        (checkpoint,) = (run_dir / "checkpoints").iterdir()
        space = repr(gym.make("CartPole-v1").observation_space)
        saved = load_checkpoint(checkpoint, algo="ppo", env="CartPole-v1", observation_space=space)
        assert saved.iteration == rows[-1]["iteration"] and saved.env_steps == rows[-1]["env_steps"]
        for folder in (run_dir, checkpoint):  # the policy at Ctrl-C: the final one, and the checkpoint's
            assert Policy.from_checkpoint(folder).info["iteration"] == saved.iteration


class TestResume:
    def test_a_run_resumed_from_its_checkpoint_carries_on_its_counters_metrics_and_curve(
        self, tmp_path: Path, ray_address: str
    ) -> None:
        # Both runs attach to the session's Ray (--address): this test is about resuming, not starting Ray.
        args = ("--target-return", "none", "--num-env-runners", "1", "--rollout-fragment-length", "32")
        args += ("--address", ray_address)
        first = run_cli("train", "--max-iterations", "2", "--checkpoint-every", "1", *args, runs_dir=tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        (run_dir,) = tmp_path.iterdir()
        resumed = run_cli(
            "train",
            "--resume",
            str(run_dir),
            "--max-iterations",
            "3",
            "--address",
            ray_address,
            runs_dir=tmp_path / "unused",
        )
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert "resumed from iteration 2 (256 env steps)" in resumed.stdout.splitlines()
        assert [line.split(":")[0] for line in resumed.stdout.splitlines() if line.startswith("iter ")] == ["iter 3/3"]
        rows = read_metrics(run_dir)
        assert [r["iteration"] for r in rows] == [1, 2, 3] and [r["env_steps"] for r in rows] == [128, 256, 384]
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
            "ckpt-0000001",
            "ckpt-0000002",
            "ckpt-0000003",
        ]
        assert not (tmp_path / "unused").exists()  # the run went on in its own directory

    def test_resuming_with_another_algorithm_or_without_checkpoints_exits_2(
        self,
        budget_run: tuple[subprocess.CompletedProcess[str], Path],
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Both are refused before Ray starts (in this process: main() as the command line runs it).
        import ray_sampler.cli.train

        first, runs_dir = budget_run
        assert first.returncode == 0, first.stderr[-2000:]
        (run_dir,) = runs_dir.iterdir()  # a finished run, saved without --checkpoint-every
        monkeypatch.setattr(ray_sampler.cli.train, "ray_cluster", _no_ray)
        capsys.readouterr()
        with pytest.raises(SystemExit) as none:
            main(["train", "--resume", str(run_dir), "--runs-dir", str(runs_dir)])
        assert none.value.code == 2
        assert capsys.readouterr().err.strip() == (
            f"ray-sampler train: error: --resume: '{run_dir}' has no checkpoint (save some with --checkpoint-every N)"
        )
        with pytest.raises(SystemExit) as other:
            main(["train-dqn", "--resume", str(run_dir), "--runs-dir", str(runs_dir)])
        assert other.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"ray-sampler train-dqn: error: --resume: '{run_dir}' is not a run of this command (")
        assert [p.name for p in runs_dir.iterdir()] == [run_dir.name]  # no new run directory was made


class TestMultiAgent:
    def test_a_multi_agent_run_reports_every_module_and_resumes(self, tmp_path: Path, ray_address: str) -> None:
        args = ("--env", "ma-cartpole:2", "--policy-mapping", "per-agent", "--target-return", "none")
        args += ("--num-env-runners", "1", "--rollout-fragment-length", "32", "--address", ray_address)
        first = run_cli("train", *args, "--max-iterations", "2", "--checkpoint-every", "2", runs_dir=tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        lines = first.stdout.splitlines()
        assert lines[1] == "modules: 0, 1; summed return over every agent, and per module"
        iters = [line for line in lines if line.startswith("iter ")]
        assert len(iters) == 2 and all("summed return " in line and "; 0 " in line for line in iters)
        (run_dir,) = tmp_path.iterdir()
        rows = read_metrics(run_dir)
        for column in ("return/module/0", "return/module/1", "return/agent/0", "return/agent/1", "loss/policy_loss/1"):
            assert column in rows[0], column
        # Each module acts for one agent: its window is that agent's; the two sum to the summed return.
        last = rows[-1]
        assert last["return/module/0"] == last["return/agent/0"]
        assert last["return/module/0"] + last["return/module/1"] == pytest.approx(last["return_mean"])
        resumed = run_cli("train", "--resume", str(run_dir), "--max-iterations", "3", "--address", ray_address,
                          runs_dir=tmp_path / "unused")  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert "resumed from iteration 2 (256 env steps)" in resumed.stdout.splitlines()
        assert [r["iteration"] for r in read_metrics(run_dir)] == [1, 2, 3]
        other = run_cli("train", "--resume", str(run_dir), "--policy-mapping", "shared", runs_dir=tmp_path / "unused")
        assert other.returncode == 2 and other.stderr.strip().splitlines() == [
            "ray-sampler train: error: --policy-mapping: a resumed run keeps its modules: its config.toml has "
            "'per-agent', this command 'shared'"
        ]

    @pytest.mark.parametrize(
        ("cls", "args", "message"),
        [
            (TrainPPO, ["--policy-mapping", "per-agent"],
             "--policy-mapping: only a multi-agent env takes it (--env 'CartPole-v1' is single-agent)"),
            (TrainPPO, ["--env", "ma-cartpole:2", "--policy-mapping", "each"],
             "--policy-mapping: 'shared', 'by-spaces', 'per-agent' or 'module:Name' is allowed (got 'each')"),
            (TrainPPO, ["--env", "ma-cartpole:2", "--policy-mapping", "os:sep"],
             "--policy-mapping 'os:sep': a MultiAgentConfig or a policy_mapping_fn is allowed (got str)"),
            (TrainDQN, ["--policy-mapping", "shared"],
             "--policy-mapping: only a multi-agent env takes it (--env 'CartPole-v1' is single-agent)"),
            (TrainDQN, ["--env", "ma-cartpole:2"],
             "--replay.prioritized (the default): a multi-agent DQN run samples each module uniformly for now: "
             "pass --replay.no-prioritized"),
            (TrainDQN, ["--env", "ma-cartpole:2", "--replay.no-prioritized", "--centralized-critic"],
             "--centralized-critic: PPO's only (a value head on the global state; DQN has none)"),
            (TrainPPO, ["--env", "ma-cartpole:2", "--centralized-critic", "--global-state", "state"],
             "--global-state state: 'global_state' 'state' needs an env with state() and state_space "
             "(MultiAgentCartPole_v1 has neither): use 'concat'"),
            (TrainPPO, ["--env", "ma-cartpole:2", "--global-state", "state"],
             "--global-state state: only with --centralized-critic"),
        ],
    )  # fmt: skip
    def test_bad_multi_agent_options_are_one_line(self, cls: Any, args: list[str], message: str) -> None:
        with pytest.raises(ConfigError) as e:
            command = command_from_args(cls, args, prog="ray-sampler")
            cfg = command.to_config()
            from ray_sampler.cli.train import check_module_builds

            check_module_builds(command, cfg)
        assert str(e.value) == message

    def test_the_mapping_gives_the_modules(self) -> None:
        cfg = command_from_args(TrainPPO, ["--env", "ma-cartpole:3"], prog="ray-sampler").to_config()
        assert cfg.env_runner.multi_agent is not None and cfg.env_runner.multi_agent.module_ids == ("shared",)
        cfg = command_from_args(
            TrainPPO, ["--env", "ma-cartpole:3", "--policy-mapping", "per-agent"], prog="ray-sampler"
        ).to_config()
        assert cfg.env_runner.multi_agent is not None and cfg.env_runner.multi_agent.module_ids == ("0", "1", "2")

    def test_agents_whose_spaces_differ_get_a_module_per_pair_by_default(self) -> None:
        from ray_sampler.cli.train import modules_line

        args = ["--env", "pettingzoo:mpe2.simple_world_comm_v3"]
        ma = command_from_args(TrainPPO, args, prog="ray-sampler").to_config().env_runner.multi_agent
        assert ma is not None and ma.module_ids == ("leadadversary", "adversary", "agent")
        assert modules_line(ma) == (
            "modules: leadadversary (leadadversary_0), adversary (adversary_0, adversary_1, adversary_2), "
            "agent (agent_0, agent_1); a module per distinct pair of spaces; summed return over every agent, "
            "and per module"
        )
        shared = command_from_args(TrainPPO, [*args, "--policy-mapping", "per-agent"], prog="ray-sampler")
        assert shared.to_config().env_runner.multi_agent.module_ids[:2] == ("leadadversary_0", "adversary_0")


class TestBudgets:
    """The first lines say the budgets and what an iteration is; the summary what stopped the run."""

    @pytest.mark.parametrize(
        ("args", "line"),
        [
            ([], "budget: 500,000 env steps; an iteration: one update on a 1,024-step batch from every runner"),
            (
                ["--optimizer", "async_samples", "--rollout-fragment-length", "64", "--max-iterations", "600"],
                "budget: 600 iterations or 500,000 env steps, the first reached; "
                "an iteration: one update on one 256-step fragment",
            ),
            (
                ["--optimizer", "async_gradients", "--max-time-s", "90"],
                "budget: 500,000 env steps or 90 s, the first reached; "
                "an iteration: one gradient of one 512-step fragment applied",
            ),
            (
                ["--env-runner.batch-mode", "complete_episodes", "--max-env-steps", "None", "--max-iterations", "5"],
                "budget: 5 iterations; an iteration: one update on complete episodes of at least 1,024 env steps",
            ),
        ],
        ids=["ppo", "appo", "a3c", "complete-episodes"],
    )
    def test_the_budget_line_says_what_an_iteration_is(self, args: list[str], line: str) -> None:
        assert budget_line(command_from_args(TrainPPO, args, prog="t").to_config()) == line

    def test_dqn_takes_an_env_step_and_a_time_budget(self) -> None:
        cfg = command_from_args(TrainDQN, ["--max-env-steps", "20000", "--max-time-s", "600"], prog="t").to_config()
        assert (cfg.max_env_steps, cfg.max_time_s) == (20_000, 600.0)
        assert budget_line(cfg) == (
            "budget: 20,000 env steps or 600 s, the first reached; an iteration: one progress report (about one a "
            "second; the runners send every step to the replay)"
        )

    def test_the_summary_names_a_time_budget_without_thousands(self) -> None:
        cfg = command_from_args(TrainPPO, ["--max-time-s", "1.5"], prog="t").to_config()
        done = TrainResult(reached=False, mean_return=9.0, env_steps=1024, seconds=1.6, stopped_by="max_time_s")
        assert stopped_by_line(cfg, done) == "--max-time-s 1.5"


BROKEN_ENVS = """
import gymnasium as gym
import numpy as np


class _Env(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        self.config = config

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


class Broken(_Env):
    def reset(self, *, seed=None, options=None):
        raise ValueError("no start state")


class BrokenClose(_Env):
    def close(self):
        raise OSError("device busy")


class SecondSubEnvFails(_Env):
    def __init__(self, config=None):
        if config.vector_index == 1:
            raise ValueError("one sub-env only")
"""


class TestUserCodeErrors:
    """An env that raises in the checks before the actors start: one line naming its class and call,
    exit status 2, and no run directory."""

    @pytest.fixture
    def broken_envs(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
        name = f"broken_envs_{tmp_path.name.replace('-', '_')}"  # a module of its own for each test
        (tmp_path / f"{name}.py").write_text(BROKEN_ENVS)
        monkeypatch.syspath_prepend(str(tmp_path))
        return name

    @pytest.mark.parametrize(
        ("env", "flags", "message"),
        [
            ("Broken", [], "Broken.reset() raised ValueError: no start state"),
            ("BrokenClose", ["--no-env-check"], "BrokenClose.close() raised OSError: device busy"),
        ],
        ids=["reset-in-the-env-check", "close-after-a-probe"],
    )
    def test_is_one_line_naming_the_class_and_the_call_and_exit_2(
        self,
        broken_envs: str,
        env: str,
        flags: list[str],
        message: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        import ray

        monkeypatch.setattr(ray, "init", _no_ray)
        with pytest.raises(SystemExit) as exited:
            main(["train", "--env", f"{broken_envs}:{env}", *flags, "--runs-dir", str(tmp_path / "runs")])
        assert exited.value.code == 2
        assert capsys.readouterr().err.splitlines() == [
            f"ray-sampler train: error: --env '{broken_envs}:{env}': {message}"
        ]
        assert not (tmp_path / "runs").exists()

    @pytest.mark.usefixtures("ray_session")
    def test_an_env_the_runner_groups_own_check_refuses_leaves_no_run_directory(
        self, broken_envs: str, tmp_path: Path
    ) -> None:
        """The driver's checks build one sub-env; the runner group's, after the run directory is made,
        build two: the second raises, and the new run directory goes with the error."""
        args = ["--env", f"{broken_envs}:SecondSubEnvFails", "--no-env-check", "--runs-dir", str(tmp_path / "runs")]
        command = command_from_args(TrainPPO, [*args, "--num-env-runners", "1", "--plain"], prog="t")
        with pytest.raises(UsageError) as raised:
            run_training(command)
        message = (
            f"--env '{broken_envs}:SecondSubEnvFails': SecondSubEnvFails.__init__() raised ValueError: one sub-env only"
        )
        assert str(raised.value) == message
        assert list((tmp_path / "runs").iterdir()) == []
