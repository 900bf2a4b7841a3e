"""DQN learners fed by a replay: state round trips, pulling batches and pushing priorities (a
LearnerGroup of them pulling from a replay actor is in test_learner_group.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from learner.dqn import DQNConfig, DQNLearner, QModule
from replay.actor import ReplayActor, ReplayConfig
from tests.replay.test_storage import episode

SPACES = (gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2))


def make_module() -> QModule:
    return QModule(*SPACES, hidden_sizes=(8, 8), seed=3)


def random_batches(num: int, size: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "obs": rng.normal(size=(size, 4)).astype(np.float32),
            "next_obs": rng.normal(size=(size, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, size),
            "rewards": rng.normal(size=size),
            "terminateds": rng.random(size) < 0.2,
            "n_step": rng.integers(1, 4, size),
            "weights": rng.uniform(0.5, 1, size),
            "keys": np.arange(j * size, (j + 1) * size),
        }
        for j in range(num)
    ]


def test_dqn_learner_state_round_trip_continues_identically() -> None:
    batches = random_batches(4, 16)
    a = DQNLearner(make_module(), DQNConfig(target_update_every=2))
    for b in batches[:3]:
        a.update_from_batch(b)
    b_learner = DQNLearner(make_module(), DQNConfig(target_update_every=2))
    b_learner.set_state(a.get_state())
    for learner in (a, b_learner):
        learner.update_from_batch(batches[3])  # the 4th step also copies the target network
    for key in a.module.params:
        np.testing.assert_array_equal(a.module.params[key], b_learner.module.params[key])
        np.testing.assert_array_equal(a.target_params[key], b_learner.target_params[key])
    assert a.num_updates == b_learner.num_updates == 4
    np.testing.assert_array_equal(a.target_params["q.0.w"], a.module.params["q.0.w"])


def test_pull_from_a_replay_and_push_priorities_back() -> None:
    replay = ReplayActor(ReplayConfig(prioritized=True, alpha=1.0, seed=0))
    replay.add([episode("a", 5, terminated=True), episode("b", 4)])
    learner = DQNLearner(QModule(gym.spaces.Box(-np.inf, np.inf, (1,)), gym.spaces.Discrete(2), seed=0))
    assert learner.pull_from_replay(replay, 2, 8, n_step=2) == 16
    tds = {}
    for j in range(2):
        terms, _, n = learner.compute_gradients(j)
        assert n == 8
        for key, td in zip(learner.pulled_batches[j]["keys"], terms["td_errors"], strict=True):
            tds[int(key)] = abs(float(td))
    assert learner.push_priorities(replay) == 16
    for key, td in tds.items():
        assert replay.buffer.get_priorities([key])[0] == pytest.approx(td + replay.buffer.epsilon)
    assert learner.push_priorities(replay) == 0  # sent once


@pytest.mark.parametrize("prioritized", [False, True])
def test_pull_from_a_plain_buffer(prioritized: bool) -> None:
    from replay.buffer import EpisodeReplayBuffer
    from replay.prioritized import PrioritizedEpisodeReplayBuffer

    buffer = (PrioritizedEpisodeReplayBuffer if prioritized else EpisodeReplayBuffer)(capacity_env_steps=50, seed=0)
    buffer.add([episode("a", 6, terminated=True)])
    learner = DQNLearner(QModule(gym.spaces.Box(-np.inf, np.inf, (1,)), gym.spaces.Discrete(2), seed=0))
    assert learner.pull_from_replay(buffer, 3, 4, n_step=2) == 12
    terms, _, n = learner.compute_gradients(2)
    assert n == 4 and np.isfinite(terms["loss"])
    if prioritized:
        assert learner.push_priorities(buffer) == 4


def test_dqn_learns_the_right_action_of_a_discrete_space_with_a_start() -> None:
    # A bandit: reward 1 only for env action +1 of Discrete(3, start=-1), one-step episodes.
    space = gym.spaces.Discrete(3, start=-1)
    learner = DQNLearner(QModule(gym.spaces.Box(-1, 1, (2,)), space, hidden_sizes=(16,), seed=0), DQNConfig(lr=1e-2))
    rng = np.random.default_rng(0)
    for _ in range(300):
        actions = rng.integers(-1, 2, 32)
        learner.update_from_batch(
            {
                "obs": rng.uniform(-1, 1, (32, 2)),
                "next_obs": rng.uniform(-1, 1, (32, 2)),
                "actions": actions,
                "rewards": (actions == 1).astype(float),
                "terminateds": np.ones(32, bool),
            }
        )
    obs = {"obs": rng.uniform(-1, 1, (50, 2))}
    assert set(learner.module.forward_inference(obs)["actions"].tolist()) == {1}


def test_dqn_learner_refuses_observations_its_loss_cannot_read() -> None:
    from ray_sampler.errors import SpaceError

    spaces = (gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,))}), gym.spaces.Discrete(2))
    with pytest.raises(SpaceError, match="DQNLearner needs a Box observation space"):
        DQNLearner(QModule(*spaces))
