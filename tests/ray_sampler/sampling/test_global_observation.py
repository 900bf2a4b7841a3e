"""GlobalObservationEnv and the centralized critic: what each agent and each head sees, the global
state's two sources, the config flag end to end, and what is refused."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules.centralized_critic import CentralizedCriticMLPModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.global_observation import GlobalObservationEnv
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from tests.ray_sampler.ma_envs import TurnTakingEnv


def test_concat_is_every_agents_latest_observation_in_agent_order() -> None:
    env = GlobalObservationEnv(make_multi_agent("CartPole-v1", 3)({}))
    obs, _ = env.reset(seed=5)
    for _ in range(3):
        glob = np.concatenate([obs[a]["own"] for a in (0, 1, 2)])
        assert all(np.array_equal(obs[a]["global"], glob) for a in obs)
        obs, *_ = env.step({a: 0 for a in obs})
    assert env.get_observation_space(1)["global"].shape == (12,)


def test_a_turn_based_agent_that_has_not_observed_is_zeros_then_its_last_observation() -> None:
    inner = TurnTakingEnv({})
    env = GlobalObservationEnv(inner)
    obs, _ = env.reset(seed=0)
    (first,) = obs
    sizes = [gym.spaces.flatdim(inner.get_observation_space(a)) for a in inner.possible_agents]
    glob = obs[first]["global"]
    start = sum(sizes[: inner.possible_agents.index(first)])
    assert np.array_equal(glob[start : start + sizes[0]], np.asarray(obs[first]["own"], np.float32).reshape(-1))
    assert np.count_nonzero(np.delete(glob, range(start, start + sizes[0]))) == 0  # the others: not yet


def test_state_is_the_envs_own_global_state() -> None:
    from mpe2 import simple_spread_v3

    from ray_sampler.sampling.pettingzoo_env import wrap_pettingzoo

    par = simple_spread_v3.parallel_env(N=3, max_cycles=5)
    env = GlobalObservationEnv(wrap_pettingzoo(par), "state")
    obs, _ = env.reset(seed=0)
    assert all(np.allclose(o["global"], np.asarray(par.state(), np.float32).reshape(-1)) for o in obs.values())
    with pytest.raises(ConfigError, match="'global_state' 'state' needs an env with state\\(\\) and state_space"):
        GlobalObservationEnv(make_multi_agent("CartPole-v1", 2)({}), "state")


def test_the_value_head_reads_only_the_global_state_and_the_policy_only_its_own() -> None:
    space = gym.spaces.Dict({"own": gym.spaces.Box(-1, 1, (4,)), "global": gym.spaces.Box(-1, 1, (8,))})
    m = CentralizedCriticMLPModule(space, gym.spaces.Discrete(2), seed=0)
    rng = np.random.default_rng(0)
    own, glob = rng.normal(size=(5, 4)), rng.normal(size=(5, 8))
    base = m.forward_exploration({"obs": {"own": own, "global": glob}})
    other_own = m.forward_exploration({"obs": {"own": own + 1.0, "global": glob}})
    other_global = m.forward_exploration({"obs": {"own": own, "global": glob + 1.0}})
    assert np.array_equal(base["vf_preds"], other_own["vf_preds"])
    assert not np.array_equal(base["action_dist_inputs"], other_own["action_dist_inputs"])
    assert np.array_equal(base["action_dist_inputs"], other_global["action_dist_inputs"])
    assert not np.array_equal(base["vf_preds"], other_global["vf_preds"])
    assert np.array_equal(m.compute_values({"own": own, "global": glob}), base["vf_preds"])
    with pytest.raises(SpaceError, match="takes a Dict observation space of two Boxes, 'own' and 'global'"):
        CentralizedCriticMLPModule(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))


def test_the_flag_wraps_every_sub_env_and_builds_the_critic_module() -> None:
    ma = MultiAgentConfig(centralized_critic=True)
    runner = MultiAgentEnvRunner(EnvRunnerConfig(env=make_multi_agent("CartPole-v1", 2), seed=0, multi_agent=ma))
    assert isinstance(runner.modules["default_policy"], CentralizedCriticMLPModule)
    chunk = runner.sample(num_timesteps=8)[0]
    first = chunk.agent_episodes[0].get_observations(0)
    assert set(first) == {"own", "global"} and first["global"].shape == (8,)
    with pytest.raises(ConfigError, match="'global_state' must be one of"):
        MultiAgentConfig(centralized_critic=True, global_state="everything")
