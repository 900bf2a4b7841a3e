"""StatelessCartPole: CartPole-v1's trajectory with the velocities left out."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env

from ray_sampler.envs import STATELESS_CARTPOLE_ID, StatelessCartPole


def test_it_is_cartpole_without_the_velocities() -> None:
    full, hidden = gym.make("CartPole-v1"), gym.make(STATELESS_CARTPOLE_ID)
    obs_full, _ = full.reset(seed=3)
    obs, _ = hidden.reset(seed=3)
    assert hidden.observation_space.shape == (2,) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs, obs_full[[0, 2]])
    steps, done = 0, False
    while not done:
        action = steps % 3 % 2
        obs_full, r_full, term_full, trunc_full, _ = full.step(action)
        obs, r, term, trunc, _ = hidden.step(action)
        np.testing.assert_array_equal(obs, obs_full[[0, 2]])
        assert (r, term, trunc) == (r_full, term_full, trunc_full)
        assert hidden.observation_space.contains(obs) or term
        steps, done = steps + 1, term or trunc
    assert steps > 1


def test_it_is_registered_with_cartpoles_horizon_and_passes_gymnasiums_checker() -> None:
    spec = gym.spec(STATELESS_CARTPOLE_ID)
    assert spec.max_episode_steps == 500 and spec.reward_threshold is None
    check_env(StatelessCartPole(), skip_render_check=True)
