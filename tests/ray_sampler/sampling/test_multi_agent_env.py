"""The multi-agent env contract: make_multi_agent and the checks a runner makes of each env output."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import ConfigError, MultiAgentEnvError
from ray_sampler.sampling.multi_agent_env import ALL, check_multi_agent_output, is_multi_agent_env, make_multi_agent
from tests.ray_sampler.ma_envs import RandomScheduleEnv


class TestMakeMultiAgent:
    def test_each_agent_is_its_own_env_seeded_from_the_reset_seed(self) -> None:
        env = make_multi_agent("CartPole-v1", num_agents=3)({})
        obs, _ = env.reset(seed=7)
        for i in range(3):
            want, _ = gym.make("CartPole-v1").reset(seed=7 + i)
            assert np.array_equal(obs[i], want)
        assert env.possible_agents == [0, 1, 2] and env.get_observation_space(2).shape == (4,)

    def test_config_sets_the_number_of_agents(self) -> None:
        env = make_multi_agent("CartPole-v1")({"num_agents": 4})
        assert env.possible_agents == [0, 1, 2, 3] and env.max_num_agents == 4

    def test_an_agent_leaves_when_done_and_a_time_limit_truncates_all(self) -> None:
        env = make_multi_agent("CartPole-v1", num_agents=2)({})
        env.reset(seed=0)
        term = trunc = {ALL: False}
        live, steps = {0, 1}, 0
        while not (term[ALL] or trunc[ALL]):
            _, _, term, trunc, _ = env.step(dict.fromkeys(live, 1))  # always right: falls within ~10 steps
            live -= {a for a in live if term.get(a) or trunc.get(a)}
            steps += 1
        assert (term[ALL], trunc[ALL], env.agents) == (True, False, [])
        env = make_multi_agent(lambda cfg: gym.make("CartPole-v1", max_episode_steps=3), num_agents=2)({})
        env.reset(seed=0)
        for _ in range(3):
            _, _, term, trunc, _ = env.step({0: 0, 1: 1} if env.agents == [0, 1] else dict.fromkeys(env.agents, 0))
        assert (term[ALL], trunc[ALL]) == (False, True)

    def test_bad_num_agents(self) -> None:
        with pytest.raises(ConfigError, match=r"'num_agents' must be an int >= 1 \(got 0\)"):
            make_multi_agent("CartPole-v1", num_agents=0)
        with pytest.raises(ConfigError, match=r"env_config 'num_agents' must be an int >= 1 \(got 'x'\)"):
            make_multi_agent("CartPole-v1")({"num_agents": "x"})


class TestChecks:
    def env(self) -> RandomScheduleEnv:
        return RandomScheduleEnv({"num_agents": 2})

    def test_missing_all_key(self) -> None:
        with pytest.raises(MultiAgentEnvError, match=r"truncateds at env step 3 must be a dict with the key '__all__'"):
            check_multi_agent_output(self.env(), 3, {}, {}, {ALL: False}, {"a0": False}, {})

    def test_unknown_agent(self) -> None:
        with pytest.raises(MultiAgentEnvError, match=r"rewards at env step 2 name agent 'zz', which is not in"):
            check_multi_agent_output(self.env(), 2, {}, {"zz": 1.0}, {ALL: False}, {ALL: False}, {})

    def test_observation_outside_its_space(self) -> None:
        bad = {"a1": np.array([1.5, 0.0])}
        with pytest.raises(
            MultiAgentEnvError, match=r"agent 'a1''s observation at env step 0 is not in its observation"
        ):
            check_multi_agent_output(self.env(), 0, bad)

    def test_not_a_dict(self) -> None:
        with pytest.raises(MultiAgentEnvError, match=r"observations at env step 1 must be a dict by agent"):
            check_multi_agent_output(self.env(), 1, [1, 2], {}, {ALL: False}, {ALL: False}, {})

    def test_a_good_output_passes(self) -> None:
        env = self.env()
        obs, infos = env.reset(seed=0)
        check_multi_agent_output(env, 0, obs, infos=infos)
        out = env.step(dict.fromkeys(obs, 0))
        check_multi_agent_output(env, 1, *out)

    def test_is_multi_agent_env(self) -> None:
        assert is_multi_agent_env(self.env()) and not is_multi_agent_env(gym.make("CartPole-v1"))
