"""PPO on Pendulum-v1 (issue #9): env steps and wall clock to a mean return of -300, per seed.

    .venv/bin/python bench/pendulum.py [--seeds 0,1,2]

Each seed is a fresh process that starts Ray and runs ``train_ppo`` on the Pendulum-v1 preset
(``learner.presets.ppo_preset``: 2 env runners x 4 sub-envs x 256 steps per iteration, one local
learner, a budget of 399,360 env steps) with that seed for the runners and the learner, until the
mean return of the last 100 finished episodes reaches -300 (RLlib's tuned Pendulum PPO example
stops there). Figures: env steps, the loop's seconds (``seconds``) and the whole process's from
``ray.init`` (``whole_s``). Baseline, measured in the same run: raw gymnasium stepping of the same
number of env steps (SyncVectorEnv of 8 Pendulum-v1, random actions), the least any sampler
could spend on them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import raw_stepping_s, run_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def child(seed: int) -> dict[str, Any]:
    """One training run in this (fresh) process."""
    t_start = time.perf_counter()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        from learner.learner import PPOConfig
        from learner.presets import ppo_preset
        from learner.train import PPOTrainingConfig, train_ppo
        from ray_sampler.sampling.config import EnvRunnerConfig

        base = PPOTrainingConfig(env_runner=EnvRunnerConfig(env="Pendulum-v1", seed=seed), ppo=PPOConfig(seed=seed))
        result = train_ppo(ppo_preset("Pendulum-v1", base), log=_log)
    finally:
        ray.shutdown()
    return {**result, "whole_s": time.perf_counter() - t_start}  # a TrainResult reads as a Mapping too


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.seed)))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = []
    for seed in seeds:
        result = run_json([sys.executable, "bench/pendulum.py", "--child", "--seed", str(seed)])
        if result is not None:
            runs.append({**result, "seed": seed})
    print(
        f"{'seed':>4}{'reached':>9}{'mean return':>13}{'env steps':>11}{'iters':>7}{'loop s':>9}{'whole s':>9}"
        f"{'raw gym s':>11}{'loop / raw':>12}"
    )
    for r in runs:
        r["raw_gym_s"] = raw_stepping_s("Pendulum-v1", r["env_steps"], 8)
        print(
            f"{r['seed']:>4}{r['reached']!s:>9}{r['mean_return']:>13.1f}{r['env_steps']:>11}{r['iterations']:>7}"
            f"{r['seconds']:>9.1f}{r['whole_s']:>9.1f}{r['raw_gym_s']:>11.2f}{r['seconds'] / r['raw_gym_s']:>12.1f}"
        )
    if runs:
        medians = {k: statistics.median(r[k] for r in runs) for k in ("env_steps", "seconds", "whole_s", "raw_gym_s")}
        print(
            f"reached -300 in {sum(r['reached'] for r in runs)} of {len(runs)} seeds; medians: "
            f"{medians['env_steps']:,.0f} env steps, {medians['seconds']:.1f} s loop, "
            f"{medians['whole_s']:.1f} s whole; "
            f"raw gymnasium stepping of those steps {medians['raw_gym_s']:.2f} s "
            f"(loop / raw {medians['seconds'] / medians['raw_gym_s']:.1f}x)"
        )
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
