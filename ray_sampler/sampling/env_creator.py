"""Env creators: ``register_env``, the EnvContext every creator sees, and the vector env a runner steps.

A creator is a gymnasium id, a name registered with ``register_env(name, creator)``, or a
callable ``creator(env_config) -> gymnasium.Env``. Each sub-env's creator call gets an
``EnvContext``: the user's ``env_config`` plus ``worker_index``, ``vector_index`` and
``num_workers`` (as keys and attributes), so every sub-env can be configured and seeded on its
own. Names are resolved in the driver, so a name registered there works in every actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import ray_sampler.envs  # noqa: F401  # registers the project's envs (StatelessCartPole-v1, Atari) where envs are made
from ray_sampler.envs.atari import atari_install_hint
from ray_sampler.envs.minigrid import ensure_registered, minigrid_install_hint
from ray_sampler.errors import EnvCreatorError
from ray_sampler.sampling.config import EnvRunnerConfig, VectorizationMode
from ray_sampler.sampling.horizon import env_time_limit
from ray_sampler.sampling.sub_envs import SubEnvVector

__all__ = [
    "EnvContext",
    "is_registered_env",
    "make_vector_env",
    "register_env",
    "resolve_creator",
    "sub_env_seeds",
    "unregister_env",
]

_REGISTRY: dict[str, Callable[[EnvContext], gym.Env]] = {}


def register_env(name: str, creator: Callable[[EnvContext], gym.Env]) -> None:
    """Registers ``creator`` under ``name`` for use as ``EnvRunnerConfig(env=name)``."""
    if not isinstance(name, str) or not name:
        raise EnvCreatorError(f"register_env: 'name' must be a non-empty str (got {name!r})")
    if not callable(creator):
        raise EnvCreatorError(f"register_env: 'creator' for {name!r} must be callable (got {creator!r})")
    _REGISTRY[name] = creator


def unregister_env(name: str) -> None:
    """Removes ``name`` from the registry (a gymnasium id of that name is found again)."""
    if name not in _REGISTRY:
        raise EnvCreatorError(f"unregister_env: {name!r} is not registered (registered: {sorted(_REGISTRY) or 'none'})")
    del _REGISTRY[name]


def is_registered_env(name: str) -> bool:
    """Whether ``name`` was given to ``register_env`` (it then wins over a gymnasium id of that name)."""
    return name in _REGISTRY


class EnvContext(dict):
    """The ``env_config`` a creator receives: the user's keys plus the sub-env's indices."""

    @property
    def worker_index(self) -> int:
        return self["worker_index"]

    @property
    def vector_index(self) -> int:
        return self["vector_index"]

    @property
    def num_workers(self) -> int:
        return self["num_workers"]


class _GymMake:
    """Creator for a gymnasium id: ``gym.make(id, **env_config)`` without our index keys."""

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def __call__(self, ctx: EnvContext) -> gym.Env:
        kwargs = {k: v for k, v in ctx.items() if k not in ("worker_index", "vector_index", "num_workers")}
        ensure_registered(self.env_id)  # in a runner process: an id of a package imported on demand
        return gym.make(self.env_id, **kwargs)


def resolve_creator(env: str | Callable[..., Any]) -> Callable[[EnvContext], gym.Env]:
    """The creator callable for a config's ``env`` (registered name first, then gymnasium id)."""
    if callable(env):
        return env
    if env in _REGISTRY:
        return _REGISTRY[env]
    ensure_registered(env)
    if env in gym.registry:
        return _GymMake(env)
    raise EnvCreatorError(
        f"'env' {env!r} is neither a name given to register_env nor a gymnasium id "
        f"(registered: {sorted(_REGISTRY) or 'none'}){atari_install_hint(env)}{minigrid_install_hint(env)}"
    )


def sub_env_seeds(seed: int | None, worker_index: int, num_envs: int, *, restart: int = 0) -> list[int] | None:
    """One seed per sub-env, derived from (seed, worker_index, vector_index), each below 2**30; None
    if unseeded. ``restart`` k >= 1 gives the fresh stream of the sub-envs' k-th rebuild after a failure."""
    if seed is None:
        return None
    return [_seed(seed, worker_index, v, restart) for v in range(num_envs)]


_SEED_BITS = 30
"""Derived seeds are below 2**30: a native vector env given one seed ``s`` seeds its sub-envs with
``s + i`` (gymnasium's convention), which must stay a signed 32-bit int for C++ envs such as ALE's
(``2**31`` or more is a TypeError there); 2**30 leaves room for 2**30 sub-envs."""


def _seed(seed: int, worker_index: int, vector_index: int, restart: int) -> int:
    entropy = [seed, worker_index, vector_index] + ([restart] if restart else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0]) >> (32 - _SEED_BITS)


def _context(config: EnvRunnerConfig, worker_index: int, vector_index: int, num_workers: int) -> EnvContext:
    return EnvContext(config.env_config, worker_index=worker_index, vector_index=vector_index, num_workers=num_workers)


def _checked_env(creator: Callable[[EnvContext], gym.Env], ctx: EnvContext, max_episode_steps: int | None) -> gym.Env:
    try:
        env = creator(ctx)
    except Exception as e:  # the user's creator failed: say which sub-env, keep the cause
        raise EnvCreatorError(
            f"env creator failed for worker_index={ctx.worker_index}, vector_index={ctx.vector_index}: {e!r}"
        ) from e
    if not isinstance(env, gym.Env):
        raise EnvCreatorError(
            f"env creator must return a gymnasium.Env (got {type(env).__module__}.{type(env).__qualname__} "
            f"for worker_index={ctx.worker_index}, vector_index={ctx.vector_index})"
        )
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env


def make_vector_env(config: EnvRunnerConfig, *, worker_index: int, num_workers: int) -> gym.vector.VectorEnv:
    """The vector env of one runner; spaces are checked to agree across sub-envs.

    Sync mode builds a ``SubEnvVector`` (gymnasium's SyncVectorEnv, SAME_STEP, with sub-envs that
    fail alone and, with ``restart_failed_sub_environments``, are rebuilt through the creator
    under the same indices); a native vector env is gymnasium's own and is rebuilt whole."""
    n = config.num_envs_per_env_runner
    if config.vectorization_mode is VectorizationMode.VECTOR_ENTRY_POINT:
        if isinstance(config.env, str):
            ensure_registered(config.env)
        if not isinstance(config.env, str) or config.env not in gym.registry:
            hint = atari_install_hint(config.env) if isinstance(config.env, str) else ""
            raise EnvCreatorError(
                f"vectorization_mode='vector_entry_point' needs a gymnasium id as 'env' (got {config.env!r}){hint}"
            )
        kwargs = dict(config.env_config)
        limit = env_time_limit(config)
        if limit is not None:
            kwargs["max_episode_steps"] = limit
        try:
            return gym.make_vec(config.env, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
        except Exception as e:
            raise EnvCreatorError(
                f"gymnasium.make_vec({config.env!r}, vectorization_mode='vector_entry_point') failed: {e!r}"
            ) from e
    creator = resolve_creator(config.env)

    def make_env(v: int) -> gym.Env:
        return _checked_env(creator, _context(config, worker_index, v, num_workers), env_time_limit(config))

    envs = [make_env(v) for v in range(n)]
    first = envs[0]
    for v, env in enumerate(envs[1:], start=1):
        for name in ("observation_space", "action_space"):
            if getattr(env, name) != getattr(first, name):
                for sub_env in envs:
                    sub_env.close()
                raise EnvCreatorError(
                    f"sub-envs must share their {name}: vector_index 0 has {getattr(first, name)}, "
                    f"vector_index {v} has {getattr(env, name)} (worker_index={worker_index})"
                )
    seed = config.seed

    def reset_seed(v: int, restart: int) -> int | None:
        return None if seed is None else _seed(seed, worker_index, v, restart)

    checks = config.check_env_first_steps
    if not config.restart_failed_sub_environments:
        return SubEnvVector(envs, worker_index=worker_index, check_steps=checks)
    return SubEnvVector(envs, worker_index=worker_index, make_env=make_env, reset_seed=reset_seed, check_steps=checks)
