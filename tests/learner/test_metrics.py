"""Typed learner metrics and loop results: read by attribute, and as a read-only Mapping of their fields."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learner.metrics import DQNStepMetrics, PPOTrainResult, PPOUpdateMetrics


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
