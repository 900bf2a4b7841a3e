"""transition_episodes: one numpy'd 1-step episode per flat transition, as RLlib's sample_episodes path."""

from __future__ import annotations

import numpy as np

from replay.transition_episodes import transition_episodes


def flat_batch() -> dict:
    return {
        "obs": np.array([[0.0], [5.0]], np.float32),
        "next_obs": np.array([[2.0], [6.0]], np.float32),
        "actions": np.array([1, 0]),
        "rewards": np.array([3.0, 5.0]),
        "terminateds": np.array([False, True]),
        "truncateds": np.array([True, False]),
        "n_step": np.array([2, 1]),
        "t": np.array([0, 5]),
        "keys": np.array([0, 5]),
        "logp": np.array([-0.5, -1.5], np.float32),
    }


def test_each_transition_is_a_one_step_episode_of_obs_and_next_obs() -> None:
    a, b = transition_episodes(flat_batch(), ["x", "y"])
    assert (a.id_, a.t_started, len(a), a.is_numpy) == ("x", 0, 1, True)
    assert a.get_observations().tolist() == [[0.0], [2.0]] and b.get_observations().tolist() == [[5.0], [6.0]]
    assert (a.get_actions().tolist(), a.get_rewards().tolist()) == ([1], [3.0])
    assert (a.is_terminated, a.is_truncated, b.is_terminated, b.is_truncated, b.t_started) == (
        False,
        True,
        True,
        False,
        5,
    )


def test_n_step_weights_and_other_model_outputs_are_extra_model_outputs() -> None:
    batch = {**flat_batch(), "weights": np.array([0.25, 1.0])}
    a, b = transition_episodes(batch, ["x", "y"])
    assert a.get_extra_model_outputs("n_step").tolist() == [2] and b.get_extra_model_outputs("n_step").tolist() == [1]
    assert a.get_extra_model_outputs("weights").tolist() == [0.25]
    assert b.get_extra_model_outputs("logp").tolist() == [-1.5]


def test_uniform_draws_get_weights_of_one_and_empty_infos() -> None:
    (a, _) = transition_episodes(flat_batch(), ["x", "y"])
    assert a.get_extra_model_outputs("weights").tolist() == [1.0]
    assert a.get_infos() == [{}, {}]


def test_infos_are_those_at_obs_and_next_obs_when_given() -> None:
    batch = {**flat_batch(), "infos": np.array([{"at": 2}, {"at": 6}], object)}
    a, b = transition_episodes(batch, ["x", "y"], infos_t=np.array([{"at": 0}, {"at": 5}], object))
    assert (a.get_infos(), b.get_infos()) == ([{"at": 0}, {"at": 2}], [{"at": 5}, {"at": 6}])
