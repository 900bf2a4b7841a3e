"""PPOTrainingConfig: the component configs it holds, its defaults (today's default run) and its
checks; the ReturnTracker's stop rule."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from learner.checkpoint import Checkpointer, load_checkpoint
from learner.learner import PPOConfig
from learner.metrics import StopReason
from learner.train import PPOTrainingConfig, ReturnTracker, budget_used, resolve_target, train_ppo
from ray_sampler.errors import ConfigError
from ray_sampler.policy import Policy
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig


def test_default_config_is_the_default_run() -> None:
    cfg = PPOTrainingConfig()
    # The values the flat config of before issue #6 had (and the loop derived), field by field.
    assert cfg.env_runner == EnvRunnerConfig(
        env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=128, seed=0
    )
    assert cfg.env_runner_group == EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    # issue #9 tuned these for sample efficiency (were 8 sub-envs, lr 1e-3, minibatches of 256, 60 iterations)
    assert cfg.ppo == PPOConfig(lr=2e-3, minibatch_size=128, seed=0)
    assert (cfg.num_learners, cfg.num_cpus_per_learner) == (0, 0.5)
    # Budgets in env steps, the same for every optimizer (was 120 iterations: 30,720 env steps for APPO)
    assert (cfg.max_iterations, cfg.max_env_steps, cfg.max_time_s) == (None, 500_000, None)
    assert (cfg.target_return, cfg.stop_window) == ("auto", 100)  # the env's reward_threshold, over 100 episodes


def test_component_configs_are_replaced_whole() -> None:
    cfg = dataclasses.replace(PPOTrainingConfig(), ppo=PPOConfig(lr=3e-4, num_epochs=4))
    assert cfg.ppo.lr == 3e-4 and cfg.ppo.num_epochs == 4 and cfg.env_runner == PPOTrainingConfig().env_runner


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_iterations": 0}, r"'max_iterations' must be an int >= 1 \(got 0\)"),
        ({"max_iterations": True}, r"'max_iterations' must be an int >= 1 \(got True\)"),
        ({"max_env_steps": 0}, r"'max_env_steps' must be an int >= 1 \(got 0\)"),
        ({"max_time_s": 0.0}, r"'max_time_s' must be a finite number > 0 \(got 0.0\)"),
        (
            {"max_env_steps": None},
            r"give a budget: 'max_iterations', 'max_env_steps', 'max_time_s' may not all be None",
        ),
        ({"num_learners": True}, r"'num_learners' must be an int >= 0 \(got True\)"),
        ({"num_learners": "2"}, r"'num_learners' must be an int >= 0 \(got '2'\)"),
        ({"target_return": float("nan")}, r"'target_return' must be a finite number, 'auto' or None \(got nan\)"),
        ({"num_cpus_per_learner": float("inf")}, r"'num_cpus_per_learner' must be a finite number >= 0 \(got inf\)"),
        (
            {"env_runner_group": EnvRunnerGroupConfig(num_env_runners=0)},
            r"'env_runner_group.num_env_runners' must be an int >= 1 \(got 0\)",
        ),
        ({"env_runner": "CartPole-v1"}, r"'env_runner' must be an EnvRunnerConfig \(got str\)"),
        ({"ppo": {"lr": 1e-3}}, r"'ppo' must be a PPOConfig \(got dict\)"),
    ],
    ids=[
        "zero_iterations",
        "bool_iterations",
        "zero_env_steps",
        "zero_time",
        "no_budget",
        "bool_learners",
        "str_learners",
        "nan_target",
        "inf_cpus",
        "no_runners",
        "runner_not_a_config",
        "ppo_not_a_config",
    ],
)
def test_bad_ppo_training_config_raises(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PPOTrainingConfig(**kwargs)


def test_a_training_config_takes_a_creator_as_its_env() -> None:
    """Any form EnvRunnerConfig takes (tests/ray_sampler/sampling/test_env_forms.py trains each)."""
    creator = lambda ctx: gym.make("CartPole-v1")  # noqa: E731
    assert PPOTrainingConfig(env_runner=EnvRunnerConfig(env=creator)).env_runner.env is creator


def test_return_tracker_is_reached_only_with_a_full_window_at_the_target() -> None:
    tracker = ReturnTracker(10.0, window=3)
    tracker.add([20.0, 20.0])
    assert not tracker.reached and tracker.mean == 20.0
    tracker.add([5.0])
    assert tracker.reached and tracker.count == 3
    lines: list[str] = []
    result = tracker.finish(42, lines.append)
    assert (result.reached, result.mean_return, result.env_steps) == (True, 15.0, 42)
    assert lines[0].startswith("reached mean return 10: 15.0 (last 3 episodes) after 42 env steps in ")
    assert result.target_return == 10.0


def test_without_a_target_the_tracker_is_never_reached_and_says_the_budget_was_used() -> None:
    tracker = ReturnTracker(None, window=2)
    tracker.add([1e9, 1e9])
    lines: list[str] = []
    result = tracker.finish(7, lines.append)
    assert (result.reached, result.target_return, result.mean_return) == (False, None, 1e9)
    assert lines[0].startswith("budget used (no target): mean return 1000000000.0 (last 2 episodes) after 7 env steps")
    assert tracker.describe().startswith("no target return: the run uses its budget; ")


@pytest.mark.parametrize(
    ("env", "target", "expected"),
    [
        ("CartPole-v1", "auto", 475.0),
        ("CartPole-v1", 450.0, 450.0),
        ("CartPole-v1", None, None),
        ("Pendulum-v1", "auto", None),
        ("Pendulum-v1", -300.0, -300.0),
    ],
    ids=["spec", "set", "none", "none-in-spec", "set-without-spec"],
)
def test_the_target_defaults_to_the_env_specs_reward_threshold(
    env: str, target: float | str | None, expected: float | None
) -> None:
    assert resolve_target(env, target) == expected


def kill_runner(worker_index: int) -> None:
    """Kills the (only) live runner actor named for ``worker_index``."""
    import ray

    names = [n for n in ray.util.list_named_actors() if n.endswith(f"-env-runner-{worker_index}")]
    ray.kill(ray.get_actor(names[0]))


@pytest.mark.usefixtures("ray_session")
def test_ppo_keeps_training_through_a_killed_runner_and_logs_the_recovery(tmp_path: Path) -> None:
    """Also: the run's end is a checkpoint though none was due then, and its final policy (with the
    mean/std filter's merged moments) is the one that checkpoint holds, written to ``policy_dir``."""
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=32, seed=0),
        env_runner_group=EnvRunnerGroupConfig(
            num_env_runners=2, num_cpus_per_env_runner=0.5, delay_between_env_runner_restarts_s=0.0
        ),
        ppo=PPOConfig(observation_filter="mean_std"),
        max_iterations=3,
        target_return=10_000.0,
    )
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("iter 1:"):
            kill_runner(1)

    checkpointer = Checkpointer(tmp_path / "checkpoints", every=2)
    result = train_ppo(cfg, log=log, checkpointer=checkpointer, policy_dir=tmp_path / "policy")
    assert result.iterations == 3 and 0.0 < result.runner_utilization <= 1.0
    (failure,) = [i for i, line in enumerate(lines) if line.startswith("runner ")]
    assert re.fullmatch(r"runner 1 died \(ActorDiedError: .*\); restarted \(restart 1 of 1000\)", lines[failure])
    assert lines[failure - 1].startswith("iter 1:") and lines[failure + 1].startswith("iter 2:")
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["ckpt-0000002", "ckpt-0000003"]
    space = repr(gym.make("CartPole-v1").observation_space)
    last = load_checkpoint(
        tmp_path / "checkpoints" / "ckpt-0000003", algo="ppo", env="CartPole-v1", observation_space=space
    )
    for policy in (result.policy, Policy.from_checkpoint(tmp_path / "policy"), Policy.from_checkpoint(tmp_path)):
        assert policy.info["iteration"] == 3 and policy.info["env_steps"] == last.env_steps == 3 * 128
        weights = policy.module.get_state()
        assert weights.keys() == last.learner["module"].keys()
        assert all(np.array_equal(weights[k], last.learner["module"][k]) for k in weights)  # saved bytes: exact
        moments = policy.env_to_module.get_state()["MeanStdFilter"]  # as the runners merged them
        assert moments["global"]["count"] == last.connector_states["MeanStdFilter"]["global"]["count"] > 0


@pytest.mark.usefixtures("ray_session")
def test_ppo_keeps_training_through_a_sub_env_failure_and_logs_the_recovery() -> None:
    from tests.ray_sampler.sampling.faults import FAULTY_STAMP_ID, FaultPlan

    # The sub-env's 2nd step raises: its first episode (1 step made, none shipped) is dropped. The
    # runner registers the id when it unpickles the plan (importing the faults module).
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env=FAULTY_STAMP_ID,
            env_config={"plan": FaultPlan(steps={(0, 2)})},
            num_envs_per_env_runner=1,
            rollout_fragment_length=16,
            seed=0,
            restart_failed_sub_environments=True,
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5),
        max_iterations=2,
        target_return=10_000.0,
    )
    lines: list[str] = []
    result = train_ppo(cfg, log=lines.append)
    assert result.iterations == 2
    assert [line for line in lines if line.startswith("runner ")] == [
        "runner 1: 1 sub-env restart; 1 env step and 1 episode dropped"
    ]
    assert lines[1].startswith("iter 1:")


def run_multinode_scenario(*strategies: str) -> dict[str, Any]:
    """tests/learner/multinode_scenario.py in its own process (it joins its own 3-node Cluster and
    trains once per strategy on it): strategy -> its findings."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.learner.multinode_scenario", *strategies],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def multinode() -> dict[str, Any]:
    """One 3-node cluster for both strategies (a run gives back every CPU before the next starts)."""
    return run_multinode_scenario("SPREAD", "PACK")


def test_spread_runners_train_on_every_node_of_a_three_node_cluster(multinode: dict[str, Any]) -> None:
    found = multinode["SPREAD"]
    assert sorted(found["runner_nodes"].values()) == found["node_ids"]  # one runner on each node
    assert found["num_updates"] == 3 and found["env_steps"] == 3 * 3 * 4 * 64
    assert found["lines"][-1].startswith("did not reach mean return 475: ")
    assert found["cpus_back_after_stop"]


def test_packed_runners_share_nodes(multinode: dict[str, Any]) -> None:
    found = multinode["PACK"]
    assert len(found["runner_nodes"]) == 3 and len(set(found["runner_nodes"].values())) == 2  # 2 CPUs a node
    assert found["num_updates"] == 3
    assert found["cpus_back_after_stop"]


def test_view_pieces_are_the_learner_twins_of_the_runners_pieces_in_order() -> None:
    from connectors.common import MeanStdFilter
    from connectors.env_to_module import FrameStackingEnvToModule, PrevActionsPrevRewardsEnvToModule
    from connectors.learner import FrameStacking, PrevActionsPrevRewards
    from learner.train import view_pieces

    def plain(**kwargs: Any) -> Any:
        return kwargs["batch"]

    pieces = view_pieces((PrevActionsPrevRewardsEnvToModule(n_prev_actions=2), plain, MeanStdFilter(),
                          FrameStackingEnvToModule(num_frames=3)))  # fmt: skip
    assert [type(p) for p in pieces] == [PrevActionsPrevRewards, FrameStacking]
    assert pieces[1].num_frames == 3


@pytest.mark.usefixtures("ray_session")
def test_ppo_with_frame_stacking_trains_on_the_stacks_the_runners_acted_on() -> None:
    from connectors.env_to_module import FrameStackingEnvToModule
    from learner.learner import ObservationFilter

    # The learner's module takes the stacked space and its pipeline rebuilds the stacks: without
    # either, the first weights sync or update fails on the shapes (12 inputs against 4).
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env="CartPole-v1",
            num_envs_per_env_runner=2,
            rollout_fragment_length=32,
            seed=0,
            env_to_module_connectors=(FrameStackingEnvToModule(num_frames=3),),
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5),
        ppo=PPOConfig(observation_filter=ObservationFilter.MEAN_STD, minibatch_size=32),
        max_iterations=2,
        target_return=None,
    )
    lines: list[str] = []
    result = train_ppo(cfg, log=lines.append)
    assert result.iterations == 2 and result.env_steps == 2 * 64


class TestBudgets:
    """Whichever budget is reached first stops a loop; the result says which."""

    @pytest.mark.parametrize(
        ("iterations", "env_steps", "elapsed_s", "used"),
        [
            (9, 2047, 59.0, None),
            (10, 2048, 60.0, StopReason.MAX_ITERATIONS),
            (9, 2048, 60.0, StopReason.MAX_ENV_STEPS),
            (9, 2047, 60.0, StopReason.MAX_TIME_S),
        ],
        ids=["none", "iterations-first", "env-steps-next", "time-last"],
    )
    def test_budget_used_names_the_first_budget_reached(
        self, iterations: int, env_steps: int, elapsed_s: float, used: StopReason | None
    ) -> None:
        cfg = PPOTrainingConfig(max_iterations=10, max_env_steps=2048, max_time_s=60.0)
        assert budget_used(cfg, iterations=iterations, env_steps=env_steps, elapsed_s=elapsed_s) is used

    @pytest.mark.usefixtures("ray_session")
    def test_a_sync_run_stops_at_its_env_step_budget(self) -> None:
        runner = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=1, rollout_fragment_length=16, seed=0)
        group = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)
        cfg = PPOTrainingConfig(env_runner=runner, env_runner_group=group, max_env_steps=40, target_return=None)
        result = train_ppo(cfg, log=lambda line: None)
        assert (result.iterations, result.env_steps, result.stopped_by) == (3, 48, StopReason.MAX_ENV_STEPS)

    @pytest.mark.usefixtures("ray_session")
    def test_a_time_budget_already_used_runs_no_iteration(self) -> None:
        runner = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=1, rollout_fragment_length=16, seed=0)
        group = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)
        cfg = PPOTrainingConfig(env_runner=runner, env_runner_group=group, max_time_s=1e-9, target_return=None)
        result = train_ppo(cfg, log=lambda line: None)
        assert (result.iterations, result.env_steps, result.stopped_by) == (0, 0, StopReason.MAX_TIME_S)
