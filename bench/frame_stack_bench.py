"""Frame-stacking benchmark: a runner stacking frames on the vectorized engine beside the same runner without.

    .venv/bin/python bench/frame_stack_bench.py [--num-envs 8] [--steps 20000] [--num-frames 4] [--repeats 3]

One local EnvRunner, truncate mode, ``sample_columnar()`` (what a remote runner ships), a cheap
env of 84x84 uint8 frames and a RandomModule that takes frames unflattened (as an image module
does), so that the figures are the sampler's own work:

- baseline: no env-to-module piece (vectorized engine);
- ``FrameStackingEnvToModule(num_frames=k)`` on the vectorized engine (the stack is built per
  step from the running episodes' view: k x 7 KB per sub-env);
- the same piece on the per-step engine (``columnar_sampling=False``), for reference.

Each figure is the best of ``--repeats`` runs, all taken in this one process, taking turns.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connectors import FrameStackingEnvToModule
from ray_sampler import EnvRunner, EnvRunnerConfig
from ray_sampler.modules import RandomModule


class FrameModule(RandomModule):
    """RandomModule taking frames as they come, as an image module does (no flattening to float32)."""

    needs_flat_observations = False


class Frames(gym.Env):
    """84x84 uint8 frames filled with the step count; 100-step episodes."""

    observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((84, 84), np.uint8), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full((84, 84), self.t % 256, np.uint8), 1.0, self.t >= 100, False, {}


def steps_per_s(pieces: tuple[Any, ...], *, columnar: bool, num_envs: int, steps: int) -> float:
    runner = EnvRunner(
        EnvRunnerConfig(
            env=lambda ctx: Frames(),
            num_envs_per_env_runner=num_envs,
            rollout_fragment_length=200,
            module_class=FrameModule,
            env_to_module_connectors=pieces,
            columnar_sampling=columnar,
            check_env_data=False,
        )
    )
    runner.sample_columnar()  # warm-up: resets, first allocations
    t0 = time.perf_counter()
    made = 0
    while made < steps:
        col, _ = runner.sample_columnar()
        made += col.num_env_steps if col is not None else 0
    rate = made / (time.perf_counter() - t0)
    runner.stop()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--num-frames", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    k = args.num_frames
    cases = {
        "baseline (no piece, vectorized)": ((), True),
        f"FrameStackingEnvToModule(k={k}), vectorized": ((FrameStackingEnvToModule(num_frames=k),), True),
        f"FrameStackingEnvToModule(k={k}), per-step": ((FrameStackingEnvToModule(num_frames=k),), False),
    }
    best = dict.fromkeys(cases, 0.0)
    for _ in range(args.repeats):
        for name, (pieces, columnar) in cases.items():
            rate = steps_per_s(pieces, columnar=columnar, num_envs=args.num_envs, steps=args.steps)
            best[name] = max(best[name], rate)
    base = best["baseline (no piece, vectorized)"]
    print(f"EnvRunner, {args.num_envs} x 84x84 uint8 frames, random module, {args.steps} steps, best of {args.repeats}")
    for name, rate in best.items():
        print(f"  {name:<45} {rate:>9,.0f} env steps/s  ({rate / base:.2f} x baseline)")


if __name__ == "__main__":
    main()
