"""Each example runs with a tiny budget; what it prints is checked, not only its exit code.

Those that call ``ray.init()`` attach to the session's Ray through ``RAY_ADDRESS`` (``ray.init``
reads it, and so does the examples' ``--address``) rather than start one each: the example's code
runs the same; the embedded start is tested with the command line (tests/ray_sampler/cli)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, ray_address: str | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def test_custom_env_train_example_trains_ppo_on_its_env_class(ray_address: str) -> None:
    budget = ["--size", "3", "--target", "0.9", "--max-iterations", "8"]
    lines = run("custom_env_train.py", *budget, ray_address=ray_address)
    assert lines[0].startswith("iter 1: 400 env steps, mean return ")
    # A corridor of 3 with a time limit of 12: PPO finds the light in a few iterations.
    assert re.fullmatch(r"mean return (0\.9\d|1\.00) after \d+ env steps \(reached: True\)", lines[-1]), lines[-3:]


def test_custom_env_creator_example(ray_address: str) -> None:
    lines = run(
        "custom_env_creator.py",
        "--num-env-runners",
        "2",
        "--num-envs-per-env-runner",
        "2",
        "--iterations",
        "1",
        "--rollout-fragment-length",
        "30",
        ray_address=ray_address,
    )
    assert re.fullmatch(r"iter 1: \d+ finished episodes, \d+ env steps", lines[0])
    assert any(line.startswith("pole half-length 0.50: ") for line in lines)
    assert lines[-1] == (
        "episodes came from 4 distinct (worker_index, vector_index) pairs: [(1, 0), (1, 1), (2, 0), (2, 1)]"
    )


def test_scale_env_runners_example(ray_address: str) -> None:
    lines = run(
        "scale_env_runners.py",
        "--schedule",
        "1,2,1",
        "--num-envs-per-env-runner",
        "2",
        "--rollout-fragment-length",
        "10",
        ray_address=ray_address,  # it honours RAY_ADDRESS as its --address does (ray_cluster)
    )
    assert lines[0] == f"scaling env runners 1,2,1 on a Ray cluster at {ray_address} (4 CPUs)"
    pattern = r"iter (\d): (\d) runners (\[[\d, ]+\]) on 1 node\(s\), scale took [\d.]+ s, (\d+) env steps \(ok\), "
    pattern += r"\d+ episodes done"
    parsed = [re.fullmatch(pattern, line).groups() for line in lines[1:4]]  # type: ignore[union-attr]
    assert parsed == [("1", "1", "[1]", "20"), ("2", "2", "[1, 2]", "40"), ("3", "1", "[1]", "20")]
    assert lines[-1] == "total: 80 env steps over 3 iterations; expected 80"


def test_offline_data_example(tmp_path: Path, ray_address: str) -> None:
    out = tmp_path / "offline.parquet"
    args = ("--iterations", "2", "--rollout-fragment-length", "16", "--out", str(out))
    lines = [
        line
        for line in run("offline_data.py", *args, ray_address=ray_address)
        if re.match(r"(iter|saved|pyarrow|ray\.data|restored)", line)
    ]
    assert lines[0] == "iter 1: 128 env steps shipped, 128 stored"
    assert lines[1] == "iter 2: 128 env steps shipped, 256 stored"
    assert re.fullmatch(rf"saved 256 env steps of \d+ episodes to {re.escape(str(out))}", lines[2])
    assert re.fullmatch(r"pyarrow: \d+ rows, columns episode_index, .*; 256 rows with an action", lines[3])
    assert re.fullmatch(r"ray\.data: \d+ rows, mean reward 1\.00", lines[4])
    assert lines[5].startswith("restored buffer: 256 env steps, ")
    assert out.exists()


def test_train_cartpole_example_trains_and_prints_its_progress(ray_address: str) -> None:
    # Its training is ``ray-sampler train``'s, same config and seed: that it learns is checked by
    # tests/ray_sampler/cli/test_cli.py::test_train_job_prints_progress_learns_and_keeps_a_run_directory.
    lines = run("train_cartpole.py", "--max-iterations", "2", "--num-env-runners", "2", ray_address=ray_address)
    assert lines[0] == "PPO on CartPole-v1: 2 env runners x 4 sub-envs, one local learner(s), seed 0"
    iters = [line for line in lines if line.startswith("iter ")]
    assert [line.split(":")[0] for line in iters] == ["iter 1", "iter 2"]
    assert iters[0].startswith("iter 1: 1024 env steps, mean return ")
    # The runners got the weights of both updates (v1: those they started with).
    assert iters[1].startswith("iter 2: 2048 env steps, mean return ") and ", weights v3, " in iters[1]
    first = float(re.search(r"mean return ([\d.]+)", iters[0]).group(1))  # type: ignore[union-attr]
    assert first < 40  # random play averages about 22
    assert lines[-1].startswith("did not reach mean return 475: ")


def test_train_cartpole_dqn_example_runs_through_the_replay(ray_address: str) -> None:
    lines = run(
        "train_cartpole_dqn.py",
        "--max-env-steps",
        "3000",
        "--replay.min-size-to-sample",
        "500",
        "--replay.no-prioritized",
        "--num-env-runners",
        "2",
        ray_address=ray_address,
    )
    assert lines[0] == (
        "DQN on CartPole-v1: 2 env runners x 4 sub-envs -> uniform replay -> one local learner(s), seed 0"
    )
    progress = [line for line in lines if re.match(r"\d+ env steps, mean return ", line)]
    assert progress and re.search(r", epsilon [\d.]+, \d+ updates, loss [\d.na]+, weights v\d+, ", progress[-1])
    assert lines[-2].startswith("did not reach mean return 475: ") and "after 3072 env steps" in lines[-2]
    sent = re.fullmatch(r"replay received (\d+) env steps; the runners reported (\d+)", lines[-1]).groups()  # type: ignore[union-attr]
    assert sent[0] == sent[1] and int(sent[0]) >= 3072


def test_stateless_cartpole_example_trains_a_torch_lstm(ray_address: str) -> None:
    # That the preset learns is bench/lstm_bench.py's (minutes); the quick learning signal of a
    # recurrent module is tests/learner/test_recurrent_ppo.py. Here: the preset runs end to end on Ray.
    lines = run("stateless_cartpole.py", "--max-iterations", "2", ray_address=ray_address)
    assert lines[0] == (
        "PPO (torch) with TorchLSTMModule on StatelessCartPole-v1: 2 env runners x 4 sub-envs, "
        "sequences of 20 steps, observation filter mean_std"
    )
    iters = [line for line in lines if line.startswith("iter ")]
    assert [line.split(":")[0] for line in iters] == ["iter 1", "iter 2"] and ", weights v3, " in iters[1]
    assert lines[-1].startswith("did not reach mean return 350: ")


def test_custom_torch_module_example_trains_the_users_module(ray_address: str) -> None:
    lines = run("custom_torch_module.py", "--max-iterations", "2", ray_address=ray_address)
    assert lines[0] == "PPO (torch) with the user module SharedTrunkModule on CartPole-v1"
    iters = [line for line in lines if line.startswith("iter ")]
    assert iters[1].startswith("iter 2: 2048 env steps, mean return ") and ", weights v3, " in iters[1]
    assert lines[-1].startswith("did not reach mean return 475: ")


def test_minigrid_ppo_example_trains_on_the_filtered_dict_observation(ray_address: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_ADDRESS"] = ray_address
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "minigrid_ppo.py"), "--max-iterations", "2", "--num-env-runners", "1"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]  # two iterations miss the target: exit 1
    lines = proc.stdout.splitlines()
    assert lines[0] == "PPO on MiniGrid-Empty-5x5-v0: observations image + direction (mission dropped), target 0.9"
    assert [line.split(":")[0] for line in lines if line.startswith("iter ")] == ["iter 1", "iter 2"]
    assert "iter 2: 1024 env steps" in proc.stdout


def test_multi_agent_sample_example_samples_pettingzoo_games_and_joins_the_chunks(ray_address: str) -> None:
    args = ["--env", "simple_spread", "--shared", "--iterations", "2"]
    lines = run("multi_agent_sample.py", *args, ray_address=ray_address)
    assert lines[0].startswith("sampling simple_spread with 2 runners on a ") and lines[0].endswith(
        "modules ['shared']"
    )
    # 2 runners x 4 sub-envs x 50 steps; 3 agents act at every step; every episode is 25 steps long.
    assert lines[1:3] == [f"iter {i}: 400 env steps, 1200 agent steps, 16 episodes done" for i in (1, 2)]
    for agent in ("agent_0", "agent_1", "agent_2"):
        assert any(re.fullmatch(rf"agent {agent}: 32 episodes, mean return -\d+\.\d\d", line) for line in lines)
    # The shared module's return in an episode sums its three agents'.
    assert re.fullmatch(r"module shared: mean return -\d+\.\d\d over 32 episodes", lines[-2])
    assert lines[-1] == "32 chunks joined into 32 episodes, 32 finished"  # 50 steps: two whole episodes a call


def test_multi_agent_cartpole_example_trains_two_policies(ray_address: str) -> None:
    lines = run("multi_agent_cartpole.py", "--target", "150", "--max-iterations", "40", ray_address=ray_address)
    assert lines[0].startswith("iter 1: 1024 env steps, mean return ")
    assert re.fullmatch(
        r"summed return (1[5-9]\d|[2-9]\d\d)\.\d after \d+ env steps \(\d+ agent steps\) in [\d.]+ s "
        r"\(reached: True\); "
        r"per module over the last 100 episodes: p0 [\d.]+, p1 [\d.]+",
        lines[-1],
    ), lines[-3:]


def test_tictactoe_self_play_example_grows_its_league_and_plays_the_random_player(ray_address: str) -> None:
    args = ["--iterations", "2", "--snapshot-every", "1", "--games", "40"]
    lines = run("tictactoe_self_play.py", *args, ray_address=ray_address)
    assert "iteration 1: main_v1 joins the league ['random', 'main_v1']" in lines
    last_iter = [line for line in lines if line.startswith("iter 2:")]
    assert last_iter and "main_v1 " in last_iter[0]  # the added copy acted (it has a return)
    m = re.fullmatch(
        r"trained 4096 env steps in \d+ s; against a random player over 40 games: won ([\d.]+)%, drew ([\d.]+)%, "
        r"lost ([\d.]+)% \(won [\d.]+% moving first, [\d.]+% moving second\)",
        lines[-1],
    )
    assert m is not None, lines[-3:]
    assert sum(float(x) for x in m.groups()) == pytest.approx(100.0, abs=0.2)


def test_pettingzoo_simple_spread_example_trains_one_shared_policy_with_a_centralized_critic(ray_address: str) -> None:
    lines = run("pettingzoo_simple_spread.py", "--env-steps", "4000", "--centralized-critic", ray_address=ray_address)
    assert re.fullmatch(
        r"per agent -\d+\.\d\d over the last 100 episodes after 4000 env steps in \d+ s \(random play: about -26\.5\)",
        lines[-1],
    ), lines[-3:]
    assert lines[-2].startswith("budget used (no target): summed return -")


def test_tune_example_sweeps_two_dqn_trials_with_their_checkpoints(tmp_path: Path, ray_address: str) -> None:
    """Two DQN trials (the replay in each trial, its file in each checkpoint), then the best."""
    args = ["--algo", "dqn", "--lrs", "1e-3", "5e-4", "--budget", "600", "--results", str(tmp_path)]
    lines = run("tune_ppo_cartpole.py", *args, ray_address=ray_address)
    trials = [line for line in lines if line.startswith("dqn.lr ")]
    assert len(trials) == 2, lines[-5:]
    for lr, line in zip(("0.0005", "0.001"), trials, strict=True):
        assert re.fullmatch(rf"dqn\.lr {lr}: mean return \d+\.\d after \d+ env steps \(checkpoint: yes\)", line)
    assert re.fullmatch(r"best: dqn\.lr (0\.001|0\.0005), mean return \d+\.\d", lines[-1])
    replays = sorted(tmp_path.glob("dqn/*/checkpoint_*/run/checkpoints/*/replay.parquet"))
    assert {p.parts[-6] for p in replays} and len(
        {p.parts[-6] for p in replays}
    ) == 2  # each trial's checkpoints hold its replay


def test_step_evaluate_load_example_steps_evaluates_saves_and_plays_the_loaded_policy(
    ray_address: str, tmp_path: Path
) -> None:
    args = ["--iterations", "4", "--evaluate-every", "2", "--episodes", "2", "--out", str(tmp_path)]
    lines = run("step_evaluate_load.py", *args, ray_address=ray_address)
    evaluated = [line for line in lines if line.startswith("iter ")]
    assert [line.split(":")[0] for line in evaluated] == ["iter 2", "iter 4"]
    assert all(re.search(r"greedy return [\d.]+ over 2 episodes$", line) for line in evaluated)
    assert lines[-2] == f"checkpoint: {tmp_path / 'ckpt-0000004'}"
    assert re.fullmatch(r"the loaded policy's greedy episode: return \d+", lines[-1])
    assert (tmp_path / "ckpt-0000004" / "policy" / "policy.json").is_file()
