"""The ``ray-sampler`` commands: what they print, their config errors, and the training flags
composed into the nested training configs."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from ray_sampler.cli import DemoConfig, DQNTrainArgs, PPOTrainArgs, add_config_arguments, main
from ray_sampler.errors import ConfigError


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


def test_sample_job_prints_a_line_per_iteration() -> None:
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
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "ray-sampler sample: CartPole-v1, 2 env runners x 2 sub-envs, truncate_episodes, "
        "2 iterations (local Ray cluster)"
    )
    assert lines[1].startswith("iter 1: 64 env steps, ") and "runners 1: " in lines[1] and ", 2: " in lines[1]
    assert lines[2].startswith("iter 2: 64 env steps, ")
    assert lines[3].startswith("total: 128 env steps in ")


def test_train_job_prints_progress_and_learns() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ray_sampler", "train", "--max-iterations", "6", "--num-env-runners", "2"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 1, out.stderr[-2000:]  # the target (CartPole-v1's reward_threshold) was missed
    lines = out.stdout.splitlines()
    assert lines[0] == "ray-sampler train: PPO on CartPole-v1, 2 env runners x 8 sub-envs (local Ray cluster)"
    assert lines[1] == "stop once the mean return of the last 100 finished episodes reaches 475"
    iters = [line for line in lines if line.startswith("iter ")]
    assert len(iters) == 6 and iters[0].startswith("iter 1: 2048 env steps, mean return ")
    assert lines[-1].startswith("did not reach mean return 475: ") and "after 12288 env steps" in lines[-1]
    final = float(lines[-1].split(": ")[1].split(" ")[0])
    assert final > 60  # random play averages about 22


def test_config_arguments_parse_booleans_and_types() -> None:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, DQNTrainArgs)
    args = parser.parse_args(["--prioritized", "false", "--keep-sampling", "0", "--lr", "0.01", "--n-step", "2"])
    assert (args.prioritized, args.keep_sampling, args.lr, args.n_step) == (False, False, 0.01, 2)
    assert parser.parse_args(["--prioritized", "True"]).prioritized is True
    assert parser.parse_args([]).prioritized is True  # the config's default
    with pytest.raises(SystemExit):
        parser.parse_args(["--prioritized", "maybe"])


class TestTrainingFlags:
    def test_default_flags_give_the_default_training_configs(self) -> None:
        from learner.train import PPOTrainingConfig
        from learner.train_dqn import DQNTrainingConfig

        assert PPOTrainArgs().to_config() == PPOTrainingConfig()
        assert DQNTrainArgs().to_config() == DQNTrainingConfig()

    def test_ppo_flags_set_their_component_fields(self) -> None:
        cfg = PPOTrainArgs(
            env="Acrobot-v1",
            num_env_runners=3,
            num_envs_per_env_runner=2,
            rollout_fragment_length=16,
            num_learners=2,
            lr=0.01,
            max_iterations=5,
            target_return=-100.0,
            seed=7,
        ).to_config()
        runner = cfg.env_runner
        assert (runner.env, runner.num_envs_per_env_runner, runner.rollout_fragment_length, runner.seed) == (
            "Acrobot-v1",
            2,
            16,
            7,
        )
        assert (cfg.env_runner_group.num_env_runners, cfg.env_runner_group.num_cpus_per_env_runner) == (3, 0.5)
        assert (cfg.ppo.lr, cfg.ppo.seed) == (0.01, 7)
        assert (cfg.num_learners, cfg.max_iterations, cfg.target_return) == (2, 5, -100.0)

    def test_dqn_flags_set_their_component_fields(self) -> None:
        cfg = DQNTrainArgs(
            num_env_runners=1,
            keep_sampling=False,
            lr=0.01,
            hidden_size=16,
            target_update_every=7,
            learning_starts=0,
            replay_capacity=100,
            prioritized=False,
            batch_size=8,
            n_step=1,
            seed=3,
        ).to_config()
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

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"learning_starts": -1}, r"'learning_starts' must be an int >= 0 and <= 50000 \(got -1\)"),
            ({"learning_starts": 100, "replay_capacity": 50}, r"'learning_starts' must be an int >= 0 and <= 50"),
            ({"learning_starts": True}, r"'learning_starts' must be an int"),
            ({"hidden_size": 0}, r"'hidden_size' must be an int >= 1 \(got 0\)"),
        ],
        ids=["negative", "above_capacity", "bool", "hidden"],
    )
    def test_flags_that_are_not_one_field_are_checked_by_name(self, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            DQNTrainArgs(**kwargs)

    def test_a_bad_flag_names_its_field(self) -> None:
        with pytest.raises(ConfigError, match=r"'rollout_fragment_length' must be an int >= 1 \(got 0\)"):
            PPOTrainArgs(rollout_fragment_length=0).to_config()
        with pytest.raises(ConfigError, match=r"'lr' must be a finite number > 0 \(got nan\)"):
            DQNTrainArgs(lr=float("nan")).to_config()


def run_cli(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [sys.executable, "-m", "ray_sampler", *args], capture_output=True, text=True, timeout=timeout_s, env=env
    )


class TestExitCodes:
    """0: target reached or budget used without a target; 1: target missed; 2: usage; 130: Ctrl-C."""

    def test_a_run_without_a_target_that_uses_its_budget_exits_0(self) -> None:
        out = run_cli("train", "--max-iterations", "1", "--target-return", "none", "--num-env-runners", "1")
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        assert lines[1].startswith("no target return: the run uses its budget; ")
        assert lines[-1].startswith("budget used (no target): mean return ")

    def test_a_run_that_reaches_its_target_exits_0(self) -> None:
        out = run_cli("train", "--max-iterations", "3", "--target-return", "5", "--stop-window", "5")
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.splitlines()[-1].startswith("reached mean return 5: ")

    def test_a_usage_error_exits_2_with_one_line(self) -> None:
        out = run_cli("train", "--stop-window", "0")
        assert out.returncode == 2
        assert out.stderr.strip().splitlines() == [
            "ray-sampler train: error: 'stop_window' must be an int >= 1 (got 0)"
        ]

    def test_ctrl_c_stops_the_actors_and_exits_130_without_a_traceback(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "ray_sampler", "train", "--max-iterations", "500", "--target-return", "none"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        for line in proc.stdout:  # training has begun: runners and a learner are up
            if line.startswith("iter 2:"):
                break
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err[-2000:]
        assert "Traceback" not in err + rest
        assert err.strip().splitlines()[-1] == "ray-sampler train: interrupted; actors stopped"
