"""RandomModule: seeded uniform actions that lie in the action space, batched, and no weights."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.modules.random_module import RandomModule

SPACES = {
    "discrete_start": gym.spaces.Discrete(4, start=2),
    "box_f32": gym.spaces.Box(-1, 1, (2,), np.float32),
    "box_i64_2x2": gym.spaces.Box(0, 5, (2, 2), np.int64),
    "multi_discrete": gym.spaces.MultiDiscrete([2, 3]),
}


def test_random_module_is_seeded() -> None:
    space = gym.spaces.Discrete(4, start=2)
    a = RandomModule(space, space, seed=3).forward_inference({"obs": np.zeros(50)})["actions"]
    b = RandomModule(space, space, seed=3).forward_inference({"obs": np.zeros(50)})["actions"]
    assert a.tolist() == b.tolist() and set(a.tolist()) <= {2, 3, 4, 5}


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_one_action_per_observation_each_in_the_space(space: gym.Space) -> None:
    actions = RandomModule(space, space, seed=0).forward_exploration({"obs": np.zeros((20, 1))})["actions"]
    assert actions.shape == (20, *(space.shape or ())) and actions.dtype == space.dtype
    assert all(space.contains(a) for a in actions)


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_same_seed_same_actions_other_seed_other_actions(space: gym.Space) -> None:
    def draw(seed: int) -> list:
        return RandomModule(space, space, seed=seed).forward_inference({"obs": np.zeros((30, 1))})["actions"].tolist()

    assert draw(5) == draw(5) and draw(5) != draw(6)


def test_every_discrete_action_is_drawn() -> None:
    space = gym.spaces.Discrete(3, start=-1)
    actions = RandomModule(space, space, seed=1).forward_inference({"obs": np.zeros(300)})["actions"]
    assert sorted(set(actions.tolist())) == [-1, 0, 1]


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_an_empty_batch_gets_empty_actions_of_the_right_shape(space: gym.Space) -> None:
    actions = RandomModule(space, space, seed=0).forward_inference({"obs": np.zeros((0, 1))})["actions"]
    assert actions.shape == (0, *(space.shape or ()))


def test_random_module_leaves_the_runner_action_space_alone() -> None:
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    before = space.np_random.bit_generator.state
    RandomModule(space, space, seed=3).forward_inference({"obs": np.zeros((4, 1))})
    assert space.np_random.bit_generator.state == before


def test_it_holds_no_weights() -> None:
    module = RandomModule(gym.spaces.Discrete(2), gym.spaces.Discrete(2))
    assert module.get_state() == {}
    module.set_state({})


def test_set_state_refuses_weights() -> None:
    module = RandomModule(gym.spaces.Discrete(2), gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match=r"RandomModule holds no weights \(got keys \['b', 'w'\]\)"):
        module.set_state({"w": np.zeros(1), "b": np.zeros(1)})
