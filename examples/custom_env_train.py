"""Train PPO on your own env, from an env class to a trained policy.

    python examples/custom_env_train.py
    ray-sampler train --env examples.custom_env_train:LightSide --env-config.size 6

LightSide is a corridor: the agent starts at 0, action 1 steps right and 0 steps left, and
reaching ``size`` ends the episode with reward 1 (a time limit of ``4 x size`` steps ends it with
0). The class takes its config in its constructor, RLlib's convention, so the class itself is the
creator: ``EnvRunnerConfig(env=LightSide, env_config={"size": 6})``. The same module trains from
the command line as ``module:Class`` (run it where the module is, or on ``PYTHONPATH``); attached
to a cluster, the module is shipped to the workers (docs/custom_envs.md).

The script trains until the mean return of the last 100 finished episodes reaches ``target``
(a policy that finds the light before the time limit in 95 of 100 episodes) and prints a line
per iteration, then the result.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import ray

from learner import PPOTrainingConfig, train_ppo
from ray_sampler import EnvRunnerConfig
from ray_sampler.cli import parse


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    size: int = 6
    """Steps from the start to the light."""
    target: float = 0.95
    """Stop once the mean return of the last 100 finished episodes reaches this."""
    max_iterations: int = 30
    """Iterations at most (400 env steps each: 2 runners x 200 steps)."""


class LightSide(gym.Env):
    """Walk right to the light (see the module docstring)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.size = int((config or {}).get("size", 6))
        self.pos = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.pos = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        done = self.pos >= self.size
        return np.array([self.pos / self.size], np.float32), float(done), done, False, {}


def main(args: Args) -> None:
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    runner = EnvRunnerConfig(env=LightSide, env_config={"size": args.size}, max_episode_steps=4 * args.size)
    config = PPOTrainingConfig(env_runner=runner, target_return=args.target, max_iterations=args.max_iterations)
    result = train_ppo(config)
    print(f"mean return {result.mean_return:.2f} after {result.env_steps} env steps (reached: {result.reached})")
    ray.shutdown()


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/custom_env_train.py", description=__doc__ or ""))
