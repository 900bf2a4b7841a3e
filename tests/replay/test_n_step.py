"""n_step_transitions: discounted sums, the real n used, flags, next_obs, joined segments."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
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


def chain(id_: str, steps: int, *, terminated: bool = False, truncated: bool = False) -> SingleAgentEpisode:
    """Obs 10 * t, reward 2 ** t, for t in [0, steps]."""
    return SingleAgentEpisode(
        id_,
        observations=[np.array([10.0 * t], np.float32) for t in range(steps + 1)],
        actions=[0] * steps,
        rewards=[float(2**t) for t in range(steps)],
        terminated=terminated,
        truncated=truncated,
    )


class TestEpisodeEndRule:
    """m = min(n, steps left in the stored episode): m rewards summed, next_obs o_{t+m}, n_step m,
    the episode's flag only where t + m is its end (the module docstring's rule, by hand)."""

    @staticmethod
    def walk(ep: SingleAgentEpisode, n_step: int | np.ndarray) -> dict:
        s = EpisodeStorage(capacity_env_steps=100)
        s.add(episodes_to_columnar([ep]))
        return n_step_transitions(s, np.zeros(3, np.int64), np.array([1, 2, 3]), n_step=n_step, gamma=0.5)

    def test_a_terminated_end_shortens_n_and_sets_terminateds(self) -> None:
        out = self.walk(chain("a", 4, terminated=True), 3)  # t = 1, 2, 3; the end is t = 4
        assert out["rewards"].tolist() == [2 + 0.5 * 4 + 0.25 * 8, 4 + 0.5 * 8, 8.0]
        assert out["next_obs"][:, 0].tolist() == [40.0, 40.0, 40.0]
        assert out["n_step"].tolist() == [3, 2, 1]
        assert out["terminateds"].tolist() == [True, True, True]
        assert out["truncateds"].tolist() == [False, False, False]

    def test_a_truncated_end_shortens_n_and_sets_truncateds(self) -> None:
        out = self.walk(chain("a", 4, truncated=True), 3)
        assert out["rewards"].tolist() == [2 + 0.5 * 4 + 0.25 * 8, 4 + 0.5 * 8, 8.0]
        assert out["next_obs"][:, 0].tolist() == [40.0, 40.0, 40.0]
        assert out["n_step"].tolist() == [3, 2, 1]
        assert out["terminateds"].tolist() == [False, False, False]
        assert out["truncateds"].tolist() == [True, True, True]

    def test_the_end_of_a_stored_chunk_of_a_running_episode_shortens_n_without_flags(self) -> None:
        out = self.walk(chain("a", 4), 3)
        assert out["rewards"].tolist() == [2 + 0.5 * 4 + 0.25 * 8, 4 + 0.5 * 8, 8.0]
        assert out["next_obs"][:, 0].tolist() == [40.0, 40.0, 40.0]
        assert out["n_step"].tolist() == [3, 2, 1]
        assert not out["terminateds"].any() and not out["truncateds"].any()

    def test_an_n_per_transition_is_each_ones_n_then_the_same_rule(self) -> None:
        out = self.walk(chain("a", 6, terminated=True), np.array([1, 3, 5]))  # t = 1, 2, 3; the end is t = 6
        assert out["rewards"].tolist() == [2.0, 4 + 0.5 * 8 + 0.25 * 16, 8 + 0.5 * 16 + 0.25 * 32]
        assert out["next_obs"][:, 0].tolist() == [20.0, 50.0, 60.0]
        assert out["n_step"].tolist() == [1, 3, 3]
        assert out["terminateds"].tolist() == [False, False, True]

    def test_infos_are_those_at_next_obs_on_request(self) -> None:
        ep = chain("a", 4, terminated=True)
        ep = SingleAgentEpisode(
            "a",
            observations=ep.get_observations(),
            actions=ep.get_actions(),
            rewards=ep.get_rewards(),
            infos=[{"t": t} for t in range(5)],
            terminated=True,
        )
        s = EpisodeStorage(capacity_env_steps=100)
        s.add(episodes_to_columnar([ep]))
        out = n_step_transitions(s, np.zeros(2, np.int64), np.array([0, 3]), n_step=2, gamma=0.5, include_infos=True)
        assert out["infos"].tolist() == [{"t": 2}, {"t": 4}]
        assert "infos" not in n_step_transitions(s, np.zeros(1, np.int64), np.array([0]), n_step=2, gamma=0.5)

    def test_model_outputs_can_be_left_out(self, storage: EpisodeStorage) -> None:
        out = n_step_transitions(
            storage, np.array([0]), np.array([0]), n_step=1, gamma=0.5, include_extra_model_outputs=False
        )
        assert "logp" not in out
