"""MultiAgentColumnar: packing and unpacking multi-agent chunks gives back equal chunks, one group per module."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.multi_agent_columnar import columnar_to_multi_agent_episodes, multi_agent_episodes_to_columnar
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import DataFormatError
from tests.ray_sampler.data.test_multi_agent_episode import record
from tests.ray_sampler.ma_envs import assert_same_episode


@pytest.mark.parametrize("seed", range(10))
def test_round_trip_of_random_schedule_chunks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    _, chunks = record(seed, cut_every=[int(x) for x in rng.integers(1, 6, 4)], lookbacks=[0, 2, 5, 1])
    for c in chunks:  # agents a0/a1 on one module, a2/a3 on another
        for aid in c.agent_episodes:
            c._agent_to_module_mapping[aid] = "low" if aid in ("a0", "a1") else "high"  # noqa: SLF001
    col = pickle.loads(pickle.dumps(multi_agent_episodes_to_columnar(chunks), protocol=5))  # as ray.put ships it
    assert set(col.groups) <= {"low", "high"}
    assert col.num_env_steps == sum(len(c) for c in chunks)
    assert col.num_agent_steps == sum(c.agent_steps() for c in chunks)
    back = columnar_to_multi_agent_episodes(col)
    assert len(back) == len(chunks)
    for got, want in zip(back, chunks):
        assert_same_episode(got, want)
        assert got.len_lookback_buffer == want.len_lookback_buffer
        for aid, sa in want.agent_episodes.items():  # the lookback travels too
            h = sa.len_lookback_buffer
            assert got.agent_episodes[aid].len_lookback_buffer == h
            back_obs = got.agent_episodes[aid].get_observations(list(range(-h, 0)), neg_index_as_lookback=True)
            want_obs = sa.get_observations(list(range(-h, 0)), neg_index_as_lookback=True)
            assert np.asarray(back_obs).tolist() == np.asarray(want_obs).tolist()  # ints the env emitted


def test_a_module_whose_agents_do_not_stack_gets_a_group_per_agent() -> None:
    ep = MultiAgentEpisode("e", observation_space={"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Box(0, 1, (3,))})
    ep.add_env_reset(observations={"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})
    col = multi_agent_episodes_to_columnar([ep])
    assert sorted(col.groups) == ["default_policy/a", "default_policy/b"]
    assert_same_episode(columnar_to_multi_agent_episodes(col)[0], ep)


def test_bad_input() -> None:
    with pytest.raises(DataFormatError, match="non-empty list of MultiAgentEpisode"):
        multi_agent_episodes_to_columnar([])
    ep = MultiAgentEpisode("e")
    ep.add_env_reset(observations={"a": 0})
    col = multi_agent_episodes_to_columnar([ep])
    broken = type(col)(**{**col.__dict__, "maps": np.zeros(0, np.int64)})
    with pytest.raises(DataFormatError, match="'maps' holds 0 entries; the chunks' agents need 1"):
        columnar_to_multi_agent_episodes(broken)
