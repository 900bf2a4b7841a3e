"""The multi-agent env contract: the MultiAgentEnv base class as RLlib-style subclasses use it,
make_multi_agent, and the checks a runner makes of each env output."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError, EnvCreatorError, MultiAgentEnvError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import (
    ALL,
    MultiAgentEnv,
    check_multi_agent_output,
    is_multi_agent_env,
    make_multi_agent,
)
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from tests.ray_sampler.ma_envs import RandomScheduleEnv
from tests.ray_sampler.rllib_style_envs import LateJoinerEnv, SimultaneousEnv, TurnBasedEnv

BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class TestBaseClass:
    """What a subclass may call through ``super()``, as on RLlib's MultiAgentEnv."""

    def test_reset_seeds_np_random_and_returns_nothing(self) -> None:
        env, twin = SimultaneousEnv(), SimultaneousEnv()
        assert MultiAgentEnv.reset(env, seed=5) is None
        MultiAgentEnv.reset(twin, seed=5)
        assert env.np_random.integers(1000, size=4).tolist() == twin.np_random.integers(1000, size=4).tolist()
        MultiAgentEnv.reset(twin, seed=6)
        assert env.np_random_seed == 5 and twin.np_random_seed == 6

    def test_a_subclass_reset_through_super_is_reproducible(self) -> None:
        first, _ = SimultaneousEnv().reset(seed=3)
        again, _ = SimultaneousEnv().reset(seed=3)
        assert {a: o.tolist() for a, o in first.items()} == {a: o.tolist() for a, o in again.items()}

    def test_step_is_abstract(self) -> None:
        with pytest.raises(NotImplementedError, match="MultiAgentEnv must implement step"):
            MultiAgentEnv().step({})

    def test_render_and_close_do_nothing(self) -> None:
        env = TurnBasedEnv()
        assert env.render() is None and env.close() is None

    def test_agents_and_possible_agents_default_to_each_other(self) -> None:
        class Named(MultiAgentEnv):
            agents = ["x", "y"]  # noqa: RUF012  # RLlib's docs set either one as a class attribute

        class Possible(MultiAgentEnv):
            possible_agents = ["p"]  # noqa: RUF012

        assert Named().possible_agents == ["x", "y"] and Possible().agents == ["p"]
        assert (Named().num_agents, Named().max_num_agents, MultiAgentEnv().agents) == (2, 2, [])

    def test_space_getters_read_dicts_a_dict_space_or_one_shared_space(self) -> None:
        env = MultiAgentEnv()
        env.observation_spaces = {"a": BOX}
        assert env.get_observation_space("a") is BOX
        env = MultiAgentEnv()
        env.observation_space = gym.spaces.Dict({"a": BOX, "b": gym.spaces.Discrete(2)})
        env.action_space = gym.spaces.Discrete(3)  # no agent keys: every agent's
        assert env.get_observation_space("b") == gym.spaces.Discrete(2)
        assert env.get_action_space("zz") == gym.spaces.Discrete(3)

    def test_a_missing_space_names_the_agent_and_what_to_set(self) -> None:
        env = MultiAgentEnv()
        env.action_spaces = {"a": gym.spaces.Discrete(2)}
        with pytest.raises(
            MultiAgentEnvError, match=r"MultiAgentEnv has no action space for agent 'b': set 'action_spaces'"
        ):
            env.get_action_space("b")
        with pytest.raises(MultiAgentEnvError, match=r"no observation space for agent 'a'.*get_observation_space\(\)"):
            env.get_observation_space("a")


class _NoStep(MultiAgentEnv):
    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a"]
        self.observation_spaces = {"a": BOX}
        self.action_spaces = {"a": gym.spaces.Discrete(2)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed, options=options)
        return {"a": np.zeros(2, np.float32)}, {}


class _ResetReturnsSuper(_NoStep):
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        return super(_NoStep, self).reset(seed=seed, options=options)  # forgot its own return

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        raise AssertionError("never reached")


class TestSubclassMistakes:
    def test_a_subclass_without_step_is_refused_when_built(self) -> None:
        with pytest.raises(EnvCreatorError, match=r"_NoStep \(a MultiAgentEnv\) must implement step: the base"):
            MultiAgentEnvRunner(EnvRunnerConfig(env=_NoStep, multi_agent=MultiAgentConfig()))

    def test_a_reset_that_returns_none_is_one_line(self) -> None:
        runner = MultiAgentEnvRunner(EnvRunnerConfig(env=_ResetReturnsSuper, multi_agent=MultiAgentConfig()))
        with pytest.raises(
            MultiAgentEnvError, match=r"_ResetReturnsSuper.reset\(\) must return \(observations, infos\).*\(got None\)"
        ):
            runner.sample(num_timesteps=1)


RLLIB_STYLE = [SimultaneousEnv, TurnBasedEnv, LateJoinerEnv]


def _sample_episodes(env_class: type, seed: int) -> list[MultiAgentEpisode]:
    cfg = EnvRunnerConfig(env=env_class, seed=seed, num_envs_per_env_runner=2, multi_agent=MultiAgentConfig())
    return MultiAgentEnvRunner(cfg).sample(num_episodes=4, random_actions=True)


class TestRLlibStyleEnvs:
    """Three envs written RLlib's way sample as their schedules say; their training is in
    tests/learner/test_train_multi_agent.py."""

    @pytest.mark.parametrize(
        ("env_class", "agent_steps", "ends"),
        [(SimultaneousEnv, 20, "terminated"), (TurnBasedEnv, 10, "terminated"), (LateJoinerEnv, 17, "truncated")],
        ids=["simultaneous", "turn_based", "late_joiner"],
    )
    def test_whole_episodes_follow_the_schedule(self, env_class: type, agent_steps: int, ends: str) -> None:
        for ep in _sample_episodes(env_class, seed=0):
            assert (ep.env_steps(), ep.agent_steps(), ep.is_terminated, ep.is_truncated) == (
                10, agent_steps, ends == "terminated", ends == "truncated"
            )  # fmt: skip
            rewards = [r for sa in ep.agent_episodes.values() for r in sa.get_rewards()]
            assert set(rewards) <= {0.0, 1.0} and ep.get_return() == sum(rewards)

    def test_the_late_joiner_starts_at_its_join_step(self) -> None:
        ep = _sample_episodes(LateJoinerEnv, seed=0)[0]
        assert ep.agent_episodes["player2"].get_infos(0) == {"joined_at": 3}
        assert ep.env_t_to_agent_t["player2"].tolist()[:4] == [-1, -1, -1, 0]

    @pytest.mark.parametrize("env_class", RLLIB_STYLE, ids=["simultaneous", "turn_based", "late_joiner"])
    def test_the_seed_reaches_np_random_through_super_reset(self, env_class: type) -> None:
        def observed(seed: int) -> list[list[float]]:
            return [o.tolist() for ep in _sample_episodes(env_class, seed) for o in ep.get_observations(0).values()]

        assert observed(1) == observed(1) and observed(1) != observed(2)


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
