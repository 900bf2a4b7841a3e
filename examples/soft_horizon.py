"""Cut episodes at a horizon without resetting the env: ``soft_horizon``.

    python examples/soft_horizon.py --max-episode-steps 10 --num-episodes 8

With ``max_episode_steps`` alone, an episode reaching the horizon ends with ``truncated=True``
and the env is reset. With ``soft_horizon=True`` too, the episode still ends there for the
learner (``truncated=True``: value targets bootstrap from its last observation), but the env is
not reset: the next episode (a new id, ``t_started`` 0) goes on from the observation the cut one
ended with. The env's own ends (CartPole's pole falling) still end the episode and reset the env.
One local runner (no Ray) samples whole episodes; each line says how an episode ended and where
the next one began.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from ray_sampler import EnvRunner, EnvRunnerConfig
from ray_sampler.cli import parse


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    env: str = "CartPole-v1"
    """Gymnasium id to step (one sub-env)."""
    max_episode_steps: int = 10
    """The horizon: an episode is cut after this many steps, and the env goes on."""
    num_episodes: int = 8
    """Episodes to sample."""
    seed: int = 0
    """Seed of the sub-env and the policy."""


def main(args: Args) -> None:
    config = EnvRunnerConfig(env=args.env, max_episode_steps=args.max_episode_steps, soft_horizon=True, seed=args.seed)
    runner = EnvRunner(config)
    episodes = runner.sample(num_episodes=args.num_episodes, random_actions=True)
    print(f"soft_horizon at {args.max_episode_steps} steps on {args.env}: {len(episodes)} episodes")
    num_cut = num_continued = 0
    for k, ep in enumerate(episodes, start=1):
        if ep.is_terminated:
            end = "terminated by the env, which resets"
        elif len(ep) == args.max_episode_steps:
            end, num_cut = "cut at the horizon (truncated), the env goes on", num_cut + 1
        else:  # the env's own time limit (CartPole-v1's 500 steps), shorter than the horizon
            end = "truncated by the env's own limit, which resets"
        start = "a reset"
        if k > 1 and np.array_equal(ep.get_observations(0), episodes[k - 2].get_observations(-1)):
            start, num_continued = "the last observation of episode " + str(k - 1), num_continued + 1
        print(f"episode {k}: {len(ep)} steps from {start}, {end}")
    print(f"{num_cut} cut at the horizon, {num_continued} began where the one before was cut")
    runner.stop()


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/soft_horizon.py", description=__doc__ or ""))
