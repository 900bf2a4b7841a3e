"""n_step_transitions: discounted sums, the real n used, flags, next_obs, joined segments."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from replay.n_step import n_step_transitions
from replay.storage import EpisodeStorage
from tests.replay.test_storage import episode


@pytest.fixture
def storage() -> EpisodeStorage:
    """Episode "a" of 5 steps in two joined chunks, terminated; "b" of 2 steps, running.
    The helper's episodes have obs t, reward t + 1, logp -t."""
    s = EpisodeStorage(capacity_env_steps=100)
    s.add(episodes_to_columnar([episode("a", 3)]))
    s.add(episodes_to_columnar([episode("a", 2, start=3, lookback=1, terminated=True), episode("b", 2)]))
    return s


def test_walks_across_joined_chunks_and_stops_at_the_terminal(storage: EpisodeStorage) -> None:
    seg = np.array([0, 0, 1, 1])  # a's first chunk (steps 0-2), a's second chunk (steps 3-4)
    off = np.array([0, 2, 0, 1])
    out = n_step_transitions(storage, seg, off, n_step=3, gamma=0.5)
    assert out["obs"][:, 0].tolist() == [0.0, 2.0, 3.0, 4.0]
    assert out["n_step"].tolist() == [3, 3, 2, 1]
    assert out["rewards"].tolist() == [1 + 0.5 * 2 + 0.25 * 3, 3 + 0.5 * 4 + 0.25 * 5, 4 + 0.5 * 5, 5.0]
    assert out["next_obs"][:, 0].tolist() == [3.0, 5.0, 5.0, 5.0]
    assert out["terminateds"].tolist() == [False, True, True, True]
    assert not out["truncateds"].any()
    assert out["t"].tolist() == [0, 2, 3, 4]
    assert out["keys"].tolist() == [0, 2, 3, 4]  # order 0: keys are t
    assert out["logp"].tolist() == [0.0, -2.0, -3.0, -4.0]  # the first step's model output


def test_a_running_episode_ends_its_walk_without_flags(storage: EpisodeStorage) -> None:
    out = n_step_transitions(storage, np.array([2]), np.array([0]), n_step=5, gamma=1.0)
    assert (out["n_step"].tolist(), out["rewards"].tolist(), out["next_obs"][:, 0].tolist()) == ([2], [3.0], [2.0])
    assert not out["terminateds"].any() and not out["truncateds"].any()
    assert out["keys"].tolist() == [1 << 32]  # "b" was inserted second


def test_one_step_is_the_plain_transition(storage: EpisodeStorage) -> None:
    out = n_step_transitions(storage, np.array([0, 2]), np.array([1, 1]), n_step=1, gamma=0.9)
    assert out["rewards"].tolist() == [2.0, 2.0] and out["n_step"].tolist() == [1, 1]
    assert out["next_obs"][:, 0].tolist() == [2.0, 2.0] and out["actions"].tolist() == [1, 1]
