"""``ray_sampler.suggest``: the known names closest to an unknown one."""

from __future__ import annotations

from ray_sampler.suggest import close_names, did_you_mean


def test_the_closest_names_come_first() -> None:
    assert close_names("CartPol-v1", ["Acrobot-v1", "CartPole-v0", "CartPole-v1"]) == ["CartPole-v1", "CartPole-v0"]


def test_a_name_far_less_similar_than_the_closest_is_left_out() -> None:
    assert close_names("ppo.entropy_coef", ["ppo.vf_coeff", "ppo.entropy_coeff"]) == ["ppo.entropy_coeff"]


def test_at_most_three_names_are_suggested() -> None:
    assert close_names("abcd", ["abce", "abcf", "abcg", "abch"]) == ["abch", "abcg", "abcf"]  # difflib's order of ties


def test_a_name_known_twice_is_suggested_once() -> None:
    assert close_names("seeds", ["seed", "seed"]) == ["seed"]


def test_did_you_mean_joins_the_names_with_or() -> None:
    assert did_you_mean("max_iteration", ["max_iterations", "max_iterations_"]) == (
        "did you mean 'max_iterations' or 'max_iterations_'?"
    )


def test_did_you_mean_is_empty_when_nothing_is_close() -> None:
    assert did_you_mean("zzz", ["CartPole-v1", "seed"]) == ""
