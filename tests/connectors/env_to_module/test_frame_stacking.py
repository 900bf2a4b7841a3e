"""FrameStackingEnvToModule: the runner's frame stack equals the learner's, step for step."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from connectors.env_to_module import FrameStackingEnvToModule, stacked_space
from ray_sampler.data import tree
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.env_runner import EnvRunner
from tests.connectors.env_to_module.views import CASES, runner_and_learner_views
from tests.ray_sampler.sampling.frames import frame_config


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_runner_frame_stack_equals_learner_frame_stack(case: dict[str, Any], columnar: bool) -> None:
    chunks, seen, batch = runner_and_learner_views(columnar=columnar, **case)
    # Covered: episode starts (zero fill), continuations right after a cut (frames from the lookback).
    assert any(c.t_started == 0 for c in chunks) and any(c.t_started >= 3 for c in chunks)
    assert tree.spec_of(batch["obs"]) == tree.spec_of(seen["seen_obs"])
    for learner_leaf, runner_leaf in zip(tree.flatten(batch["obs"]), tree.flatten(seen["seen_obs"]), strict=True):
        assert learner_leaf.dtype == runner_leaf.dtype
        np.testing.assert_array_equal(learner_leaf, runner_leaf)


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
def test_first_steps_after_a_cut_see_the_frames_from_before_it(columnar: bool) -> None:
    chunks, _, _ = runner_and_learner_views(columnar=columnar)
    continuations = [c for c in chunks if c.t_started >= 3]
    assert continuations
    for chunk in continuations:
        stack = chunk.get_extra_model_outputs("seen_obs", 0)
        assert stack.dtype == np.uint8
        assert stack[:, 0, 0].tolist() == list(range(chunk.t_started - 3, chunk.t_started + 1))


def test_episode_starts_are_zero_filled() -> None:
    chunks, _, _ = runner_and_learner_views(columnar=True)
    first = next(c for c in chunks if c.t_started == 0)
    stack = first.get_extra_model_outputs("seen_obs", 0)
    assert stack[:3].tolist() == np.zeros((3, 2, 3), np.uint8).tolist()
    assert stack[3].tolist() == np.asarray(first.get_observations(0)).tolist()


def test_the_episode_stores_one_frame_per_step() -> None:
    chunk = EnvRunner(frame_config()).sample()[0]
    assert np.asarray(chunk.get_observations()).shape == (len(chunk) + 1, 2, 3)


def test_the_module_is_built_for_the_stacked_space() -> None:
    runner = EnvRunner(frame_config(num_frames=3))
    assert runner.module_observation_space == gym.spaces.Box(0, 255, (3, 2, 3), np.uint8)
    assert runner.module.observation_space == runner.module_observation_space


def test_stacked_space_of_nested_and_discrete_leaves() -> None:
    space = gym.spaces.Dict({"f": gym.spaces.Box(0, 255, (2,), np.uint8), "d": gym.spaces.Discrete(3, start=1)})
    stacked = stacked_space(space, 2)
    assert stacked["f"].shape == (2, 2) and stacked["d"] == gym.spaces.MultiDiscrete([3, 3], start=[1, 1])


def test_bad_num_frames_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'num_frames' must be an int >= 1 \(got 0\)"):
        FrameStackingEnvToModule(num_frames=0)
