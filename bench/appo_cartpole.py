"""Asynchronous samples (APPO) against the synchronous PPO loop: CartPole-v1 to a 100-episode mean of 450.

    .venv/bin/python bench/appo_cartpole.py [--seeds 0,1,2,3,4] [--max-env-steps 300000]

Per seed, in one Ray session (2 CPUs), the same runners for both (2 env runners x 4 sub-envs):
``train_ppo`` with its defaults (128 steps per sub-env: 1,024 env steps an iteration, 8 epochs,
minibatches of 128), then ``train_async`` (64 steps per sub-env: a 256-step fragment an update,
8 epochs, minibatches of 128, V-trace with rho_bar = c_bar = 1, fragments more than 4 updates
old dropped, the weights out after every update). ``--policy-loss pg --epochs 1`` makes it
IMPALA; ``--lr``, ``--entropy-coeff``, ``--max-policy-lag`` (-1: none) and ``--fragment`` (steps
per sub-env) set those. Prints env steps and seconds to 450 (or the budget) for each, their
ratios, the asynchronous loop's policy lags, and each loop's runner utilization (the runners'
sampling time over 2 x the loop's seconds). For APPO the env steps are every step sampled:
learned from, dropped for its lag, or in flight at the end. Baseline in the same run: CartPole-v1
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
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--max-env-steps", type=int, default=300_000)
    parser.add_argument("--policy-loss", choices=["clipped", "pg"], default="clipped", help="pg: IMPALA's loss")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--entropy-coeff", type=float, default=0.0)
    parser.add_argument("--max-policy-lag", type=int, default=4, help="drop older fragments; -1: none")
    parser.add_argument("--fragment", type=int, default=64, help="steps per sub-env in a fragment")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import ray

    from learner.learner import PPOConfig
    from learner.optimizers import AsyncSamplesConfig
    from learner.train_async import train_async

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        sync, ppo, ppo_s = sync_ppo_to(450.0, seed, args.max_env_steps)
        runner = dataclasses.replace(sync.env_runner, rollout_fragment_length=args.fragment)
        asyn = dataclasses.replace(
            sync,
            env_runner=runner,
            ppo=PPOConfig(
                seed=seed,
                num_epochs=args.epochs,
                lr=args.lr,
                entropy_coeff=args.entropy_coeff,
                policy_loss=args.policy_loss,
            ),
            max_iterations=args.max_env_steps // (4 * args.fragment),
            async_samples=AsyncSamplesConfig(max_policy_lag=None if args.max_policy_lag < 0 else args.max_policy_lag),
        )
        t0 = time.perf_counter()
        appo = train_async(asyn, log=lambda line: None)
        appo_s = time.perf_counter() - t0
        lags = appo.policy_lags
        median_lag = sorted(k for k, n in lags.items() for _ in range(n))[sum(lags.values()) // 2]
        rows.append((seed, ppo, ppo_s, appo, appo_s, median_lag, max(lags)))
        print(
            f"seed {seed}: sync PPO {ppo.env_steps} env steps ({'reached' if ppo.reached else 'budget'}) "
            f"in {ppo_s:.1f} s; "
            f"async APPO {appo.num_env_steps_sampled} sampled ({appo.env_steps} learned from, "
            f"{appo.num_env_steps_dropped} dropped) ({'reached' if appo.reached else 'budget'}) in {appo_s:.1f} s, "
            f"{appo.iterations} updates, policy lag median {median_lag} max {max(lags)}, "
            f"runner utilization {appo.runner_utilization:.2f}",
            flush=True,
        )
    ray.shutdown()
    header = "seed  sync env steps  sync s  async env steps  async s  steps async/sync  s async/sync"
    print(f"\n{header}  utilization sync  utilization async")
    for seed, ppo, ppo_s, appo, appo_s, _, _ in rows:
        print(
            f"{seed:>4}  {ppo.env_steps:>14}  {ppo_s:>6.1f}  {appo.num_env_steps_sampled:>15}  {appo_s:>7.1f}  "
            f"{appo.num_env_steps_sampled / ppo.env_steps:>16.2f}  {appo_s / ppo_s:>12.2f}  "
            f"{ppo.runner_utilization:>16.2f}  {appo.runner_utilization:>17.2f}"
        )
    steps = max(row[3].num_env_steps_sampled for row in rows)
    bare = raw_stepping_s("CartPole-v1", steps, num_envs=4)
    print(f"baseline: {steps} env steps of CartPole-v1 stepped bare (4 sub-envs, one process): {bare:.1f} s")


if __name__ == "__main__":
    main()
