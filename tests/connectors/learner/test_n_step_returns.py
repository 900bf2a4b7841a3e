"""NStepReturns against a plain reference loop, on runner chunks."""

from __future__ import annotations

import numpy as np
import pytest

from connectors.learner import NStepReturns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from tests.connectors.learner.chunks import run, steps_of


@pytest.mark.parametrize("n", [1, 3])
def test_n_step_returns_equal_a_plain_loop(chunks: list[SingleAgentEpisode], n: int) -> None:
    gamma = 0.9
    out = run([NStepReturns(n_step=n, gamma=gamma)], chunks)
    for i, (ep, t) in enumerate(steps_of(chunks)):
        used = min(n, len(ep) - t)
        assert out["n_step"][i] == used
        assert out["n_step_returns"][i] == pytest.approx(sum(gamma**j * ep.get_rewards(t + j) for j in range(used)))
        assert out["n_step_terminated"][i] == (t + used == len(ep) and ep.is_terminated)
        np.testing.assert_array_equal(out["n_step_next_obs"][i], np.asarray(ep.get_observations(t + used)))


def test_bad_n_step_and_gamma_raise() -> None:
    with pytest.raises(ConfigError, match=r"'n_step' must be an int >= 1 \(got 0\)"):
        NStepReturns(n_step=0)
    with pytest.raises(ConfigError, match=r"'gamma' must be in \[0, 1\] \(got 2.0\)"):
        NStepReturns(gamma=2.0)
