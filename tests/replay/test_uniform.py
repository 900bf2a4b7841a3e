"""UniformSampler: uniform over stored steps, independent of the physical layout, seeded."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.errors import ReplayError
from replay.storage import EpisodeStorage
from replay.uniform import UniformSampler
from tests.replay.test_storage import episode


def drawn_keys(storage: EpisodeStorage, seed: int, n: int = 3000) -> np.ndarray:
    draw = UniformSampler().draw(storage, n, np.random.default_rng(seed))
    view = storage.segment_view()
    return (view.order[draw.segments] << 32) + view.t_started[draw.segments] + draw.offsets


def test_every_stored_step_is_drawn_about_equally_and_nothing_else() -> None:
    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode("a", 3), episode("b", 2, terminated=True)]))
    storage.add(episodes_to_columnar([episode("a", 2, start=3, lookback=1)]))
    keys = drawn_keys(storage, 0)
    assert sorted(set(keys.tolist())) == sorted(storage.keys().tolist())
    assert np.unique(keys, return_counts=True)[1].min() > 3000 / 7 * 0.8
    assert UniformSampler().draw(storage, 5, np.random.default_rng(0)).weights is None


def test_draws_follow_insertion_order_not_the_physical_layout() -> None:
    storage = EpisodeStorage(capacity_env_steps=12)
    for k in range(5):
        storage.add(episodes_to_columnar([episode(f"e{k}", 4, terminated=True)]))
    before = drawn_keys(storage, 7)
    storage.compact()  # rows and segments renumbered
    np.testing.assert_array_equal(drawn_keys(storage, 7), before)


def test_an_empty_storage_raises() -> None:
    with pytest.raises(ReplayError, match="holds no steps"):
        UniformSampler().draw(EpisodeStorage(capacity_env_steps=5), 1, np.random.default_rng(0))
