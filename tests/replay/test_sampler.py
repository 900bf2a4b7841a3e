"""The Sampler protocol and Draw: both samplers implement it, their draws address stored steps
(after evictions and compaction too), are seeded by the RNG they are given, and reset starts over."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.errors import ReplayError
from replay.prioritized_sampler import PrioritizedSampler
from replay.sampler import Draw, Sampler
from replay.storage import EpisodeStorage, StepRowListener
from replay.uniform import UniformSampler
from tests.replay.test_storage import episode

SAMPLERS: dict[str, Callable[[], Sampler]] = {"uniform": UniformSampler, "prioritized": PrioritizedSampler}
PROTOCOL_METHODS = ("draw", "reset", "rows_added", "rows_evicted", "rows_moved")


def parametrize_samplers() -> pytest.MarkDecorator:
    return pytest.mark.parametrize("make", list(SAMPLERS.values()), ids=list(SAMPLERS))


def churned_storage(sampler: Sampler, *, compact: bool = True) -> EpisodeStorage:
    """A storage told to ``sampler``: joined chunks, lookback, evictions (dead rows kept), then a
    compaction unless ``compact`` is False."""
    storage = EpisodeStorage(capacity_env_steps=12, listener=sampler)
    for k in range(4):
        storage.add(episodes_to_columnar([episode(f"e{k}", 4, terminated=True)]))
    storage.add(episodes_to_columnar([episode("a", 2, start=3, lookback=2)]))
    storage.add(episodes_to_columnar([episode("a", 3, start=5, lookback=1)]))
    if compact:
        storage.compact()
    return storage


def drawn_keys(storage: EpisodeStorage, draw: Draw) -> list[int]:
    view = storage.segment_view()
    return ((view.order[draw.segments] << 32) + view.t_started[draw.segments] + draw.offsets).tolist()


def test_the_protocol_names_draw_reset_and_the_listener_methods() -> None:
    listener = [n for n in vars(StepRowListener) if not n.startswith("_")]
    own = [n for n in vars(Sampler) if not n.startswith("_")]
    assert (sorted(listener), sorted(own)) == (["rows_added", "rows_evicted", "rows_moved"], ["draw", "reset"])


@parametrize_samplers()
@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_each_sampler_implements_every_protocol_method_with_its_parameters(
    make: Callable[[], Sampler], name: str
) -> None:
    wanted = list(inspect.signature(getattr(Sampler, name)).parameters.values())
    got = list(inspect.signature(getattr(type(make()), name)).parameters.values())
    assert [p.name for p in got[: len(wanted)]] == [p.name for p in wanted]
    assert all(p.default is not inspect.Parameter.empty for p in got[len(wanted) :])  # extras are optional


def test_draw_defaults_to_no_weights() -> None:
    draw = Draw(np.array([0, 1]), np.array([2, 0]))
    assert (draw.segments.tolist(), draw.offsets.tolist(), draw.weights) == ([0, 1], [2, 0], None)


@parametrize_samplers()
def test_a_draw_holds_batch_size_segments_and_offsets(make: Callable[[], Sampler]) -> None:
    sampler = make()
    draw = sampler.draw(churned_storage(sampler), 7, np.random.default_rng(0))
    assert (draw.segments.shape, draw.offsets.shape) == ((7,), (7,))


@parametrize_samplers()
@pytest.mark.parametrize("compact", [False, True], ids=["dead_rows", "compacted"])
def test_draws_address_live_stored_steps_and_reach_every_one(make: Callable[[], Sampler], compact: bool) -> None:
    sampler = make()
    storage = churned_storage(sampler, compact=compact)
    draw = sampler.draw(storage, 3000, np.random.default_rng(1))
    view = storage.segment_view()
    assert view.alive[draw.segments].all()
    assert ((draw.offsets >= 0) & (draw.offsets < view.num_steps[draw.segments])).all()
    # ``episode`` stores observation t at timestep t: the addressed rows hold the drawn timesteps.
    obs = storage.gather_observations(view.obs_start[draw.segments] + draw.offsets)[:, 0]
    np.testing.assert_array_equal(obs, view.t_started[draw.segments] + draw.offsets)
    assert sorted(set(drawn_keys(storage, draw))) == sorted(storage.keys().tolist())


@parametrize_samplers()
def test_draws_never_address_evicted_episodes(make: Callable[[], Sampler]) -> None:
    sampler = make()
    storage = churned_storage(sampler)
    draw = sampler.draw(storage, 500, np.random.default_rng(2))
    drawn = {storage.segment_episode(seg) for seg in draw.segments.tolist()}
    assert drawn == set(storage.episodes) == {"e3", "a"}


def test_only_prioritized_draws_carry_weights() -> None:
    uniform, prioritized = UniformSampler(), PrioritizedSampler()
    assert uniform.draw(churned_storage(uniform), 5, np.random.default_rng(0)).weights is None
    weights = prioritized.draw(churned_storage(prioritized), 5, np.random.default_rng(0)).weights
    assert weights is not None and weights.tolist() == pytest.approx([1.0] * 5)  # equal priorities


@parametrize_samplers()
def test_draws_are_determined_by_the_rng(make: Callable[[], Sampler]) -> None:
    first, second = make(), make()
    a = first.draw(churned_storage(first), 50, np.random.default_rng(3))
    b = second.draw(churned_storage(second), 50, np.random.default_rng(3))
    assert (a.segments.tolist(), a.offsets.tolist()) == (b.segments.tolist(), b.offsets.tolist())


@parametrize_samplers()
def test_an_empty_storage_raises(make: Callable[[], Sampler]) -> None:
    sampler = make()
    with pytest.raises(ReplayError, match="the buffer holds no steps to sample"):
        sampler.draw(EpisodeStorage(capacity_env_steps=5, listener=sampler), 1, np.random.default_rng(0))


@parametrize_samplers()
def test_after_reset_a_sampler_draws_on_a_new_storage_as_a_fresh_one_does(make: Callable[[], Sampler]) -> None:
    def fill(sampler: Sampler) -> EpisodeStorage:
        storage = EpisodeStorage(capacity_env_steps=20, listener=sampler)
        storage.add(episodes_to_columnar([episode("x", 3), episode("y", 2, terminated=True)]))
        if isinstance(sampler, PrioritizedSampler):
            sampler.update_priorities(storage, storage.keys()[:1], [0.01])
        return storage

    used = make()
    old = churned_storage(used)
    used.draw(old, 10, np.random.default_rng(0))
    if isinstance(used, PrioritizedSampler):
        used.update_priorities(old, old.keys(), np.full(len(old.keys()), 50.0))
    used.reset()
    a = used.draw(fill(used), 200, np.random.default_rng(4))
    fresh = make()
    b = fresh.draw(fill(fresh), 200, np.random.default_rng(4))
    assert (a.segments.tolist(), a.offsets.tolist()) == (b.segments.tolist(), b.offsets.tolist())
