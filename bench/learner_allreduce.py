"""Learner actors averaging their gradients through the driver, against an all-reduce among themselves.

    .venv/bin/python bench/learner_allreduce.py [--num-learners 2] [--updates 5] [--hidden 256]

One Ray session (4 CPUs). One fixed batch of CartPole-v1 episodes (4 x 1,024 env steps from a
local runner), then for each ``gradient_sync`` a LearnerGroup of M numpy PPO learner actors (0.5
CPU each, hidden layers of ``--hidden`` units, 8 epochs of 512-step minibatches) runs ``--updates``
updates on it. Prints seconds per update, the gradient bytes that passed through the driver per
update (``LearnerGroup.driver_gradient_bytes``), and the bytes of the episode shards the driver
sends per update (the same for both). Baseline in the same run: CartPole-v1 stepped bare for the
batch's env steps.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time

from bench_common import ROOT, raw_stepping_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-learners", type=int, default=2)
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import ray

    from learner.learner import PPOConfig
    from learner.learner_group import LearnerGroup, shard_episodes
    from ray_sampler.modules.mlp_module import MLPModule
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.env_runner import EnvRunner

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    runner = EnvRunner(EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=1024))
    episodes = runner.sample()
    steps = sum(len(ep) for ep in episodes)
    spaces = (runner.observation_space, runner.action_space)
    hidden = (args.hidden, args.hidden)
    shard_bytes = sum(len(pickle.dumps(s)) for s in shard_episodes(episodes, args.num_learners))
    print(f"{steps} env steps, {args.num_learners} learners, hidden {hidden}")
    print("gradient sync  s per update  driver gradient bytes per update  episode shard bytes per update")
    for sync in ("driver", "allreduce"):
        group = LearnerGroup(
            lambda: MLPModule(*spaces, hidden_sizes=hidden, seed=0),
            PPOConfig(num_epochs=8, minibatch_size=512),
            num_learners=args.num_learners,
            num_cpus_per_learner=0.5,
            gradient_sync=sync,
        )
        try:
            group.update_from_episodes(episodes)  # warm-up: the actors' first call
            before = group.driver_gradient_bytes
            t0 = time.perf_counter()
            for _ in range(args.updates):
                group.update_from_episodes(episodes)
            seconds = (time.perf_counter() - t0) / args.updates
            moved = (group.driver_gradient_bytes - before) / args.updates
        finally:
            group.stop()
        print(f"{sync:>13}  {seconds:>12.3f}  {moved:>32,.0f}  {shard_bytes:>30,}")
    ray.shutdown()
    bare = raw_stepping_s("CartPole-v1", steps, num_envs=4)
    print(f"baseline: {steps} env steps of CartPole-v1 stepped bare (4 sub-envs, one process): {bare:.2f} s")


if __name__ == "__main__":
    main()
