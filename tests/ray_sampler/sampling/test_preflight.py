"""prepare_env: the driver-side checks an EnvRunnerGroup runs before any actor starts."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import ConfigError
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.preflight import prepare_env
from tests.ray_sampler.ma_envs import RandomScheduleEnv

ONE_RUNNER = EnvRunnerGroupConfig(num_env_runners=1, check_env=False)
TOO_MANY = r"^'num_envs_per_env_runner' must be an int <= [\d,]+ for this env \(got 60,000\)"


class ImageEnv(gym.Env):
    """84 x 84 x 3 uint8 frames (21,168 bytes an observation), all zeros; never ends."""

    observation_space = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros((84, 84, 3), np.uint8), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros((84, 84, 3), np.uint8), 0.0, False, False, {}


def test_sub_envs_that_cannot_fit_the_node_are_refused_having_built_one() -> None:
    built = []

    def creator(ctx: dict) -> gym.Env:
        built.append(ctx["vector_index"])
        return ImageEnv()

    # 60,000 x 21,168 bytes x 1,002 steps: at least 1.2 TB, beyond any machine this suite runs on.
    config = EnvRunnerConfig(env=creator, num_envs_per_env_runner=60_000, rollout_fragment_length=1000)
    with pytest.raises(ConfigError, match=TOO_MANY):
        prepare_env(config, ONE_RUNNER)
    assert built == [0]


def test_a_multi_agent_runner_is_bounded_alike() -> None:
    # 4 agents a step; 60,000 sub-envs x 10**6 steps: far beyond any node.
    config = EnvRunnerConfig(
        env=RandomScheduleEnv, env_config={"num_agents": 4}, module_class=RandomModule, num_envs_per_env_runner=60_000,
        rollout_fragment_length=10**6, multi_agent=MultiAgentConfig(),
    )  # fmt: skip
    with pytest.raises(ConfigError, match=TOO_MANY):
        prepare_env(config, ONE_RUNNER)


def test_64_cartpole_sub_envs_pass() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=64)
    assert prepare_env(config, ONE_RUNNER).num_envs_per_env_runner == 64
