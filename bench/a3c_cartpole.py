"""Asynchronous gradients (A3C) on CartPole-v1 to a 100-episode mean of 450, beside the synchronous PPO loop.

    .venv/bin/python bench/a3c_cartpole.py [--seeds 0,1,2] [--max-env-steps 1000000] [--lr 1e-3]

Per seed, in one Ray session (2 CPUs), 2 env runners x 4 sub-envs: ``train_ppo`` with its defaults,
then ``optimizer="async_gradients"`` (each worker's gradient of the plain policy-gradient loss on
one 256-step fragment, 64 steps per sub-env; Adam in the driver; ``max_staleness`` 4). Prints env
steps and seconds to 450 (or the budget) for each, their ratio, and A3C's staleness histogram
(updates applied since a gradient's weights -> gradients). Baseline in the same run: CartPole-v1
stepped bare for the same env steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from bench_common import ROOT, raw_stepping_s, sync_ppo_to


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-env-steps", type=int, default=1_000_000)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import ray

    from learner.learner import PPOConfig
    from learner.train import train_ppo

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        sync, ppo, ppo_s = sync_ppo_to(450.0, seed, args.max_env_steps)
        a3c_cfg = dataclasses.replace(
            sync,
            env_runner=dataclasses.replace(sync.env_runner, rollout_fragment_length=64),
            ppo=PPOConfig(seed=seed, lr=args.lr, policy_loss="pg"),
            optimizer="async_gradients",
            max_iterations=args.max_env_steps // 256,
        )
        t0 = time.perf_counter()
        a3c = train_ppo(a3c_cfg, log=lambda line: None)
        a3c_s = time.perf_counter() - t0
        rows.append((seed, ppo, ppo_s, a3c, a3c_s))
        print(
            f"seed {seed}: sync PPO {ppo.env_steps} env steps ({'reached' if ppo.reached else 'budget'}) in "
            f"{ppo_s:.1f} s; A3C {a3c.env_steps} ({'reached' if a3c.reached else 'budget'}, mean "
            f"{a3c.mean_return:.0f}) in {a3c_s:.1f} s, {a3c.iterations} updates, staleness {a3c.staleness}, "
            f"{a3c.num_gradients_dropped} dropped, runner utilization {a3c.runner_utilization:.2f}",  # type: ignore[attr-defined]
            flush=True,
        )
    ray.shutdown()
    print("\nseed  sync env steps  sync s  A3C env steps  A3C s  steps A3C/sync  s A3C/sync")
    for seed, ppo, ppo_s, a3c, a3c_s in rows:
        print(
            f"{seed:>4}  {ppo.env_steps:>14}  {ppo_s:>6.1f}  {a3c.env_steps:>13}  {a3c_s:>5.1f}  "
            f"{a3c.env_steps / ppo.env_steps:>14.2f}  {a3c_s / ppo_s:>10.2f}"
        )
    steps = max(row[3].env_steps for row in rows)
    bare = raw_stepping_s("CartPole-v1", steps, num_envs=4)
    print(f"baseline: {steps} env steps of CartPole-v1 stepped bare (4 sub-envs, one process): {bare:.1f} s")


if __name__ == "__main__":
    main()
