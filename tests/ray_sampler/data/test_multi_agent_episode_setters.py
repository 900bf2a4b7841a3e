"""MultiAgentEpisode setters: each agent's data overwritten at its own step indices, as RLlib's."""

from __future__ import annotations

import pytest

from tests.ray_sampler.data.test_multi_agent_episode_getters import one_agent
from tests.ray_sampler.data.test_multi_agent_episode_slicing import gappy


def test_set_observations_writes_at_each_agents_own_index() -> None:
    ep = gappy()
    ep.set_observations(new_data={"a0": 30, "a1": 10}, at_indices=1)
    assert ep.get_observations(env_steps=False) == {"a0": [0, 30, 4], "a1": [0, 10, 2, 3]}


def test_set_actions_takes_a_slice() -> None:
    ep = gappy()
    ep.set_actions(new_data={"a1": [7, 8]}, at_indices=slice(0, 2))
    assert ep.get_actions(env_steps=False) == {"a0": [0, 3], "a1": [7, 8, 2]}


def test_set_rewards_reaches_into_the_lookback() -> None:
    ep = one_agent([4, 5, 6, 7], lookback=2)
    ep.set_rewards(new_data={"A": 50.0}, at_indices=-1, neg_index_as_lookback=True)
    assert ep.get_rewards(slice(-2, None), "A", neg_index_as_lookback=True) == {"A": [4.0, 50.0, 6.0]}
    assert ep.get_return() == 6.0  # lookback is not counted


def test_set_extra_model_outputs_writes_the_key() -> None:
    ep = one_agent([4, 5, 6], lookback=0)
    ep.set_extra_model_outputs(key="logp", new_data={"A": [-1, -2]})
    assert ep.get_extra_model_outputs("logp") == {"A": [-1, -2]}


def test_an_unknown_agent_raises_before_any_is_changed() -> None:
    ep = gappy()
    with pytest.raises(KeyError, match=r"agents \['zz'\] are not in this episode"):
        ep.set_observations(new_data={"a1": 99, "zz": 1}, at_indices=0)
    assert ep.get_observations(0, env_steps=False)["a1"] == 0
