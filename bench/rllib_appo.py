"""RLlib's APPO or IMPALA on CartPole-v1 with 2 env runners x 4 sub-envs until a mean return of 450.

    .venv-rllib/bin/python bench/rllib_appo.py --algo APPO --seed 0 [--max-seconds 300]

Runs ONLY under RLlib's own interpreter (.venv-rllib); it imports nothing from this project.
RLlib 2.60's APPO or IMPALA on the new API stack with its default hyperparameters (1 local
learner), ``num_env_runners=2``, ``num_envs_per_env_runner=4`` (half a CPU each, in a Ray of 4 logical
CPUs: with 2, RLlib's aggregator actor never gets one and ``train()`` waits forever), seeded with
``--seed``; stops once
``episode_return_mean`` (the episodes finished in the last iteration) reaches the target or the
time budget is used.

Prints exactly one JSON object on the last stdout line (reached, mean_return, env_steps,
iterations, seconds, whole_s); everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", choices=["APPO", "IMPALA"], default="APPO")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--target", type=float, default=450.0)
    args = parser.parse_args()

    t_start = time.perf_counter()
    import ray

    if args.algo == "APPO":
        from ray.rllib.algorithms.appo import APPOConfig as Config
    else:
        from ray.rllib.algorithms.impala import IMPALAConfig as Config

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = (
        Config()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, num_cpus_per_env_runner=0.5)
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    out: dict[str, Any] = {"algo": args.algo, "seed": args.seed, "ray_version": ray.__version__}
    try:
        t0 = time.perf_counter()
        mean, steps, iters = float("nan"), 0, 0
        while time.perf_counter() - t0 < args.max_seconds:
            result = algo.train()
            iters += 1
            runners = result["env_runners"]
            mean = runners.get("episode_return_mean", float("nan"))
            steps = result.get("num_env_steps_sampled_lifetime") or runners.get("num_env_steps_sampled_lifetime")
            if iters % 10 == 0:
                log(f"iter {iters}: {steps} env steps, mean return {mean:.1f}, {time.perf_counter() - t0:.1f} s")
            if mean >= args.target:
                break
        out.update(
            reached=bool(mean >= args.target),
            mean_return=mean,
            env_steps=int(steps or 0),
            iterations=iters,
            seconds=time.perf_counter() - t0,
            whole_s=time.perf_counter() - t_start,
        )
    finally:
        algo.stop()
        ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
