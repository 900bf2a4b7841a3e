"""GetActions: sampling, greedy actions, logp, and scoring actions already chosen."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from connectors.module_to_env import GetActions


def test_get_actions_samples_with_the_right_frequencies_and_logp() -> None:
    piece = GetActions(gym.spaces.Discrete(3), seed=0)
    logits = np.log(np.tile([[0.2, 0.3, 0.5]], (20000, 1)))
    out = piece(rl_module=None, batch={"action_dist_inputs": logits}, episodes=[], explore=True)
    freq = np.bincount(out["actions"], minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.015)
    np.testing.assert_allclose(np.exp(out["action_logp"]), np.array([0.2, 0.3, 0.5])[out["actions"]], rtol=1e-5)


def test_get_actions_greedy_and_discrete_start() -> None:
    piece = GetActions(gym.spaces.Discrete(3, start=-1), seed=0)
    logits = np.array([[0.0, 5.0, 0.0], [9.0, 0.0, 0.0]])
    out = piece(rl_module=None, batch={"action_dist_inputs": logits}, episodes=[], explore=False)
    assert out["actions"].tolist() == [0, -1]


def test_given_actions_are_kept_and_scored() -> None:
    piece = GetActions(gym.spaces.Discrete(2), seed=0)
    batch = {"actions": np.array([1, 0]), "action_dist_inputs": np.log(np.array([[0.5, 0.5], [0.9, 0.1]]))}
    out = piece(rl_module=None, batch=batch, episodes=[], explore=True)
    assert out["actions"].tolist() == [1, 0]
    np.testing.assert_allclose(np.exp(out["action_logp"]), [0.5, 0.9], rtol=1e-6)


def test_gaussian_sampling_statistics() -> None:
    piece = GetActions(gym.spaces.Box(-1, 1, (2,), np.float32), seed=1)
    inputs = np.tile([[1.0, -1.0, np.log(0.5), 0.0]], (50000, 1))
    actions = piece(rl_module=None, batch={"action_dist_inputs": inputs}, episodes=[], explore=True)["actions"]
    np.testing.assert_allclose(actions.mean(0), [1.0, -1.0], atol=0.02)
    np.testing.assert_allclose(actions.std(0), [0.5, 1.0], atol=0.02)
