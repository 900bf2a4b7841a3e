"""The ``chunks`` fixture of the learner piece tests."""

from __future__ import annotations

import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from tests.connectors.learner.chunks import make_chunks


@pytest.fixture(scope="module")
def chunks() -> list[SingleAgentEpisode]:
    """Truncate-mode chunks with lookback 3: cut, terminated, fresh and continuing ones."""
    return make_chunks()
