"""Multi-agent PPO: a learner per module on its agents' chunks; frozen modules act but never learn."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from learner.learner import PPOConfig
from learner.train_multi_agent import MultiAgentPPOConfig, module_episodes, train_multi_agent_ppo
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent

PER_AGENT = MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")


def config(**kwargs: Any) -> MultiAgentPPOConfig:
    runner = EnvRunnerConfig(
        env=make_multi_agent("CartPole-v1", 2), num_envs_per_env_runner=4, rollout_fragment_length=128,
        multi_agent=PER_AGENT,
    )  # fmt: skip
    group = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    return MultiAgentPPOConfig(env_runner=runner, env_runner_group=group, **kwargs)


@pytest.mark.usefixtures("ray_session")
def test_two_policies_learn_multi_agent_cartpole() -> None:
    lines: list[str] = []
    result = train_multi_agent_ppo(config(target_return=300, stop_window=20, max_iterations=40), log=lines.append)
    assert result.reached and result.mean_return >= 300  # random play: about 45 (22 per agent)
    assert result.env_steps == 1024 * result.iterations and result.agent_steps > result.env_steps
    assert set(result.module_returns) == {"p0", "p1"}
    assert lines[0].startswith("iter 1: 1024 env steps, mean return ")


@pytest.mark.usefixtures("ray_session")
def test_a_frozen_module_acts_but_does_not_learn() -> None:
    result = train_multi_agent_ppo(config(policies_to_train=("p0",), max_iterations=12), log=lambda line: None)
    # p0 learns to balance; p1 keeps its first (random-init) weights and falls within a few dozen steps.
    assert result.module_returns["p0"] > 2 * result.module_returns["p1"]


def test_module_episodes_puts_every_agent_under_its_module() -> None:
    ep = MultiAgentEpisode(agent_to_module_mapping_fn=lambda aid, episode: "shared" if aid != "c" else "solo")
    ep.add_env_reset(observations={"a": np.zeros(2), "b": np.zeros(2), "c": np.zeros(2)})
    got = {mid: sorted(sa.id_.rsplit("/", 1)[1] for sa in sas) for mid, sas in module_episodes([ep]).items()}
    assert got == {"shared": ["a", "b"], "solo": ["c"]}


def test_bad_config() -> None:
    with pytest.raises(ConfigError, match=r"'policies_to_train' names modules \['p7'\] that 'policies' lacks"):
        config(policies_to_train=("p7",))
    with pytest.raises(ConfigError, match="'max_iterations' must be an int >= 1"):
        config(max_iterations=0, ppo=PPOConfig())
