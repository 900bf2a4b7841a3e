"""MultiAgentEpisode get_state / from_state: RLlib's keys, plain data only, exact round trips."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import EpisodeError
from tests.ray_sampler.data.test_multi_agent_episode import turn_based
from tests.ray_sampler.data.test_multi_agent_episode_slicing import gappy
from tests.ray_sampler.ma_envs import assert_same_episode

RLLIB_KEYS = {
    "id_", "env_t_started", "env_t", "agent_t_started", "env_t_to_agent_t", "_hanging_actions_end",
    "_hanging_extra_model_outputs_end", "_hanging_rewards_end", "_hanging_rewards_begin", "is_terminated",
    "is_truncated", "agent_episodes", "_agent_to_module_mapping", "custom_data",
}  # fmt: skip
PLAIN = (dict, list, tuple, str, int, float, bool, type(None), np.ndarray, np.generic)


def spaced() -> MultiAgentEpisode:
    """turn_based() with spaces, a model output, custom data and a module mapping."""
    space = gym.spaces.Discrete(20)
    ep = MultiAgentEpisode(
        "s", observation_space={"p0": space, "p1": space}, action_space={"p0": space, "p1": space},
        agent_to_module_mapping_fn=lambda aid, episode: f"m_{aid}",
    )  # fmt: skip
    ep.add_env_reset(observations={"p0": 0})
    ep.add_env_step({"p1": 1}, {"p0": 10}, {"p0": 1.0}, extra_model_outputs={"p0": {"logp": -1.0}})
    ep.add_env_step({"p0": 2}, {"p1": 11}, {"p1": 2.0, "p0": 0.5}, extra_model_outputs={"p1": {"logp": -2.0}})
    ep.custom_data["note"] = [1, 2]
    return ep


def assert_plain(x: Any, path: str = "state") -> None:
    assert isinstance(x, PLAIN), f"{path} is a {type(x).__name__}"
    if isinstance(x, dict):
        for k, v in x.items():
            assert_plain(k, f"{path} key")
            assert_plain(v, f"{path}[{k!r}]")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            assert_plain(v, f"{path}[{i}]")


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def round_trip(ep: MultiAgentEpisode) -> MultiAgentEpisode:
    return MultiAgentEpisode.from_state(
        ep.get_state(), observation_space=ep.observation_space, action_space=ep.action_space,
        agent_to_module_mapping_fn=ep.agent_to_module_mapping_fn,
    )  # fmt: skip


def test_state_keys_are_rllibs_plus_ours() -> None:
    assert set(spaced().get_state()) == RLLIB_KEYS | {"len_lookback_buffer", "done_agents"}


def test_agent_episodes_are_agent_and_state_pairs() -> None:
    assert [aid for aid, _ in spaced().get_state()["agent_episodes"]] == ["p0", "p1"]


@pytest.mark.parametrize("form", ["list", "numpy"])
def test_state_is_plain_data_without_spaces(form: str) -> None:
    ep = spaced() if form == "list" else spaced().to_numpy()
    assert_plain(ep.get_state())


@pytest.mark.parametrize(
    "make",
    [spaced, lambda: spaced().to_numpy(), lambda: spaced().cut(len_lookback_buffer=1), lambda: gappy()[1:3]],
    ids=["list", "numpy", "cut-chunk", "slice"],
)
def test_from_state_round_trips_exactly(make: Any) -> None:
    ep = make()
    back = round_trip(ep)
    assert_same_episode(back, ep)
    assert same_state(back.get_state(), ep.get_state())
    assert back.is_numpy == ep.is_numpy and back.custom_data == ep.custom_data


def test_from_state_takes_the_spaces_and_mapping_fn() -> None:
    ep = spaced()
    back = round_trip(ep)
    assert back.agent_episodes["p0"].observation_space == gym.spaces.Discrete(20)
    assert back.agent_to_module_mapping == {"p0": "m_p0", "p1": "m_p1"}
    back.add_env_step({"p1": 3}, {"p0": 12}, {"p0": 1.0})
    assert back.get_hanging_action("p0") == 12


def test_a_cut_chunk_continues_after_the_round_trip() -> None:
    ep = turn_based()
    cont = round_trip(ep.cut(len_lookback_buffer=2))
    cont.add_env_step({"p1": 5}, {"p0": 14}, {"p1": 1.0})
    ep.concat_episode(cont)
    assert ep.agent_episodes["p1"].get_rewards() == [2.0, 5.0]


def test_a_state_whose_agent_t_started_disagrees_is_refused() -> None:
    state = spaced().get_state()
    state["agent_t_started"] = {"p0": 3, "p1": 0}
    with pytest.raises(EpisodeError, match=r"'agent_t_started' .* differs from the agents'"):
        MultiAgentEpisode.from_state(state)
