"""How many sub-envs one runner may step: the hard cap (config) and the memory bound (preflight)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.runner_memory import step_bytes
from ray_sampler.sampling.sub_env_limits import (
    MAX_NUM_ENVS_PER_ENV_RUNNER,
    check_num_envs_memory,
    largest_num_envs,
    multi_agent_step_bytes,
    node_memory_total_bytes,
)

BOX, TWO = gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2)


class TestCap:
    def test_a_million_cartpole_sub_envs_are_refused_by_the_config(self) -> None:
        with pytest.raises(
            ConfigError,
            match=r"^'num_envs_per_env_runner' must be an int <= 65,536 with vectorization_mode 'sync' "
            r"\(got 1,000,000\): .*use more env runners$",
        ):
            EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=1_000_000)

    def test_the_cap_itself_is_allowed(self) -> None:
        config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=MAX_NUM_ENVS_PER_ENV_RUNNER)
        assert config.num_envs_per_env_runner == 65_536
        with pytest.raises(ConfigError, match=r"\(got 65,537\)"):
            EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=MAX_NUM_ENVS_PER_ENV_RUNNER + 1)

    def test_a_native_vector_env_is_not_capped(self) -> None:
        config = EnvRunnerConfig(
            env="CartPole-v1", vectorization_mode="vector_entry_point", num_envs_per_env_runner=10**6
        )
        assert config.num_envs_per_env_runner == 1_000_000


class TestMemory:
    def test_the_largest_count_that_fits_passes_and_one_more_is_refused(self) -> None:
        # Each sub-env: 3,000 + 100 bytes x (99 + 0 + 1) steps = 13,000 bytes.
        sizes = {"bytes_per_step": 100, "rollout_fragment_length": 99, "episode_lookback_horizon": 0}
        assert largest_num_envs(**sizes, memory_bytes=13_000_000) == 1000
        check_num_envs_memory(1000, **sizes, memory_bytes=13_000_000)
        with pytest.raises(
            ConfigError,
            match=r"^'num_envs_per_env_runner' must be an int <= 1,000 for this env \(got 1,001\): each sub-env holds "
            r"at least 3,000 \+ 100 bytes a step x \(rollout_fragment_length 99 \+ episode_lookback_horizon 0 \+ 1\) "
            r"= 13,000 bytes, and the largest node has 0\.0 GiB$",
        ):
            check_num_envs_memory(1001, **sizes, memory_bytes=13_000_000)

    def test_lookback_counts(self) -> None:
        sizes = {"bytes_per_step": 100, "rollout_fragment_length": 99, "memory_bytes": 13_000_000}
        assert largest_num_envs(**sizes, episode_lookback_horizon=30) == 13_000_000 // (3_000 + 100 * 130) == 812

    def test_64_cartpole_sub_envs_fit_this_machine(self) -> None:
        check_num_envs_memory(
            64, bytes_per_step=step_bytes(BOX, TWO), rollout_fragment_length=200, episode_lookback_horizon=1
        )
        assert node_memory_total_bytes() > 64 * (3_000 + 50 * 202)

    def test_a_multi_agent_step_holds_every_agents_step(self) -> None:
        assert step_bytes(BOX, TWO) == 50
        assert multi_agent_step_bytes([BOX, BOX, BOX], [TWO, TWO, TWO]) == 150
