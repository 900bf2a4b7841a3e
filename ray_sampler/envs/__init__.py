"""Environments the project ships, registered with gymnasium on import (``StatelessCartPole-v1``)."""

from __future__ import annotations

import gymnasium as gym

from ray_sampler.envs.stateless_cartpole import StatelessCartPole

__all__ = ["STATELESS_CARTPOLE_ID", "StatelessCartPole"]

STATELESS_CARTPOLE_ID = "StatelessCartPole-v1"

if STATELESS_CARTPOLE_ID not in gym.registry:
    # CartPole-v1's 500-step horizon; no reward threshold: 350 is the target the benchmarks use
    # (RLlib's tuned example), set by the CLI's preset rather than claimed as "solved".
    gym.register(
        STATELESS_CARTPOLE_ID,
        entry_point="ray_sampler.envs.stateless_cartpole:StatelessCartPole",
        max_episode_steps=500,
    )
