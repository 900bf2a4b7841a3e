"""Plug in your own env creator: each sub-env gets its own config and seed from its indices.

    python examples/custom_env_creator.py --num-env-runners 2 --iterations 3

The creator builds a CartPole whose pole length depends on the sub-env's ``vector_index``:
the ``env_config`` every creator receives carries ``worker_index``, ``vector_index`` and
``num_workers`` beside your own keys. It is registered under a name and the runners (remote
Ray actors) create it by that name. A small wrapper writes the indices into the reset infos, so
every episode tells where it came from; the example then prints the mean episode length per
pole length (a longer pole falls more slowly, so random actions keep it up longer).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import defaultdict
from typing import Any

import gymnasium as gym
import numpy as np
import ray

from ray_sampler import EnvContext, EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig, register_env
from ray_sampler.cli import parse


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    num_env_runners: int = 2
    """Remote runner actors."""
    num_envs_per_env_runner: int = 3
    """Sub-envs per runner; sub-env v gets pole half-length base + 0.5 * v."""
    rollout_fragment_length: int = 100
    """Steps per sub-env per iteration."""
    iterations: int = 3
    """Sampling iterations."""
    base_pole_length: float = 0.5
    """Pole half-length of vector_index 0."""


class StampResetInfo(gym.Wrapper):
    """Adds the sub-env's indices and pole length to the infos of every reset."""

    def __init__(self, env: gym.Env, stamp: dict[str, Any]) -> None:
        super().__init__(env)
        self.stamp = stamp

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, infos = self.env.reset(**kwargs)
        return obs, {**infos, **self.stamp}


def make_cartpole(config: EnvContext) -> gym.Env:
    """The creator: one CartPole per sub-env, configured from its indices."""
    env = gym.make("CartPole-v1")
    length = config["base_pole_length"] + 0.5 * config.vector_index
    env.unwrapped.length = length
    env.unwrapped.polemass_length = env.unwrapped.masspole * length
    return StampResetInfo(
        env, {"worker_index": config.worker_index, "vector_index": config.vector_index, "pole_length": length}
    )


def main(args: Args) -> None:
    register_env("variable_cartpole", make_cartpole)
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = EnvRunnerConfig(
        env="variable_cartpole",
        env_config={"base_pole_length": args.base_pole_length},
        num_envs_per_env_runner=args.num_envs_per_env_runner,
        rollout_fragment_length=args.rollout_fragment_length,
        batch_mode="complete_episodes",
        seed=0,
    )
    group = EnvRunnerGroup(
        config, EnvRunnerGroupConfig(num_env_runners=args.num_env_runners, num_cpus_per_env_runner=0.5)
    )
    lengths: dict[float, list[int]] = defaultdict(list)
    sources: set[tuple[int, int]] = set()
    with group:
        for it in range(1, args.iterations + 1):
            episodes = group.sample(random_actions=True)
            for ep in episodes:
                first = ep.get_infos(0)  # the reset infos carry the creator's stamp
                sources.add((first["worker_index"], first["vector_index"]))
                lengths[first["pole_length"]].append(len(ep))
            print(f"iter {it}: {len(episodes)} finished episodes, {sum(len(ep) for ep in episodes)} env steps")
    for length, lens in sorted(lengths.items()):
        print(f"pole half-length {length:.2f}: {len(lens)} episodes, mean length {np.mean(lens):.1f}")
    print(f"episodes came from {len(sources)} distinct (worker_index, vector_index) pairs: {sorted(sources)}")
    ray.shutdown()


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/custom_env_creator.py", description=__doc__ or ""))
