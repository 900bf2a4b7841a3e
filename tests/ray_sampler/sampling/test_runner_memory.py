"""The runners' memory bound, checked against the nodes before any runner starts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import InsufficientResourcesError
from ray_sampler.sampling.runner_memory import check_runner_memory, step_bytes

GB = 1e9


def _check(**overrides: object) -> None:
    kwargs: dict = dict(
        num_envs=1_000_000,
        rollout_fragment_length=128,
        num_runners=2,
        sub_env_bytes=3_000,
        bytes_per_step=50,
        nodes=[15 * GB, 4 * GB],
    )
    check_runner_memory(**{**kwargs, **overrides})


def test_one_runner_larger_than_the_largest_node_is_refused_naming_the_fields() -> None:
    with pytest.raises(InsufficientResourcesError) as raised:
        _check(nodes=[6 * GB, 5 * GB])
    assert str(raised.value) == (
        "cannot run the env runners: num_envs_per_env_runner x (bytes per sub-env + rollout_fragment_length x "
        "bytes per step) = 1,000,000 x (3,000 + 128 x 50) = at least 9.4 GB per runner, but the largest node has "
        "6.0 GB for actors; use fewer sub-envs per runner (and more runners), or a shorter rollout_fragment_length"
    )


def test_runners_that_fit_a_node_each_but_not_the_cluster_together_are_refused() -> None:
    with pytest.raises(
        InsufficientResourcesError,
        match=r"num_env_runners x num_envs_per_env_runner x .* = 2 x 9\.4 GB, but the cluster has 18\.0 GB for actors "
        r"in all; ",
    ):
        _check(nodes=[10 * GB, 8 * GB])


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_envs": 100_000},  # 0.94 GB a runner
        {"num_runners": 1},  # 9.4 GB on the 15 GB node
        {"nodes": [10 * GB, 9 * GB], "autoscales": True},  # nodes may come
        {"nodes": []},  # nothing known
    ],
    ids=["fits", "one-runner-fits", "autoscaling", "no-nodes"],
)
def test_what_fits_or_may_fit_passes(overrides: dict) -> None:
    _check(**overrides)


@pytest.mark.parametrize(
    ("observation_space", "action_space", "expected"),
    [
        (gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), gym.spaces.Discrete(6), 28_224 + 8 + 24 + 18),
        (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-2.0, 2.0, (2,)), 12 + 8 + 16 + 18),
        (
            gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Tuple([gym.spaces.Box(0.0, 1.0, (2,))])}),
            gym.spaces.Discrete(2),
            8 + 8 + 8 + 8 + 18,
        ),
    ],
    ids=["atari-frames", "box-actions", "dict-tuple"],
)
def test_the_bytes_of_a_step_count_every_stored_leaf(
    observation_space: gym.Space, action_space: gym.Space, expected: int
) -> None:
    assert step_bytes(observation_space, action_space) == expected
