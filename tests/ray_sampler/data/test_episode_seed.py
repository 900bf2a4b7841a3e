"""Every code example of seed 001 (RLlib's Episode page), with its asserted values."""

from __future__ import annotations

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
