"""Stack frames in the runner and the learner from one piece: ``FrameStackingEnvToModule``.

    python examples/frame_stacking.py --num-frames 4 --num-calls 3

The env returns one uint8 frame per step and the episode stores one frame per step; the module
sees the last ``num_frames`` frames, stacked on the fly from the running episode and its lookback
(the vectorized engine keeps running). ``num_frames`` is set once: the runner derives its
``episode_lookback_horizon`` (``num_frames - 1``) from the piece, and ``piece.learner_piece()``
builds the same stacks for the train batch. Each call prints the first chunk that continues an
episode after a cut: its first step's stack holds the frames from before the cut (t_started - 3
.. t_started), not zeros, stacked by the learner piece as the runner's module saw it. One
local runner (no Ray).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import gymnasium as gym
import numpy as np

from connectors import ConnectorPipelineV2, FrameStackingEnvToModule
from connectors.learner import DEFAULT_MODULE_ID
from ray_sampler import EnvRunner, EnvRunnerConfig
from ray_sampler.cli import parse


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    num_frames: int = 4
    """Frames the module sees per step (k); the runner keeps k - 1 steps of lookback."""
    num_envs: int = 2
    """Sub-envs of the one runner."""
    rollout_fragment_length: int = 5
    """Steps per sub-env and call: running episodes are cut after each call."""
    num_calls: int = 3
    """sample() calls."""
    seed: int = 0
    """Seed of the sub-envs and the policy."""


class FrameCounter(gym.Env):
    """A uint8 frame [4, 4] filled with the step count t; 12-step episodes, reward 1 per step."""

    observation_space = gym.spaces.Box(0, 255, (4, 4), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.full((4, 4), self.t, np.uint8), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full((4, 4), self.t, np.uint8), 1.0, self.t >= 12, False, {}


def main(args: Args) -> None:
    stack = FrameStackingEnvToModule(num_frames=args.num_frames)
    config = EnvRunnerConfig(
        env=lambda ctx: FrameCounter(),
        num_envs_per_env_runner=args.num_envs,
        rollout_fragment_length=args.rollout_fragment_length,
        env_to_module_connectors=(stack,),
        seed=args.seed,
    )
    runner = EnvRunner(config)
    print(
        f"num_frames {args.num_frames}: lookback horizon {config.episode_lookback_horizon}, "
        f"vectorized engine {runner.is_vectorized}, module input {runner.module_observation_space.shape}"
    )
    learner = ConnectorPipelineV2([stack.learner_piece()])
    for call in range(1, args.num_calls + 1):
        chunks = runner.sample()
        batch: dict[str, Any] = learner(rl_module=None, batch={}, episodes=chunks)[DEFAULT_MODULE_ID]
        stored = np.asarray(chunks[0].get_observations()).shape
        cont = next((c for c in chunks if c.t_started > 0), None)
        if cont is not None:
            first = batch["obs"][sum(len(c) for c in chunks[: chunks.index(cont)])]
            print(
                f"call {call}: chunk from t={cont.t_started} stacks frames {first[:, 0, 0].tolist()} "
                f"({first.dtype}); episode stores {stored[1:]} per step"
            )
    print(f"learner stacks: {batch['obs'].shape[1:]} per step, {batch['obs'].dtype}")
    runner.stop()


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/frame_stacking.py", description=__doc__ or ""))
