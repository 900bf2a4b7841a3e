"""How many sub-envs one runner may step: a hard cap, and what the node's memory can hold.

``num_envs_per_env_runner`` sub-envs live in one runner process, and the runner steps them one
after another. Two checks refuse a count that can never work, each with a one-line ConfigError
naming ``num_envs_per_env_runner`` and the largest value allowed, before the sub-envs are built:

- ``check_num_envs_cap`` (the config's own check): at most ``MAX_NUM_ENVS_PER_ENV_RUNNER`` sub-envs
  of a ``"sync"`` vector env, whatever the env (see the constant for why).
- ``check_num_envs_memory`` (the group's preflight, which knows the env's spaces from its probe):
  a lower bound on a runner's bytes, ``num_envs x (bytes per sub-env + bytes per step x
  (rollout_fragment_length + episode_lookback_horizon + 1))``, must fit the largest node's memory.

>>> import gymnasium as gym
>>> box, two = gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2)
>>> largest_num_envs(bytes_per_step=step_bytes(box, two), rollout_fragment_length=200,
...                  episode_lookback_horizon=1, memory_bytes=16 * 2**30)
1311440
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym

from ray_sampler.errors import ConfigError
from ray_sampler.sampling.runner_memory import step_bytes

__all__ = [
    "MAX_NUM_ENVS_PER_ENV_RUNNER",
    "SUB_ENV_BYTES",
    "check_num_envs_cap",
    "check_num_envs_memory",
    "largest_num_envs",
    "multi_agent_step_bytes",
    "node_memory_total_bytes",
    "step_bytes",
]

MAX_NUM_ENVS_PER_ENV_RUNNER = 65_536
"""Sub-envs one runner may step in ``"sync"`` mode. The runner builds and steps them one after
another in one process: even CartPole, the cheapest gymnasium env, takes about 145 us to build
and 21 us to step a sub-env (measured: 5,000 sub-envs, gymnasium 1.x, Python 3.11), so 65,536 of
them take about 10 s to build and 1.4 s per vector step, and one default ``sample()`` (200 steps)
already runs past the default ``sample_timeout_s`` of 60 s. A million took minutes only to build,
and fits the memory of a large node, so the memory check alone lets it through. More runners
scale where more sub-envs cannot. A ``"vector_entry_point"`` env steps its sub-envs as arrays,
so only the memory check applies to it."""

SUB_ENV_BYTES = 3_000
"""Bytes a sub-env holds besides its rollout, at least: a gymnasium CartPole-v1 sub-env in our
SyncVectorEnv adds 3,057 bytes to the process's RSS (5,000 built; gymnasium 1.x, Python 3.11),
and CartPole is about the smallest env there is."""


def check_num_envs_cap(num_envs: int, *, is_sync: bool) -> None:
    """ConfigError if ``num_envs`` sub-envs of a sync vector env exceed ``MAX_NUM_ENVS_PER_ENV_RUNNER``."""
    if is_sync and num_envs > MAX_NUM_ENVS_PER_ENV_RUNNER:
        raise ConfigError(
            f"'num_envs_per_env_runner' must be an int <= {MAX_NUM_ENVS_PER_ENV_RUNNER:,} with vectorization_mode "
            f"'sync' (got {num_envs:,}): one runner steps its sub-envs one after another; use more env runners"
        )


def multi_agent_step_bytes(observation_spaces: Sequence[gym.Space], action_spaces: Sequence[gym.Space]) -> int:
    """The raw bytes of one env step of a multi-agent env whose every agent acts (one space pair each)."""
    return sum(step_bytes(o, a) for o, a in zip(observation_spaces, action_spaces, strict=True))


def node_memory_total_bytes() -> float:
    """The largest node's memory: this machine's total (``psutil``), or a larger Ray node's
    ``memory`` resource when Ray is running (a runner may be placed there)."""
    import psutil  # type: ignore[import-untyped]  # psutil (shipped with ray) has no stubs installed

    total = float(psutil.virtual_memory().total)
    import ray

    if ray.is_initialized():
        total = max([total] + [float(n["Resources"].get("memory", 0.0)) for n in ray.nodes() if n.get("Alive")])
    return total


def _sub_env_bytes(bytes_per_step: int, rollout_fragment_length: int, episode_lookback_horizon: int) -> int:
    return SUB_ENV_BYTES + bytes_per_step * (rollout_fragment_length + episode_lookback_horizon + 1)


def largest_num_envs(
    *, bytes_per_step: int, rollout_fragment_length: int, episode_lookback_horizon: int, memory_bytes: float
) -> int:
    """The most sub-envs whose lower bound (see the module docstring) fits ``memory_bytes``."""
    return int(memory_bytes // _sub_env_bytes(bytes_per_step, rollout_fragment_length, episode_lookback_horizon))


def check_num_envs_memory(
    num_envs: int,
    *,
    bytes_per_step: int,
    rollout_fragment_length: int,
    episode_lookback_horizon: int,
    memory_bytes: float | None = None,
) -> None:
    """ConfigError naming the largest ``num_envs_per_env_runner`` that fits, if ``num_envs`` sub-envs
    with ``bytes_per_step`` a step cannot fit ``memory_bytes`` (None: ``node_memory_total_bytes()``)."""
    memory = node_memory_total_bytes() if memory_bytes is None else memory_bytes
    per_env = _sub_env_bytes(bytes_per_step, rollout_fragment_length, episode_lookback_horizon)
    if num_envs * per_env <= memory:
        return
    largest = int(memory // per_env)
    raise ConfigError(
        f"'num_envs_per_env_runner' must be an int <= {largest:,} for this env (got {num_envs:,}): each sub-env "
        f"holds at least {SUB_ENV_BYTES:,} + {bytes_per_step} bytes a step x (rollout_fragment_length "
        f"{rollout_fragment_length} + episode_lookback_horizon {episode_lookback_horizon} + 1) = {per_env:,} bytes, "
        f"and the largest node has {memory / 2**30:.1f} GiB"
    )
