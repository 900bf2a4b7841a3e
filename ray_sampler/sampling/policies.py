"""The policy a multi-agent run's runners act with: a Policy per module, built as their modules are."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

import gymnasium as gym

from ray_sampler.policy import MultiAgentPolicy
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env_runner import module_build_config
from ray_sampler.sampling.runner_build import build_policy

__all__ = ["build_multi_agent_policy"]

logger = logging.getLogger(__name__)


def build_multi_agent_policy(
    config: EnvRunnerConfig,
    spaces: Mapping[str, tuple[gym.Space, gym.Space]],
    agents: list[Hashable],
    *,
    weights: Mapping[str, Any],
    connector_states: Mapping[str, Any] | None = None,
    info: dict[str, Any] | None = None,
) -> MultiAgentPolicy:
    """Every module of ``config.multi_agent`` as a Policy (module ``k`` built as the runners build it,
    on ``spaces[module id]``, loaded with ``weights[module id]`` and its pipeline's connector state),
    and the mapping of ``agents`` to modules (an agent the mapping function cannot map without an
    episode is left out, with a log line)."""
    ma = config.multi_agent or MultiAgentConfig()
    policies = {
        mid: build_policy(
            module_build_config(config, ma, mid),
            *spaces[mid],
            weights=weights[mid],
            connector_state=(connector_states or {}).get(mid),
            info=info,
        )
        for mid in ma.module_ids
    }
    mapping: dict[Hashable, str] = {}
    for agent in agents:
        try:
            mapping[agent] = ma.map_agent(agent, None)
        except Exception as e:  # a mapping that reads the episode: the user passes mapping= on load
            logger.warning("policy: agent %r is left out of the saved mapping (%s: %s)", agent, type(e).__name__, e)
    return MultiAgentPolicy(policies, mapping, info=info)
