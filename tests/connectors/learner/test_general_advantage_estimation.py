"""GeneralAdvantageEstimation against a plain reference loop, across cuts and terminals."""

from __future__ import annotations

import numpy as np
import pytest

from connectors.learner import AddColumnsFromEpisodesToTrainBatch, GeneralAdvantageEstimation
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from tests.connectors.learner.chunks import StampValues, run


@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.5, 1.0), (1.0, 0.0)])
def test_gae_equals_a_plain_loop_across_cuts_and_terminals(
    chunks: list[SingleAgentEpisode], gamma: float, lam: float
) -> None:
    out = run(
        [
            AddColumnsFromEpisodesToTrainBatch(),
            GeneralAdvantageEstimation(gamma=gamma, lambda_=lam, standardize_advantages=False),
        ],
        chunks,
    )
    module = StampValues()
    expected_adv, expected_targets = [], []
    for ep in chunks:
        values = module.compute_values(np.asarray([ep.get_observations(t) for t in range(len(ep) + 1)]))
        adv, next_adv = [0.0] * len(ep), 0.0
        for t in reversed(range(len(ep))):
            terminal = t == len(ep) - 1 and ep.is_terminated
            next_value = 0.0 if terminal else values[t + 1]  # a cut chunk bootstraps from its last obs
            delta = ep.get_rewards(t) + gamma * next_value - values[t]
            next_adv = delta + gamma * lam * (0.0 if t == len(ep) - 1 else next_adv)
            adv[t] = next_adv
        expected_adv += adv
        expected_targets += [a + v for a, v in zip(adv, values[:-1], strict=True)]
    np.testing.assert_allclose(out["advantages"], expected_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["value_targets"], expected_targets, rtol=1e-12, atol=1e-12)


def test_standardized_advantages(chunks: list[SingleAgentEpisode]) -> None:
    out = run([GeneralAdvantageEstimation(standardize_advantages=True)], chunks)
    assert abs(out["advantages"].mean()) < 1e-9 and abs(out["advantages"].std() - 1) < 1e-9


@pytest.mark.parametrize(("field", "value"), [("gamma", 1.5), ("lambda_", -0.1)])
def test_gamma_and_lambda_outside_0_1_raise(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"'{field}' must be in \[0, 1\] \(got {value}\)"):
        GeneralAdvantageEstimation(**{field: value})
