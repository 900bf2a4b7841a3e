"""MultiAgentConfig's default modules: agents whose spaces differ get a module per distinct pair of
spaces (``mapping_by_spaces``), named after their common prefix, wherever a run resolves them."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import pytest

from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.multi_agent_config import (
    AgentTable,
    ModuleSpec,
    MultiAgentConfig,
    mapping_by_spaces,
    policy_mapping,
)
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner, resolve_multi_agent

SMALL = (gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(5))
BIG = (gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(5))
OTHER_ACTIONS = (gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(3))


class TestMappingBySpaces:
    def test_equal_spaces_share_a_module_named_after_their_prefix(self) -> None:
        spaces = {"adversary_0": SMALL, "agent_0": BIG, "adversary_1": SMALL, "agent_1": BIG}
        cfg = mapping_by_spaces(spaces)
        assert cfg is not None and cfg.module_ids == ("adversary", "agent")
        assert [cfg.map_agent(a, None) for a in spaces] == ["adversary", "agent", "adversary", "agent"]

    def test_the_action_space_alone_can_split_agents(self) -> None:
        cfg = mapping_by_spaces({"speaker_0": SMALL, "listener_0": OTHER_ACTIONS})
        assert cfg is not None and cfg.module_ids == ("speaker", "listener")

    def test_agents_with_no_common_prefix_name_the_module_together(self) -> None:
        cfg = mapping_by_spaces({"eve_0": BIG, "bob_0": SMALL, "alice_0": SMALL})
        assert cfg is not None and cfg.module_ids == ("eve", "bob_alice")

    def test_a_name_taken_twice_is_the_agents_own_or_numbered(self) -> None:
        cfg = mapping_by_spaces({"x_0": SMALL, "x_1": BIG})
        assert cfg is not None and cfg.module_ids == ("x_0", "x_1")
        cfg = mapping_by_spaces({"x_0": SMALL, "x_1": SMALL, "x_2": BIG, "x_3": BIG})
        assert cfg is not None and cfg.module_ids == ("x", "x_1")

    def test_none_when_every_agent_has_the_same_spaces(self) -> None:
        assert mapping_by_spaces({"a": SMALL, "b": SMALL}) is None

    def test_the_base_config_keeps_its_critic(self) -> None:
        base = MultiAgentConfig(centralized_critic=True)
        cfg = mapping_by_spaces({"a_0": SMALL, "b_0": BIG}, base)
        assert cfg is not None and cfg.centralized_critic and cfg.global_state == "concat"

    def test_an_agent_outside_the_table_is_one_line(self) -> None:
        with pytest.raises(ConfigError, match=r"agent 'zz' is in no module of the mapping by spaces"):
            AgentTable({"a": "m"})("zz", None)

    def test_by_spaces_from_the_command_line_is_shared_where_all_agree(self) -> None:
        assert policy_mapping("by-spaces", ["a", "b"], {"a": SMALL, "b": SMALL}).module_ids == ("shared",)
        assert policy_mapping("by-spaces", ["a_0", "b_0"], {"a_0": SMALL, "b_0": BIG}).module_ids == ("a", "b")


class TestIsDefault:
    def test_only_the_untouched_default_is_resolved(self) -> None:
        assert MultiAgentConfig().is_default
        assert MultiAgentConfig(centralized_critic=True).is_default
        assert not MultiAgentConfig(policies=("p",)).is_default
        assert not MultiAgentConfig(policies={"default_policy": ModuleSpec(action_space=SMALL[1])}).is_default
        assert not MultiAgentConfig(policy_mapping_fn=lambda aid, ep, **kw: "default_policy").is_default


def simple_tag(cfg: dict[str, Any]) -> Any:
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    from mpe2 import simple_tag_v3

    return simple_tag_v3.parallel_env(max_cycles=25)


class TestRunsResolveTheDefault:
    def test_a_runner_of_an_env_whose_agents_differ_samples_with_a_module_per_pair(self) -> None:
        runner = MultiAgentEnvRunner(EnvRunnerConfig(env=simple_tag, seed=0, num_envs_per_env_runner=2))
        episodes = runner.sample(num_episodes=2)
        assert runner.module_ids == ("adversary", "agent")
        assert {ep.module_for("adversary_2") for ep in episodes} == {"adversary"}
        assert set(runner.get_metrics().module_episode_returns) == {"adversary", "agent"}

    def test_resolving_makes_the_modules_explicit_and_keeps_a_users_choice(self) -> None:
        resolved = resolve_multi_agent(EnvRunnerConfig(env=simple_tag, multi_agent=MultiAgentConfig()))
        assert resolved.multi_agent is not None and resolved.multi_agent.module_ids == ("adversary", "agent")
        chosen = MultiAgentConfig(policies=("p",))
        assert resolve_multi_agent(EnvRunnerConfig(env=simple_tag, multi_agent=chosen)).multi_agent is chosen

    def test_one_module_given_for_agents_whose_spaces_differ_is_still_refused(self) -> None:
        shared = MultiAgentConfig(policies=("p",), policy_mapping_fn=lambda aid, ep, **kw: "p")
        with pytest.raises(ConfigError, match=r"module 'p' acts for agents .* whose observation spaces differ"):
            MultiAgentEnvRunner(EnvRunnerConfig(env=simple_tag, multi_agent=shared))


@pytest.mark.usefixtures("ray_session")
def test_a_group_resolves_the_default_before_its_runners_start() -> None:
    from ray_sampler.sampling import EnvRunnerGroup, EnvRunnerGroupConfig

    group_config = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)
    config = EnvRunnerConfig(env=simple_tag, rollout_fragment_length=10, multi_agent=MultiAgentConfig())
    with EnvRunnerGroup(config, group_config) as group:
        assert group.config.multi_agent is not None and group.config.multi_agent.module_ids == ("adversary", "agent")
        episodes = group.sample()
        assert {ep.module_for("adversary_0") for ep in episodes} == {"adversary"}
        assert {ep.module_for("agent_0") for ep in episodes} == {"agent"}
