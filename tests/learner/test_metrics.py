"""Typed learner metrics and loop results: read by attribute, and as a read-only Mapping of their fields."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learner.metrics import DQNStepMetrics, PPOTrainResult, PPOUpdateMetrics, async_figures, format_outcomes


def test_update_metrics_read_as_a_mapping_of_their_fields() -> None:
    m = PPOUpdateMetrics(policy_loss=0.25, vf_loss=1.5, grad_norm_mean=2.0, batch_size=8, num_gradient_steps=4)
    assert m["policy_loss"] == m.policy_loss == 0.25
    assert "vf_loss" in m and "kl" not in m
    assert list(m)[:3] == ["policy_loss", "vf_loss", "entropy"] and len(m) == 13
    with pytest.raises(KeyError):
        m["kl"]


def test_loss_terms_without_a_value_are_nan() -> None:
    m = PPOUpdateMetrics(grad_norm_mean=0.0, batch_size=0, num_gradient_steps=0)
    assert math.isnan(m.policy_loss) and math.isnan(m.learner_connector_s) and m.weights_version is None


def test_dqn_step_metrics_compare_without_their_td_errors() -> None:
    a = DQNStepMetrics(loss=1.0, td_errors=np.array([1.0, -1.0]), grad_norm=0.5, num_updates=3)
    b = DQNStepMetrics(loss=1.0, td_errors=np.array([2.0]), grad_norm=0.5, num_updates=3)
    assert a == b and a.td_errors.tolist() == [1.0, -1.0]


def test_a_train_result_unpacks_into_a_dict() -> None:
    result = PPOTrainResult(
        reached=True,
        mean_return=450.5,
        env_steps=2048,
        seconds=1.5,
        iterations=1,
        sample_s=1.0,
        update_s=0.5,
        learner_connector_s=0.1,
    )
    assert {**result, "whole_s": 2.0}["env_steps"] == 2048 and dict(result)["reached"] is True


def test_async_figures_are_the_lag_histograms_mean_and_max_and_the_counts() -> None:
    figures = async_figures({0: 2, 1: 1, 5: 1}, dropped=256, unused=512)
    assert figures == {
        "policy_lag_mean": 1.5,
        "policy_lag_max": 5.0,
        "num_env_steps_dropped": 256.0,
        "num_env_steps_unused": 512.0,
    }


def test_async_figures_of_an_empty_histogram_have_no_lag() -> None:
    figures = async_figures({}, dropped=0, unused=0)
    assert math.isnan(figures["policy_lag_mean"]) and math.isnan(figures["policy_lag_max"])


def test_outcomes_in_words_give_a_dash_for_an_agent_without_episodes() -> None:
    nan = math.nan
    outcomes = {"win/x": 1.0, "draw/x": 0.0, "loss/x": 0.0, "win/o": nan, "draw/o": nan, "loss/o": nan}
    assert format_outcomes(outcomes) == "x won 100% drew 0% lost 0%, o won - drew - lost -"
