"""AddNextObservationsFromEpisodesToTrainBatch: the observation after each step, on runner chunks."""

from __future__ import annotations

import numpy as np

from connectors.learner import AddNextObservationsFromEpisodesToTrainBatch
from ray_sampler.data.episode import SingleAgentEpisode
from tests.connectors.learner.chunks import run, steps_of


def test_next_obs_is_the_observation_after_each_step(chunks: list[SingleAgentEpisode]) -> None:
    out = run([AddNextObservationsFromEpisodesToTrainBatch()], chunks)
    rows = steps_of(chunks)
    assert len(out["next_obs"]) == len(rows)
    for i, (ep, t) in enumerate(rows):
        np.testing.assert_array_equal(out["next_obs"][i], np.asarray(ep.get_observations(t + 1)))
