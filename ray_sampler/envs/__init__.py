"""Environments the project ships, registered with gymnasium on import (``StatelessCartPole-v1``, Atari ids)."""

from __future__ import annotations

import gymnasium as gym

from ray_sampler.envs.atari import ATARI_INSTALL_LINE, atari_env, register_atari_envs
from ray_sampler.envs.stateless_cartpole import StatelessCartPole

__all__ = ["ATARI_INSTALL_LINE", "STATELESS_CARTPOLE_ID", "StatelessCartPole", "atari_env"]

STATELESS_CARTPOLE_ID = "StatelessCartPole-v1"

if STATELESS_CARTPOLE_ID not in gym.registry:
    # CartPole-v1's 500-step horizon; no reward threshold: 350 is the target the benchmarks use
    # (RLlib's tuned example), set by the CLI's preset rather than claimed as "solved".
    gym.register(
        STATELESS_CARTPOLE_ID,
        entry_point="ray_sampler.envs.stateless_cartpole:StatelessCartPole",
        max_episode_steps=500,
    )

# ray_sampler/<Game>-v5 for every ALE game where ale-py is installed (see envs.atari); here, at
# import, so that every runner process knows the ids its driver does.
register_atari_envs()
