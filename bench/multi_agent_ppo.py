"""Multi-agent PPO on MultiAgentCartPole (2 agents, a policy each) to a summed return of 800, per seed.

    .venv/bin/python bench/multi_agent_ppo.py [--seeds 0,1,2] [--rllib-python PATH]

Each seed runs in a fresh process: ``train_ppo`` with 2 env runners x 4 sub-envs x 128
steps per iteration (1,024 env steps), the numpy PPO defaults, a policy per agent, stop at a mean
summed return of 800 over the last 100 episodes or 300k env steps. ``loop s`` is the training
loop's wall clock, ``whole s`` the process's from before ``ray.init``; ``update %`` is the share of
the loop in the learners' updates, ``pipeline %`` the share in the multi-agent learner pipeline
(regrouping the chunks by module, then each module's connector pipeline: columns, GAE). Baseline in the same run:
two CartPole-v1 stepped bare (gymnasium, random actions) for the same env steps; and RLlib 2.60's
tuned example (``bench/rllib_multi_agent_ppo.py``, one seed, its own interpreter) when
``.venv-rllib`` or ``--rllib-python`` is there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench_common import ROOT, raw_stepping_s, run_json


def one(seed: int) -> None:
    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    import ray

    from learner.learner import PPOConfig
    from learner.train import PPOTrainingConfig, train_ppo
    from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
    from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
    from ray_sampler.sampling.multi_agent_env import make_multi_agent

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    mapping = MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env=make_multi_agent("CartPole-v1", 2), num_envs_per_env_runner=4, rollout_fragment_length=128,
            seed=seed, multi_agent=mapping,
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5),
        ppo=PPOConfig(seed=seed),
        target_return=800,
        max_iterations=300,  # 300k env steps
    )  # fmt: skip
    result = train_ppo(cfg, log=lambda line: None)
    ray.shutdown()
    print(json.dumps({
        "seed": seed, "reached": result.reached, "return": result.mean_return, "env_steps": result.env_steps,
        "iterations": result.iterations, "loop_s": result.seconds, "whole_s": time.perf_counter() - t0,
        "sample_s": result.sample_s, "update_s": result.update_s, "pipeline_s": result.learner_connector_s,
    }))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    default_rllib = ROOT / ".venv-rllib" / "bin" / "python"
    parser.add_argument("--rllib-python", default=str(default_rllib) if default_rllib.exists() else None)
    args = parser.parse_args()
    if args.one is not None:
        one(args.one)
        return
    rows = []
    print(f"{'seed':>4} {'reached':>8} {'return':>7} {'env steps':>10} {'iters':>6} {'loop s':>7} {'whole s':>8} "
          f"{'raw gym s':>10} {'whole/raw':>10} {'update %':>9} {'pipeline %':>11}")  # fmt: skip
    for seed in [int(s) for s in args.seeds.split(",")]:
        row = run_json([sys.executable, str(Path(__file__).resolve()), "--one", str(seed)])
        if row is None:
            continue
        raw = raw_stepping_s("CartPole-v1", 2 * row["env_steps"], num_envs=8)  # two agents a step
        row["raw_s"] = raw
        rows.append(row)
        print(f"{seed:>4} {row['reached']!s:>8} {row['return']:7.1f} {row['env_steps']:>10} {row['iterations']:>6} "
              f"{row['loop_s']:7.1f} {row['whole_s']:8.1f} {raw:10.2f} {row['whole_s'] / raw:10.1f} "
              f"{100 * row['update_s'] / row['loop_s']:9.1f} "
              f"{100 * row['pipeline_s'] / row['loop_s']:11.1f}")  # fmt: skip
    rllib = None
    if args.rllib_python:
        rllib = run_json([args.rllib_python, str(ROOT / "bench" / "rllib_multi_agent_ppo.py"), "--seed", "0"],
                         timeout_s=1800)  # fmt: skip
        if rllib:
            print(f"RLlib 2.60 (seed 0): reached {rllib['reached']}, return {rllib['return']:.1f} at "
                  f"{rllib['env_steps']} env steps, {rllib['wall_s']:.0f} s whole")  # fmt: skip
    print(json.dumps({"runs": rows, "rllib": rllib}))


if __name__ == "__main__":
    main()
