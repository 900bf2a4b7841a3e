"""SampleRequest: validation messages, step counts, the request repeated ahead."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from ray_sampler.errors import ConfigError
from ray_sampler.sampling.request import SampleRequest


def test_defaults_are_those_of_sample() -> None:
    assert SampleRequest() == SampleRequest(
        num_timesteps=None, num_episodes=None, explore=True, random_actions=False, force_reset=False
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_timesteps": 5, "num_episodes": 1}, "pass 'num_timesteps' or 'num_episodes', not both"),
        ({"num_timesteps": 0}, r"'num_timesteps' must be an int >= 1 or None \(got 0\)"),
        ({"num_timesteps": True}, r"'num_timesteps' must be an int >= 1 or None \(got True\)"),
        ({"num_episodes": 1.5}, r"'num_episodes' must be an int >= 1 or None \(got 1.5\)"),
        ({"explore": 1}, r"'explore' must be True or False \(got 1\)"),
        ({"force_reset": "yes"}, r"'force_reset' must be True or False \(got 'yes'\)"),
    ],
    ids=["both", "zero", "bool", "float", "explore", "force_reset"],
)
def test_bad_values_raise_config_error(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SampleRequest(**kwargs)


def test_numpy_ints_become_ints() -> None:
    assert type(SampleRequest(num_timesteps=np.int64(3)).num_timesteps) is int


@pytest.mark.parametrize(
    ("num_timesteps", "expected"), [(None, 20), (1, 4), (10, 12), (12, 12)], ids=["default", "1", "10", "12"]
)
def test_num_env_steps_rounds_up_to_a_multiple_of_num_envs(num_timesteps: int | None, expected: int) -> None:
    request = SampleRequest(num_timesteps=num_timesteps)
    assert request.num_env_steps(rollout_fragment_length=5, num_envs=4) == expected


def test_a_request_is_frozen_and_without_reset_keeps_the_rest() -> None:
    request = SampleRequest(num_episodes=2, explore=False, force_reset=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.explore = True  # type: ignore[misc]
    assert request.without_reset() == SampleRequest(num_episodes=2, explore=False)
