"""AddObservationsFromEpisodesToBatch: the latest observations from the episodes or the vector batch."""

from __future__ import annotations

import numpy as np

from connectors.env_to_module import AddObservationsFromEpisodesToBatch
from tests.helpers import SPACES, episode_from_space


def test_observations_come_from_episodes_or_the_vector_batch() -> None:
    eps = [episode_from_space(SPACES["box_f32_3"], SPACES["discrete"], k, seed=k) for k in (1, 2)]
    piece = AddObservationsFromEpisodesToBatch()
    from_eps = piece(rl_module=None, batch={}, episodes=eps)["obs"]
    np.testing.assert_array_equal(from_eps, np.stack([e.get_observations(-1) for e in eps]))
    given = np.ones((2, 3))
    assert piece(rl_module=None, batch={}, episodes=eps, shared_data={"vector_obs": given})["obs"] is given
    assert piece(rl_module=None, batch={"obs": 5}, episodes=eps)["obs"] == 5
