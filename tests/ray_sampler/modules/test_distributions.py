"""Categorical and DiagGaussian against their formulas, and the distribution for each action space."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import SpaceError
from ray_sampler.modules.distributions import Categorical, DiagGaussian, dist_class_for, dist_input_size

PROBS = np.array([[0.2, 0.3, 0.5], [0.7, 0.1, 0.2]])


class TestCategorical:
    def test_logp_is_the_log_of_the_softmax(self) -> None:
        dist = Categorical(np.log(PROBS) + np.array([[3.0], [-7.0]]))  # a shift per row changes nothing
        np.testing.assert_allclose(dist.logp(np.array([2, 0])), np.log([0.5, 0.7]), rtol=1e-12)

    def test_entropy_is_minus_sum_p_log_p(self) -> None:
        expected = -(PROBS * np.log(PROBS)).sum(axis=1)
        np.testing.assert_allclose(Categorical(np.log(PROBS)).entropy(), expected, rtol=1e-12)

    def test_uniform_logits_have_entropy_log_n(self) -> None:
        assert Categorical(np.zeros((1, 4))).entropy()[0] == pytest.approx(np.log(4), rel=1e-12)

    def test_deterministic_is_the_argmax(self) -> None:
        assert Categorical(np.log(PROBS)).deterministic().tolist() == [2, 0]

    def test_samples_follow_the_probabilities(self) -> None:
        logits = np.log(np.tile(PROBS[:1], (20000, 1)))
        actions = Categorical(logits).sample(np.random.default_rng(0))
        np.testing.assert_allclose(np.bincount(actions, minlength=3) / 20000, PROBS[0], atol=0.015)

    def test_samples_are_seeded(self) -> None:
        dist = Categorical(np.log(np.tile(PROBS, (50, 1))))
        a, b = dist.sample(np.random.default_rng(4)), dist.sample(np.random.default_rng(4))
        assert a.tolist() == b.tolist() and a.shape == (100,)


class TestDiagGaussian:
    MEAN = np.array([[1.0, -2.0], [0.0, 0.5]])
    LOG_STD = np.array([[0.0, np.log(2.0)], [np.log(0.5), 0.0]])

    def dist(self) -> DiagGaussian:
        return DiagGaussian(np.concatenate([self.MEAN, self.LOG_STD], axis=1))

    def test_logp_is_the_sum_of_normal_log_densities(self) -> None:
        actions = np.array([[1.5, 0.0], [-1.0, 0.5]])
        std = np.exp(self.LOG_STD)
        density = np.exp(-0.5 * ((actions - self.MEAN) / std) ** 2) / (std * np.sqrt(2 * np.pi))
        np.testing.assert_allclose(self.dist().logp(actions), np.log(density).sum(axis=1), rtol=1e-12)

    def test_entropy_is_the_sum_of_normal_entropies(self) -> None:
        expected = (0.5 * np.log(2 * np.pi * np.e * np.exp(self.LOG_STD) ** 2)).sum(axis=1)
        np.testing.assert_allclose(self.dist().entropy(), expected, rtol=1e-12)

    def test_deterministic_is_the_mean(self) -> None:
        assert self.dist().deterministic().tolist() == self.MEAN.tolist()

    def test_sample_is_mean_plus_std_times_a_standard_normal(self) -> None:
        noise = np.random.default_rng(7).standard_normal((2, 2))
        sample = self.dist().sample(np.random.default_rng(7))
        np.testing.assert_allclose(sample, self.MEAN + np.exp(self.LOG_STD) * noise, rtol=1e-12)


class TestDistributionForASpace:
    @pytest.mark.parametrize(
        ("space", "dist_class", "size"),
        [
            (gym.spaces.Discrete(5), Categorical, 5),
            (gym.spaces.Discrete(3, start=-1), Categorical, 3),
            (gym.spaces.Box(-1, 1, (3,)), DiagGaussian, 6),
        ],
        ids=["discrete", "discrete_start", "box_1d"],
    )
    def test_class_and_input_size(self, space: gym.Space, dist_class: type, size: int) -> None:
        assert dist_class_for(space) is dist_class and dist_input_size(space) == size

    @pytest.mark.parametrize(
        "space",
        [gym.spaces.MultiDiscrete([2, 2]), gym.spaces.Box(-1, 1, (2, 2)), gym.spaces.Box(-1, 1, ())],
        ids=["multi_discrete", "box_2d", "box_scalar"],
    )
    def test_other_spaces_are_refused(self, space: gym.Space) -> None:
        with pytest.raises(SpaceError, match=r"supports Discrete and 1-D Box action spaces \(got "):
            dist_class_for(space)
        with pytest.raises(SpaceError, match="bring your own module for others"):
            dist_input_size(space)
