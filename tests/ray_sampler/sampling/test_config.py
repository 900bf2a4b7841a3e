"""EnvRunnerConfig and EnvRunnerGroupConfig checks: bools are not ints, NaN and infinity are not
finite numbers, a wrong type is a ConfigError; each message names the field, what is allowed and what came."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.env_to_module import FrameStackingEnvToModule, PrevActionsPrevRewardsEnvToModule
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig, EnvRunnerGroupConfig


class TestEnvRunnerConfig:
    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"num_envs_per_env_runner": True}, r"'num_envs_per_env_runner' must be an int >= 1 \(got True\)"),
            ({"rollout_fragment_length": 2.0}, r"'rollout_fragment_length' must be an int >= 1 \(got 2.0\)"),
            ({"seed": True}, r"'seed' must be an int >= 0 or None \(got True\)"),
            ({"seed": "0"}, r"'seed' must be an int >= 0 or None \(got '0'\)"),
            ({"max_episode_steps": False}, r"'max_episode_steps' must be an int >= 1 or None \(got False\)"),
            ({"episode_lookback_horizon": "1"}, r"'episode_lookback_horizon' must be an int >= 0 \(got '1'\)"),
            ({"batch_mode": 3}, r"'batch_mode' must be one of 'truncate_episodes', 'complete_episodes' \(got 3\)"),
            ({"batch_mode": ["x"]}, r"'batch_mode' must be one of .* \(got \['x'\]\)"),
            ({"env_config": None}, r"'env_config' must be a dict \(got NoneType\)"),
            ({"module_class": 3}, r"'module_class' must be a class or callable or None \(got 3\)"),
            ({"module_to_env_connectors": None}, r"'module_to_env_connectors' must be a tuple of ConnectorV2 pieces"),
            ({"columnar_sampling": 0}, r"'columnar_sampling' must be True or False \(got 0\)"),
        ],
        ids=[
            "bool_num_envs",
            "float_fragment",
            "bool_seed",
            "str_seed",
            "bool_horizon",
            "str_lookback",
            "int_batch_mode",
            "unhashable_batch_mode",
            "none_env_config",
            "int_module_class",
            "none_connectors",
            "int_bool",
        ],
    )
    def test_bad_values_raise_config_error(self, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            EnvRunnerConfig(env="CartPole-v1", **kwargs)

    def test_an_empty_env_id_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"'env' must be a gymnasium id, .* \(got ''\)"):
            EnvRunnerConfig(env="")

    def test_modes_given_as_strings_become_enums_and_lists_of_pieces_tuples(self) -> None:
        piece = print
        cfg = EnvRunnerConfig(env="CartPole-v1", batch_mode="complete_episodes", env_to_module_connectors=[piece])
        assert cfg.batch_mode is BatchMode.COMPLETE_EPISODES and cfg.env_to_module_connectors == (piece,)


class TestEnvRunnerGroupConfig:
    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"num_env_runners": True}, r"'num_env_runners' must be an int >= 0 \(got True\)"),
            ({"num_env_runners": -1}, r"'num_env_runners' must be an int >= 0 \(got -1\)"),
            ({"num_cpus_per_env_runner": True}, r"'num_cpus_per_env_runner' must be a finite number > 0 \(got True\)"),
            ({"sample_timeout_s": float("nan")}, r"'sample_timeout_s' must be a finite number > 0 \(got nan\)"),
            ({"actor_start_timeout_s": float("inf")}, r"'actor_start_timeout_s' must be a finite number > 0"),
            ({"sample_timeout_s": "60"}, r"'sample_timeout_s' must be a finite number > 0 \(got '60'\)"),
            ({"keep_sampling": "false"}, r"'keep_sampling' must be True or False \(got 'false'\)"),
            ({"validate_env_locally": 1}, r"'validate_env_locally' must be True or False \(got 1\)"),
            ({"restart_failed_env_runners": 0}, r"'restart_failed_env_runners' must be True or False \(got 0\)"),
            ({"max_num_env_runner_restarts": -1}, r"'max_num_env_runner_restarts' must be an int >= 0 \(got -1\)"),
            ({"max_num_env_runner_restarts": True}, r"'max_num_env_runner_restarts' must be an int >= 0 \(got True\)"),
            (
                {"delay_between_env_runner_restarts_s": -0.5},
                r"'delay_between_env_runner_restarts_s' must be a finite number >= 0 \(got -0.5\)",
            ),
            (
                {"delay_between_env_runner_restarts_s": float("nan")},
                r"'delay_between_env_runner_restarts_s' must be a finite number >= 0 \(got nan\)",
            ),
        ],
        ids=[
            "bool_runners",
            "negative_runners",
            "bool_cpus",
            "nan_timeout",
            "inf_start",
            "str_timeout",
            "str_bool",
            "int_bool",
            "int_restart_flag",
            "negative_restarts",
            "bool_restarts",
            "negative_delay",
            "nan_delay",
        ],
    )
    def test_bad_values_raise_config_error(self, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            EnvRunnerGroupConfig(**kwargs)


class TestLookbackHorizon:
    def test_is_derived_from_the_env_to_module_pieces_when_not_given(self) -> None:
        assert EnvRunnerConfig(env="CartPole-v1").episode_lookback_horizon == 1
        pieces = (FrameStackingEnvToModule(num_frames=6), PrevActionsPrevRewardsEnvToModule(n_prev_actions=2))
        assert EnvRunnerConfig(env="CartPole-v1", env_to_module_connectors=pieces).episode_lookback_horizon == 5

    def test_a_smaller_explicit_value_than_a_frame_stack_needs_is_refused(self) -> None:
        # Issue item 5c: with a horizon below k - 1 every continuation chunk's first steps would
        # stack zeros where the frames from before the cut exist.
        with pytest.raises(
            ConfigError,
            match=r"^'episode_lookback_horizon' must be an int >= 3 for FrameStackingEnvToModule\(num_frames=4\), "
            r"which reads 3 steps back \(got 2\); leave it None to derive it$",
        ):
            EnvRunnerConfig(
                env="CartPole-v1", episode_lookback_horizon=2, env_to_module_connectors=(FrameStackingEnvToModule(),)
            )
        cfg = EnvRunnerConfig(
            env="CartPole-v1", episode_lookback_horizon=7, env_to_module_connectors=(FrameStackingEnvToModule(),)
        )
        assert cfg.episode_lookback_horizon == 7
