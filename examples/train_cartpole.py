"""Train PPO on CartPole-v1: env runners sample, learners update, weights go back to the runners.

    python examples/train_cartpole.py --num-env-runners 2 --num-learners 0

Each iteration the EnvRunnerGroup samples (truncate mode, so every runner returns exactly
``rollout_fragment_length x num_envs_per_env_runner`` steps), the LearnerGroup runs the
learner pipeline (GAE across chunk cuts) and PPO's minibatch epochs, and the new weights go to
every runner with one ``ray.put``. It stops once the mean return of the last 20 finished
episodes reaches ``target_return``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections import deque

import gymnasium as gym
import numpy as np
import ray

from learner import LearnerGroup, PPOConfig
from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig, MLPModule


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    env: str = "CartPole-v1"
    """Gymnasium id to train on."""
    num_env_runners: int = 2
    """Remote env runners."""
    num_envs_per_env_runner: int = 8
    """Sub-envs per runner."""
    rollout_fragment_length: int = 128
    """Steps per sub-env per iteration."""
    num_learners: int = 0
    """Learner actors (0: one local learner in this process)."""
    lr: float = 1e-3
    """Adam learning rate."""
    max_iterations: int = 60
    """Give up after this many iterations."""
    target_return: float = 450.0
    """Stop once the mean return of the last 20 finished episodes reaches this."""
    seed: int = 0
    """Seed of the envs, the policy and the minibatch shuffling."""


def main(args: Args) -> None:
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    probe = gym.make(args.env)
    spaces = (probe.observation_space, probe.action_space)
    config = EnvRunnerConfig(env=args.env, num_envs_per_env_runner=args.num_envs_per_env_runner,
                             rollout_fragment_length=args.rollout_fragment_length, seed=args.seed)
    runners = EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=args.num_env_runners,
                                                          num_cpus_per_env_runner=0.5))
    learners = LearnerGroup(lambda: MLPModule(*spaces, seed=args.seed), PPOConfig(lr=args.lr, seed=args.seed),
                            num_learners=args.num_learners, num_cpus_per_learner=0.5)
    runners.sync_weights(learners.get_weights())
    returns: deque[float] = deque(maxlen=20)
    steps, start = 0, time.perf_counter()
    print(f"PPO on {args.env}: {args.num_env_runners} env runners x {args.num_envs_per_env_runner} sub-envs, "
          f"{args.num_learners or 'one local'} learner(s), seed {args.seed}")
    for it in range(1, args.max_iterations + 1):
        episodes = runners.sample()
        steps += sum(len(ep) for ep in episodes)
        returns.extend(runners.metrics["episode_returns"])
        metrics = learners.update_from_episodes(episodes)
        version = runners.sync_weights(learners.get_weights())
        mean = float(np.mean(returns)) if returns else float("nan")
        print(f"iter {it}: {steps} env steps, mean return {mean:.1f} (last {len(returns)} episodes), "
              f"policy loss {metrics['policy_loss']:.3f}, vf loss {metrics['vf_loss']:.2f}, weights v{version}, "
              f"{time.perf_counter() - start:.1f} s")
        if len(returns) == returns.maxlen and mean >= args.target_return:
            print(f"reached mean return {mean:.1f} >= {args.target_return} after {steps} env steps "
                  f"in {time.perf_counter() - start:.1f} s")
            break
    else:
        print(f"stopped after {args.max_iterations} iterations: mean return {mean:.1f}")
    learners.stop()
    runners.stop()
    ray.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Args):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    main(Args(**vars(parser.parse_args())))
