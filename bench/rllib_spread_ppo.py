"""RLlib 2.60 multi-agent PPO on mpe2's simple_spread_v3 (3 agents, one shared module): the return at 100k env steps.

    .venv-rllib/bin/python bench/rllib_spread_ppo.py [--seed 0] [--env-steps 100000] [--max-seconds 0]

Runs ONLY under RLlib's own interpreter (.venv-rllib: torch, "ray[rllib]", pettingzoo, mpe2,
pygame-ce); it imports nothing from this project. The configuration ``../shared/multi_agent.md``
measured (§6, "Secondary: mpe2 simple_spread_v3"): the new API stack's PPO with its defaults
(fcnet [256, 256] tanh with vf_share_layers, gamma 0.99, lambda 1.0, clip 0.3, 4,000 env steps an
iteration, minibatches of 128, returns averaged over the last 100 episodes) plus lr 3e-4, 6 epochs
and vf_loss_coeff 0.01;
``simple_spread_v3.parallel_env(N=3, max_cycles=25)`` through RLlib's ParallelPettingZooEnv; one
module, ``shared``, for the 3 agents; one remote env runner; ``ray.init(num_cpus=2)``; no sample
timeout (on a loaded 2-core machine the 60 s default returned iterations of 0 env steps). Runs until
``--env-steps`` env steps are sampled (or, with ``--max-seconds``, the first iteration that ends
past that many seconds from the start). The return is per agent: ``episode_return_mean`` (summed
over the agents) / 3, the figure bench/multi_agent_spread_ppo.py prints. A line per iteration on
stderr; one JSON object on the last stdout line: seed, env steps, the per-agent return, loop
seconds (from the built algorithm), whole seconds (from before ``import ray``) and the curve
``[env steps, per-agent return, whole s]`` of every iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--max-seconds", type=float, default=0.0, help="stop after the iteration past this (0: none)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    def spread(cfg: dict) -> ParallelPettingZooEnv:
        from mpe2 import simple_spread_v3

        return ParallelPettingZooEnv(simple_spread_v3.parallel_env(N=3, max_cycles=25))

    register_env("simple_spread", spread)
    config = (
        PPOConfig()
        .environment("simple_spread")
        .env_runners(num_env_runners=1, sample_timeout_s=None)  # under load, 60 s (the default) gives empty iterations
        .training(lr=args.lr, num_epochs=6, vf_loss_coeff=0.01)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda aid, episode, **kw: "shared")
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    t1 = time.perf_counter()
    steps, per_agent, curve = 0, float("nan"), []
    while steps < args.env_steps:
        result = algo.train()
        steps = int(result.get("num_env_steps_sampled_lifetime", steps))
        per_agent = float(result.get("env_runners", {}).get("episode_return_mean", float("nan"))) / 3
        whole = time.perf_counter() - t0
        curve.append([steps, round(per_agent, 3), round(whole, 1)])
        print(
            f"[rllib] iter {len(curve)}: {steps} env steps, return per agent {per_agent:.2f}, {whole:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if args.max_seconds and whole > args.max_seconds:
            break
    loop = time.perf_counter() - t1
    algo.stop()
    whole = time.perf_counter() - t0
    ray.shutdown()
    print(
        json.dumps(
            {
                "seed": args.seed,
                "lr": args.lr,
                "env_steps": steps,
                "per_agent": per_agent,
                "loop_s": loop,
                "whole_s": whole,
                "iterations": len(curve),
                "curve": curve,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
