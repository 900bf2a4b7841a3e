"""Multi-agent PPO through ``train_ppo``: a learner per trained module on its agents' chunks; frozen
modules act but never learn; per-module returns in the records; checkpoints resume."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learner.checkpoint import Checkpointer, latest_checkpoint, load_checkpoint
from learner.metrics import IterationRecord
from learner.train import PPOTrainingConfig, run_observation_space, train_ppo
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_creator import env_name
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from ray_sampler.sampling.multi_agent_env_runner import build_multi_rl_module

PER_AGENT = MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
ENV = make_multi_agent("CartPole-v1", 2)


def config(multi_agent: MultiAgentConfig = PER_AGENT, **kwargs: Any) -> PPOTrainingConfig:
    runner = EnvRunnerConfig(
        env=ENV, num_envs_per_env_runner=4, rollout_fragment_length=128, seed=0, multi_agent=multi_agent
    )
    group = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    return PPOTrainingConfig(env_runner=runner, env_runner_group=group, **kwargs)


@pytest.mark.usefixtures("ray_session")
def test_two_policies_learn_multi_agent_cartpole() -> None:
    lines: list[str] = []
    result = train_ppo(config(target_return=300, stop_window=20, max_iterations=40), log=lines.append)
    assert result.reached and result.mean_return >= 300  # random play: about 45 (22 per agent)
    assert result.env_steps == 1024 * result.iterations and result.agent_steps > result.env_steps
    assert {"module/p0", "module/p1", "agent/0", "agent/1"} <= set(result.returns_by)
    # Each module acts for one agent here: its returns are that agent's, and the two sum to the total.
    assert result.returns_by["module/p0"] == pytest.approx(result.returns_by["agent/0"])
    assert result.returns_by["module/p0"] + result.returns_by["module/p1"] == pytest.approx(result.mean_return)
    assert lines[0].startswith("iter 1: 1024 env steps, mean return ")
    assert ", p0 " in lines[-2] and ", p1 " in lines[-2]


@pytest.mark.usefixtures("ray_session")
def test_a_frozen_module_acts_but_does_not_learn() -> None:
    frozen = dataclasses.replace(PER_AGENT, policies_to_train=("p0",))
    records: list[IterationRecord] = []
    train_ppo(config(frozen, max_iterations=12, target_return=None), on_iteration=records.append)
    last = records[-1]
    # p0 learns to balance; p1 keeps its first (random-init) weights and falls within a few dozen steps.
    assert last.returns_by["module/p0"] > 2 * last.returns_by["module/p1"]
    assert "policy_loss/p0" in last.losses and "policy_loss/p1" not in last.losses


@pytest.mark.usefixtures("ray_session")
def test_a_checkpoint_resumes_every_module(tmp_path: Path) -> None:
    cfg = config(max_iterations=3, target_return=None)
    train_ppo(cfg, log=lambda line: None, checkpointer=Checkpointer(tmp_path, every=3))
    found = latest_checkpoint(tmp_path)
    assert found is not None
    state = load_checkpoint(
        found, algo="ppo", env=env_name(ENV), observation_space=run_observation_space(cfg.env_runner)
    )
    assert sorted(state.learner["modules"]) == ["p0", "p1"] and state.learner["frozen"] == {}
    assert state.iteration == 3 and set(state.returns_by) >= {"module/p0", "agent/1"}
    records: list[IterationRecord] = []
    train_ppo(dataclasses.replace(cfg, max_iterations=5), on_iteration=records.append, resume=state)
    assert [r.iteration for r in records] == [4, 5] and records[0].env_steps == 4 * 1024
    assert records[0].episodes > state.episodes  # the counters and windows went on from the checkpoint


def test_bad_multi_agent_config() -> None:
    with pytest.raises(ConfigError, match=r"'policies_to_train' names modules \['p7'\] that 'policies' lacks"):
        dataclasses.replace(PER_AGENT, policies_to_train=("p7",))
    with pytest.raises(ConfigError, match="'policies_to_train' must be a tuple of module ids"):
        dataclasses.replace(PER_AGENT, policies_to_train="p0")


@pytest.mark.usefixtures("ray_session")
def test_remote_learners_train_each_module(tmp_path: Path) -> None:
    cfg = config(max_iterations=2, target_return=None, num_learners=1, num_cpus_per_learner=0)
    result = train_ppo(cfg, log=lambda line: None, checkpointer=Checkpointer(tmp_path, every=2))
    assert result.iterations == 2
    found = latest_checkpoint(tmp_path)
    assert found is not None
    state = load_checkpoint(
        found, algo="ppo", env=env_name(ENV), observation_space=run_observation_space(cfg.env_runner)
    )
    first = build_multi_rl_module(cfg.env_runner)  # the weights every module started from (seeded)
    for mid in ("p0", "p1"):
        learner = state.learner["modules"][mid]
        assert learner["weights_version"] == 2  # one update per iteration, on a learner actor
        assert any(not np.array_equal(learner["module"][k], v) for k, v in first[mid].get_state().items())
