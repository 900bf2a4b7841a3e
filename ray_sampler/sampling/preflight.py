"""What an EnvRunnerGroup checks on the driver before any actor starts.

``prepare_env`` resolves the env the config names (an unknown name fails here), ships a
``register_env`` name's creator itself (a registered name lives in this process only), and, with
``validate_env_locally``, builds the sub-envs and the module once (bad creators, spaces a module
cannot take) and runs the env check (``env_check.check_env``, with ``check_env``): every error
comes before a runner is placed.
"""

from __future__ import annotations

import dataclasses

from connectors.env_to_module import env_to_module_observation_space
from ray_sampler.data.spaces import check_space
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_check import check_env
from ray_sampler.sampling.env_creator import is_registered_env, make_vector_env, resolve_creator
from ray_sampler.sampling.env_runner import build_module
from ray_sampler.sampling.horizon import env_time_limit

__all__ = ["prepare_env"]


def prepare_env(config: EnvRunnerConfig, group_config: EnvRunnerGroupConfig) -> EnvRunnerConfig:
    """``config`` as the runners get it (a registered name replaced by its creator), once the env
    and module passed the group's driver-side checks."""
    env_as_given = config.env  # a registered name, before it is replaced by its creator below
    if isinstance(config.env, str):
        creator = resolve_creator(config.env)  # an unknown name fails here, before any actor starts
        if is_registered_env(config.env):
            # A registered name (which wins over a gymnasium id of the same name): ship the creator.
            config = dataclasses.replace(config, env=creator)
    if group_config.validate_env_locally:
        env = make_vector_env(config, worker_index=0, num_workers=group_config.num_env_runners)
        try:
            space = check_space(env.single_observation_space)
            # The module takes what the env-to-module pieces make of it (e.g. FilterObservationKeys).
            build_module(
                config,
                env_to_module_observation_space(space, config.env_to_module_connectors),
                env.single_action_space,
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
