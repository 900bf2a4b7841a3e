"""What an EnvRunnerGroup checks on the driver before any actor starts.

``prepare_env`` resolves the env the config names (an unknown name fails here) and ships what it
resolved to (a ``register_env`` name lives in this process only, and so may a gymnasium id the
user's module registered: the runners get the creator, or the id's spec), and, with
``validate_env_locally``, builds a few sub-envs and the module once (bad creators, spaces a module
cannot take), checks that the runners' memory can fit the nodes (``sub_env_limits`` from the first
sub-env's spaces, before more are built; then ``runner_memory`` from measured ones) and runs the
env check (``env_check.check_env``, with ``check_env``): every error comes before a runner is placed.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from typing import Any

from connectors.env_to_module import env_to_module_observation_space
from ray_sampler.data.spaces import check_space
from ray_sampler.errors import MultiAgentEnvCheckError, MultiAgentEnvError
from ray_sampler.resources import cluster_autoscales
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig, VectorizationMode
from ray_sampler.sampling.env_check import check_env
from ray_sampler.sampling.env_creator import MultiAgentEnvGiven, make_vector_env, resolve_creator
from ray_sampler.sampling.env_runner import build_module
from ray_sampler.sampling.horizon import env_time_limit
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from ray_sampler.sampling.runner_memory import check_runner_memory, node_memory_bytes, step_bytes
from ray_sampler.sampling.sub_env_limits import check_num_envs_memory, multi_agent_step_bytes

__all__ = ["prepare_env"]

# Sub-envs the driver builds to check the creator and measure one sub-env's memory (not all of a
# runner's: a million would take minutes).
_PROBE_SUB_ENVS = 2


def prepare_env(config: EnvRunnerConfig, group_config: EnvRunnerGroupConfig) -> EnvRunnerConfig:
    """``config`` as the runners get it (a name replaced by what it resolves to), once the env and
    module passed the group's driver-side checks."""
    env_as_given = config.env  # a name, before it is replaced by what it resolves to below
    if isinstance(config.env, str):
        creator = resolve_creator(config.env)  # an unknown name fails here, before any actor starts
        if config.vectorization_mode is not VectorizationMode.VECTOR_ENTRY_POINT:  # that one makes the id itself
            # The runners get the creator (or the gymnasium id's spec), not the name: a registration
            # (register_env, or gymnasium.register in the user's module) lives in this process only.
            config = dataclasses.replace(config, env=creator)
    workers = group_config.num_env_runners

    def build(cfg: EnvRunnerConfig) -> Any:
        return make_vector_env(cfg, worker_index=0, num_workers=workers, any_vector_size=True)

    if config.multi_agent is None and group_config.validate_env_locally:
        try:
            # A first build, not measured: the imports and caches a first env brings are no sub-env's.
            first = build(dataclasses.replace(config, num_envs_per_env_runner=1))
        except MultiAgentEnvGiven:  # a multi-agent env: the group runs MultiAgentEnvRunners
            config = dataclasses.replace(config, multi_agent=MultiAgentConfig())
        else:
            try:  # its spaces bound the runner's memory before more sub-envs are built
                _check_num_envs_memory(config, step_bytes(first.single_observation_space, first.single_action_space))
            finally:
                first.close()
    if config.multi_agent is not None:
        if group_config.validate_env_locally:
            config = _check_multi_agent(config, group_config)
        return config
    if group_config.validate_env_locally:
        probe = dataclasses.replace(
            config, num_envs_per_env_runner=min(config.num_envs_per_env_runner, _PROBE_SUB_ENVS)
        )
        tracing = tracemalloc.is_tracing()  # a user's own tracing stays on
        if not tracing:
            tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        try:
            env = build(probe)
            sub_env_bytes = max(tracemalloc.get_traced_memory()[0] - before, 0) / env.num_envs
        finally:
            if not tracing:
                tracemalloc.stop()
        try:
            space = check_space(env.single_observation_space)
            # The module takes what the env-to-module pieces make of it (e.g. FilterObservationKeys).
            build_module(
                config,
                env_to_module_observation_space(space, config.env_to_module_connectors),
                env.single_action_space,
            )
            check_runner_memory(
                num_envs=config.num_envs_per_env_runner,
                rollout_fragment_length=config.rollout_fragment_length,
                num_runners=max(group_config.num_env_runners, 1),
                sub_env_bytes=sub_env_bytes,
                bytes_per_step=step_bytes(space, env.single_action_space),
                nodes=node_memory_bytes(),
                autoscales=cluster_autoscales(),
            )
        finally:
            env.close()
        if group_config.check_env:
            check_env(
                env_as_given,
                config.env_config,
                seed=config.seed,
                max_episode_steps=env_time_limit(config),
                tolerate_errors=config.restart_failed_sub_environments,
            )
    return config


def _check_multi_agent(config: EnvRunnerConfig, group_config: EnvRunnerGroupConfig) -> EnvRunnerConfig:
    """A multi-agent config's driver-side checks: one runner of one sub-env is built (the creator,
    every module and its spaces, the mapping) and, with ``check_env``, samples a few random steps
    with every env output checked against the contract. Returns ``config`` with the modules that
    runner resolved (the default ones become a module per distinct pair of spaces where the agents'
    differ), so that every runner of the group and its weights name the same modules."""
    probe = MultiAgentEnvRunner(
        dataclasses.replace(config, num_envs_per_env_runner=1), worker_index=0, num_workers=group_config.num_env_runners
    )
    try:
        env = probe.envs[0]  # every possible agent acting at every step: the most a step can hold
        agents = probe.possible_agents
        _check_num_envs_memory(
            config,
            multi_agent_step_bytes(
                [env.get_observation_space(a) for a in agents], [env.get_action_space(a) for a in agents]
            ),
        )
        if group_config.check_env:
            probe.sample(num_timesteps=max(config.check_env_first_steps, 1), random_actions=True)
    except MultiAgentEnvError as e:  # found before any runner starts: bad input (EnvCheckError) as well
        raise MultiAgentEnvCheckError(str(e)) from e
    finally:
        probe.stop()
    return dataclasses.replace(config, multi_agent=probe.ma_config)


def _check_num_envs_memory(config: EnvRunnerConfig, bytes_per_step: int) -> None:
    """ConfigError if ``num_envs_per_env_runner`` sub-envs cannot fit the largest node (``sub_env_limits``)."""
    assert config.episode_lookback_horizon is not None  # the config sets it in __post_init__
    check_num_envs_memory(
        config.num_envs_per_env_runner,
        bytes_per_step=bytes_per_step,
        rollout_fragment_length=config.rollout_fragment_length,
        episode_lookback_horizon=config.episode_lookback_horizon,
    )
