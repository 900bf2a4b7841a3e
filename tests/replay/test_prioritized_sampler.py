"""PrioritizedSampler: priorities follow the storage's rows (added, evicted, compacted), draws
in proportion to them, argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.errors import ReplayError
from replay.prioritized_sampler import PrioritizedSampler
from replay.storage import EpisodeStorage
from tests.replay.test_storage import episode


def prioritized_storage(capacity: int = 100, **kwargs: float) -> tuple[PrioritizedSampler, EpisodeStorage]:
    sampler = PrioritizedSampler(**kwargs)
    return sampler, EpisodeStorage(capacity_env_steps=capacity, listener=sampler)


def test_added_rows_get_the_largest_priority_to_the_alpha() -> None:
    sampler, storage = prioritized_storage(alpha=0.5)
    storage.add(episodes_to_columnar([episode("a", 2)]))
    assert sampler.priorities_of(storage, storage.keys()).tolist() == [1.0, 1.0]
    sampler.update_priorities(storage, storage.keys()[:1], [4.0])
    storage.add(episodes_to_columnar([episode("b", 1)]))
    key_b = storage.episodes["b"].order << 32
    assert sampler.max_priority == pytest.approx(4.0 + sampler.epsilon)
    assert sampler.priorities_of(storage, [key_b])[0] == pytest.approx((4.0 + sampler.epsilon) ** 0.5)


def test_evicted_rows_drop_to_zero_and_compaction_keeps_the_rest() -> None:
    sampler, storage = prioritized_storage(capacity=4, alpha=1.0)
    storage.add(episodes_to_columnar([episode("a", 3, terminated=True)]))
    old = storage.keys()
    storage.add(episodes_to_columnar([episode("b", 3, terminated=True)]))  # evicts "a"
    assert sampler.priorities_of(storage, old).tolist() == [0.0, 0.0, 0.0]
    sampler.update_priorities(storage, storage.keys(), [1.0, 2.0, 3.0])
    before = sampler.priorities_of(storage, storage.keys())
    storage.compact()
    np.testing.assert_array_equal(sampler.priorities_of(storage, storage.keys()), before)
    rows = storage.step_rows(storage.keys())
    assert rows.tolist() == [0, 1, 2]  # moved to the front; the priorities moved with them


def test_draws_are_proportional_and_weights_normalized() -> None:
    sampler, storage = prioritized_storage(alpha=1.0, beta=1.0, epsilon=1e-9)
    storage.add(episodes_to_columnar([episode("a", 2)]))
    sampler.update_priorities(storage, storage.keys(), [1.0, 3.0])
    draw = sampler.draw(storage, 20000, np.random.default_rng(0))
    assert set(draw.segments.tolist()) == {0}
    assert float((draw.offsets == 1).mean()) == pytest.approx(0.75, abs=0.02)
    assert draw.weights is not None
    assert draw.weights[draw.offsets == 0].max() == pytest.approx(1.0)  # the rarer step weighs most
    assert draw.weights[draw.offsets == 1].max() == pytest.approx(1 / 3)


def test_reset_forgets_everything() -> None:
    sampler, storage = prioritized_storage()
    storage.add(episodes_to_columnar([episode("a", 2)]))
    sampler.update_priorities(storage, storage.keys(), [5.0, 5.0])
    sampler.reset()
    assert sampler.max_priority == 1.0 and sampler.priorities_of(EpisodeStorage(capacity_env_steps=1), []).size == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 2.0}, "'alpha' must be in \\[0, 1\\]"),
        ({"beta": True}, "'beta' must be in \\[0, 1\\]"),
        ({"epsilon": 0}, "'epsilon' must be a finite number > 0"),
        ({"epsilon": float("inf")}, "'epsilon' must be a finite number > 0"),
    ],
    ids=["alpha", "beta_bool", "epsilon_zero", "epsilon_inf"],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ReplayError, match=match):
        PrioritizedSampler(**kwargs)


def test_bad_priorities_raise_the_library_error() -> None:
    sampler, storage = prioritized_storage()
    storage.add(episodes_to_columnar([episode("a", 2)]))
    with pytest.raises(ReplayError, match="'priorities' numbers"):
        sampler.update_priorities(storage, storage.keys(), ["x", "y"])  # type: ignore[list-item]
    with pytest.raises(ReplayError, match="'beta' must be in"):
        sampler.draw(storage, 2, np.random.default_rng(0), beta=float("nan"))
