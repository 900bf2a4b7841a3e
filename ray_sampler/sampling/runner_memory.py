"""A lower bound on the memory a runner holds, checked against the nodes before any runner starts.

A runner holds its sub-envs and, by the end of a ``sample()``, ``rollout_fragment_length`` steps
of every sub-env. The bound counts, per sub-env, the bytes its env took to build (measured in
the driver on the few sub-envs the group's check builds; Python allocations only) and, per step,
the raw size of an observation, an action, a reward, two flags and the built-in modules'
outputs (the runner's real cost per step is several times that: a CartPole runner holds about
250 bytes per step where the raw size is 50). A request whose bound exceeds the largest node,
or whose runners together exceed the cluster, can never run: a million CartPole sub-envs took
minutes only to build before a runner ran out of memory.

>>> import gymnasium as gym
>>> box, two = gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2)
>>> step_bytes(box, two)  # 16 (obs) + 8 (an int64 action) + 8 (two logits) + 18
50
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np

from ray_sampler.errors import InsufficientResourcesError

__all__ = ["check_runner_memory", "node_memory_bytes", "step_bytes"]

# Per step, besides observation and action: a float64 reward, two bool flags, and the built-in
# modules' outputs other than the distribution inputs (a float32 value prediction and log-prob).
_FIXED_STEP_BYTES = 8 + 2 + 4 + 4


def _space_bytes(space: gym.Space) -> int:
    """Bytes of one item of ``space`` as the runner stores it (a string counts its characters)."""
    sample = space.sample()
    leaves = list(sample.values()) if isinstance(sample, dict) else [sample]
    total = 0
    while leaves:
        leaf = leaves.pop()
        if isinstance(leaf, dict):
            leaves.extend(leaf.values())
        elif isinstance(leaf, tuple):
            leaves.extend(leaf)
        elif isinstance(leaf, str):
            total += len(leaf.encode())
        else:
            total += np.asarray(leaf).nbytes
    return total


def step_bytes(observation_space: gym.Space, action_space: gym.Space) -> int:
    """The raw bytes of one step: observation, action, the distribution inputs (float32, as many as
    the action has values, two per value for a Box), reward, flags and the other module outputs."""
    if isinstance(action_space, gym.spaces.Discrete):
        num_dist_inputs = int(action_space.n)
    else:
        num_dist_inputs = 2 * max(int(np.prod(action_space.shape or (1,))), 1)
    dist_inputs = 4 * num_dist_inputs
    return _space_bytes(observation_space) + _space_bytes(action_space) + dist_inputs + _FIXED_STEP_BYTES


def node_memory_bytes() -> list[float]:
    """Ray's ``memory`` resource of each alive node (what actors may use), or this machine's
    available memory when Ray is not running (a local runner)."""
    import ray

    if ray.is_initialized():
        return [float(n["Resources"].get("memory", 0.0)) for n in ray.nodes() if n.get("Alive")]
    try:
        return [float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))]
    except (ValueError, OSError, AttributeError):  # not a POSIX system that tells
        return []


def _gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.1f} GB"


def check_runner_memory(
    *,
    num_envs: int,
    rollout_fragment_length: int,
    num_runners: int,
    sub_env_bytes: float,
    bytes_per_step: int,
    nodes: list[float],
    autoscales: bool = False,
) -> None:
    """InsufficientResourcesError, naming the fields, if one runner's bound exceeds the largest of
    ``nodes`` or ``num_runners`` runners' exceed them all (not checked where the cluster autoscales)."""
    if autoscales or not nodes:
        return
    per_runner = num_envs * (sub_env_bytes + rollout_fragment_length * bytes_per_step)
    why = (
        f"num_envs_per_env_runner x (bytes per sub-env + rollout_fragment_length x bytes per step) = {num_envs:,} x "
        f"({sub_env_bytes:,.0f} + {rollout_fragment_length} x {bytes_per_step}) = at least {_gb(per_runner)} per runner"
    )
    fix = "use fewer sub-envs per runner (and more runners), or a shorter rollout_fragment_length"
    if per_runner > max(nodes):
        raise InsufficientResourcesError(
            f"cannot run the env runners: {why}, but the largest node has {_gb(max(nodes))} for actors; {fix}"
        )
    if num_runners * per_runner > sum(nodes):
        raise InsufficientResourcesError(
            f"cannot run the env runners: num_env_runners x {why} = {num_runners} x {_gb(per_runner)}, but the "
            f"cluster has {_gb(sum(nodes))} for actors in all; {fix}"
        )
