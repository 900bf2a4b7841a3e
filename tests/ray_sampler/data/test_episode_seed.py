"""Every code example of seed 001 (RLlib's Episode page), with its asserted values."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.episode import SingleAgentEpisode


@pytest.fixture
def episode() -> SingleAgentEpisode:
    # Construct a new episode (without any data in it yet).
    episode = SingleAgentEpisode()
    assert len(episode) == 0
    episode.add_env_reset(observation="obs_0", infos="info_0")
    # Even with the initial obs/infos, the episode is still considered len=0.
    assert len(episode) == 0
    for i in range(5):
        episode.add_env_step(
            observation=f"obs_{i + 1}",
            action=f"act_{i}",
            reward=f"rew_{i}",
            terminated=False,
            truncated=False,
            infos=f"info_{i + 1}",
        )
    assert len(episode) == 5
    return episode


def test_seed_getters(episode: SingleAgentEpisode) -> None:
    assert episode.get_observations(0) == "obs_0"
    assert episode.observations[0] == "obs_0"
    assert episode.get_observations([1, 2]) == ["obs_1", "obs_2"]
    assert episode.get_observations(slice(1, 3)) == ["obs_1", "obs_2"]
    assert episode.get_rewards(-1) == "rew_4"
    assert episode.rewards[-1] == "rew_4"
    assert episode.get_actions(0) == "act_0"
    assert episode.actions[0] == "act_0"
    assert episode.get_infos(0) == "info_0"


def test_seed_slice(episode: SingleAgentEpisode) -> None:
    sliced_episode = episode[3:4]
    assert list(sliced_episode.observations) == ["obs_3", "obs_4"]
    assert list(sliced_episode.actions) == ["act_3"]
    assert list(sliced_episode.rewards) == ["rew_3"]


def test_seed_to_numpy(episode: SingleAgentEpisode) -> None:
    assert episode.is_numpy is False
    episode.to_numpy()
    assert episode.is_numpy is True
    assert episode.get_observations([1, 2]).tolist() == ["obs_1", "obs_2"]


def test_seed_cut(episode: SingleAgentEpisode) -> None:
    assert len(episode) == 5
    assert episode.is_done is False
    continuation_episode = episode.cut()
    assert len(episode) == 5
    assert len(continuation_episode) == 0
    assert continuation_episode.get_observations(-1) == "obs_5"
    # The default lookback horizon is 1: the last action, reward and two observations stay readable.
    assert continuation_episode.get_actions(-1) == "act_4"
    assert continuation_episode.get_rewards(-1) == "rew_4"
    assert continuation_episode.get_observations([-2, -1]) == ["obs_4", "obs_5"]


def test_seed_lookback_and_fill() -> None:
    episode = SingleAgentEpisode(
        observations=["o0", "o1", "o2", "o3"],
        actions=["a0", "a1", "a2"],
        rewards=[0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    assert len(episode) == 0
    with pytest.raises(IndexError):
        episode.get_rewards(0)
    assert episode.get_rewards(slice(-3, None)) == [0.0, 1.0, 2.0]
    assert episode.get_rewards(slice(-5, None), fill=0.0) == [0.0, 0.0, 0.0, 1.0, 2.0]


def test_seed_neg_index_as_lookback(capsys: pytest.CaptureFixture[str]) -> None:
    episode = SingleAgentEpisode(
        observations=["o-3", "o-2", "o-1", "o0", "o1", "o2", "o3"],
        actions=["a-3", "a-2", "a-1", "a0", "a1", "a2"],
        rewards=[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    assert len(episode) == 3
    for global_ts in [0, 1, 2]:
        rewards = episode.get_rewards(slice(global_ts - 2, global_ts + 1), neg_index_as_lookback=True)
        print(rewards)
    assert capsys.readouterr().out.splitlines() == [
        "[-2.0, -1.0, 0.0]",
        "[-1.0, 0.0, 1.0]",
        "[0.0, 1.0, 2.0]",
    ]


# ``fill`` with ``one_hot_discrete``: the seed's two lookback examples with Discrete actions (and
# observations) in place of the strings. As in RLlib, a filled position is ``fill`` across the
# one-hot width (zeros for fill=0), not the one-hot of the value ``fill``; real positions stay one-hot.
E3 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
Z3 = [0.0, 0.0, 0.0]


def check_one_hot(got: object, expected: list) -> None:
    arr = np.asarray(got)
    assert arr.dtype == np.float32
    np.testing.assert_array_equal(arr, np.asarray(expected, np.float32))


@pytest.mark.parametrize("numpy_form", [False, True])
def test_seed_lookback_and_fill_one_hot(numpy_form: bool) -> None:
    episode = SingleAgentEpisode(
        observations=[0, 1, 2, 0],
        observation_space=gym.spaces.Discrete(3),
        actions=[0, 1, 2],  # "a0", "a1", "a2"
        action_space=gym.spaces.Discrete(3),
        rewards=[0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    if numpy_form:
        episode.to_numpy()
    assert len(episode) == 0
    # The seed's fill example, without and with one-hot.
    assert list(episode.get_rewards(slice(-5, None), fill=0.0)) == [0.0, 0.0, 0.0, 1.0, 2.0]
    assert list(episode.get_actions(slice(-5, None), fill=0)) == [0, 0, 0, 1, 2]
    check_one_hot(episode.get_actions(slice(-3, None), one_hot_discrete=True), E3)
    check_one_hot(episode.get_actions(slice(-5, None), fill=0, one_hot_discrete=True), [Z3, Z3, *E3])
    check_one_hot(episode.get_actions(-5, fill=0, one_hot_discrete=True), Z3)
    check_one_hot(episode.get_actions(-3, fill=0, one_hot_discrete=True), E3[0])
    check_one_hot(episode.get_actions(0, fill=0, one_hot_discrete=True), Z3)  # past the end (len 0)
    check_one_hot(episode.get_actions([-4, -1, 0], fill=0, one_hot_discrete=True), [Z3, E3[2], Z3])
    check_one_hot(episode.get_actions(slice(-5, None), fill=-1, one_hot_discrete=True), [[-1.0] * 3] * 2 + E3)
    check_one_hot(episode.get_observations(slice(-6, None), fill=0, one_hot_discrete=True), [Z3, Z3, *E3, E3[0]])
    with pytest.raises(IndexError):
        episode.get_actions(-4, one_hot_discrete=True)


@pytest.mark.parametrize("numpy_form", [False, True])
def test_seed_neg_index_as_lookback_fill_one_hot(numpy_form: bool) -> None:
    episode = SingleAgentEpisode(
        observations=[0, 1, 2, 0, 1, 2, 0],
        observation_space=gym.spaces.Discrete(3),
        actions=[0, 1, 2, 0, 1, 2],  # "a-3", "a-2", "a-1" (lookback), "a0", "a1", "a2"
        action_space=gym.spaces.Discrete(3),
        rewards=[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    if numpy_form:
        episode.to_numpy()
    assert len(episode) == 3
    # The seed's loop, looking 4 timesteps back (past the 3-step lookback, so filled) instead of 2.
    rewards, actions = [], []
    for global_ts in [0, 1, 2]:
        sl = slice(global_ts - 4, global_ts + 1)
        rewards.append(list(episode.get_rewards(sl, neg_index_as_lookback=True, fill=0.0)))
        actions.append(episode.get_actions(sl, neg_index_as_lookback=True, fill=0, one_hot_discrete=True))
    assert rewards == [[0.0, -3.0, -2.0, -1.0, 0.0], [-3.0, -2.0, -1.0, 0.0, 1.0], [-2.0, -1.0, 0.0, 1.0, 2.0]]
    check_one_hot(actions[0], [Z3, *E3, E3[0]])
    check_one_hot(actions[1], [*E3, *E3[:2]])
    check_one_hot(actions[2], [E3[1], E3[2], *E3])
    check_one_hot(episode.get_actions(-4, neg_index_as_lookback=True, fill=0, one_hot_discrete=True), Z3)
    check_one_hot(episode.get_actions(-3, neg_index_as_lookback=True, fill=0, one_hot_discrete=True), E3[0])
    check_one_hot(episode.get_actions(-1, neg_index_as_lookback=True, fill=0, one_hot_discrete=True), E3[2])
    check_one_hot(
        episode.get_actions([-5, -1, 0, 3], neg_index_as_lookback=True, fill=0, one_hot_discrete=True),
        [Z3, E3[2], E3[0], Z3],
    )
    check_one_hot(
        episode.get_observations(slice(-5, 0), neg_index_as_lookback=True, fill=0, one_hot_discrete=True),
        [Z3, Z3, *E3],
    )


# The calls the issue lists (concat_episode, slice, cut, get_state/from_state, to_numpy, validate,
# get_return, get_duration_s, len) on the seed's episodes; each expected value is what RLlib 2.60
# returns for the same calls (run once under RLlib's own interpreter), unless the comment says
# where we deliberately differ (docs/rllib-differences.md).
def numeric_seed_episode() -> SingleAgentEpisode:
    """The seed's first episode with rewards 0.0 .. 4.0 in place of "rew_i" (so returns add up)."""
    episode = SingleAgentEpisode()
    episode.add_env_reset(observation="obs_0", infos="info_0")
    for i in range(5):
        episode.add_env_step(observation=f"obs_{i + 1}", action=f"act_{i}", reward=float(i), infos=f"info_{i + 1}")
    return episode


def test_seed_slice_keeps_time_and_lookback() -> None:
    part = numeric_seed_episode()[3:4]
    assert (part.t_started, len(part), part.len_lookback_buffer) == (3, 1, 0)
    assert part.get_observations(slice(-3, None)) == ["obs_3", "obs_4"]  # clipped, as RLlib's


def test_seed_cut_then_concat_rebuilds_the_episode() -> None:
    episode = numeric_seed_episode()
    cont = episode.cut()
    assert (len(cont), cont.t_started, cont.get_observations(-1)) == (0, 5, "obs_5")
    cont.add_env_step(observation="obs_6", action="act_5", reward=5.0, infos="info_6", terminated=True)
    episode.concat_episode(cont)
    assert (len(episode), episode.t, episode.is_terminated, episode.get_return()) == (6, 6, True, 15.0)
    assert episode.get_observations(-1) == "obs_6" and episode.get_infos(-1) == "info_6"
    episode.validate()


def test_seed_state_round_trip() -> None:
    episode = numeric_seed_episode()
    back = SingleAgentEpisode.from_state(episode.get_state())
    assert (len(back), back.get_observations(0), back.get_infos(5), back.get_rewards()) == (
        5,
        "obs_0",
        "info_5",
        [0.0, 1.0, 2.0, 3.0, 4.0],
    )
    back.validate()


def test_seed_len_and_return_leave_the_lookback_out() -> None:
    lookback_only = SingleAgentEpisode(
        observations=["o0", "o1", "o2", "o3"],
        actions=["a0", "a1", "a2"],
        rewards=[0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    assert (len(lookback_only), lookback_only.get_return()) == (0, 0.0)
    # RLlib 2.60 gives t_started 0 here (its docstring says len(observations) - 1); we count the lookback.
    assert lookback_only.t_started == 3
    three = SingleAgentEpisode(
        observations=["o-3", "o-2", "o-1", "o0", "o1", "o2", "o3"],
        actions=["a-3", "a-2", "a-1", "a0", "a1", "a2"],
        rewards=[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    assert (len(three), three.get_return(), three.get_duration_s()) == (3, 3.0, 0.0)


def test_seed_to_numpy_keeps_values_and_validates() -> None:
    episode = numeric_seed_episode().to_numpy()
    episode.validate()
    assert episode.get_rewards().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert episode.get_observations(slice(4, 10)).tolist() == ["obs_4", "obs_5"]


def test_seed_duration_of_a_recorded_episode() -> None:
    episode = numeric_seed_episode()
    running = episode.get_duration_s()
    assert running > 0.0
    episode.cut()
    assert episode.get_duration_s() >= running
