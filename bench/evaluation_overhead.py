"""What evaluation adds to PPO on CartPole-v1's wall time to its target, beside the same run without it.

    .venv/bin/python bench/evaluation_overhead.py [--seeds 0,1,2] [--interval 5] [--episodes 10]

For each seed, three runs of ``train_ppo`` on the default config (2 runners x 4 sub-envs, target
475 over the last 100 exploring episodes), in this order, on one Ray started here:

- ``none``: no evaluation (the baseline, measured in the same run);
- ``between``: every ``--interval`` iterations, ``--episodes`` greedy episodes on one runner in the
  driver, between two iterations;
- ``parallel``: the same on one remote evaluation runner, beside the next iteration
  (``evaluation_parallel_to_training``).

Evaluation never changes the training (its own runners and seeds), so the three runs of a seed take
the same env steps; the figures are each run's wall time, its ratio to ``none``, and for
``between`` the time the evaluations took (the sum of their ``duration_s``), which is what it
should add.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run(seed: int, variant: str, interval: int, episodes: int) -> dict[str, Any]:
    from learner.train import PPOTrainingConfig, train_ppo
    from ray_sampler.sampling.evaluation import EvaluationConfig

    evaluation = {
        "none": EvaluationConfig(),
        "between": EvaluationConfig(evaluation_interval=interval, evaluation_duration=episodes),
        "parallel": EvaluationConfig(
            evaluation_interval=interval, evaluation_duration=episodes, evaluation_num_env_runners=1,
            evaluation_parallel_to_training=True,
        ),
    }[variant]  # fmt: skip
    base = PPOTrainingConfig()
    cfg = dataclasses.replace(
        base,
        env_runner=dataclasses.replace(base.env_runner, seed=seed),
        ppo=dataclasses.replace(base.ppo, seed=seed),
        evaluation=evaluation,
        max_iterations=300,
    )
    records: list[Any] = []
    start = time.perf_counter()
    result = train_ppo(cfg, log=lambda line: None, on_iteration=records.append)
    wall = time.perf_counter() - start
    spent = [r.evaluation.get("duration_s", float("nan")) for r in records]
    return {
        "wall_s": wall,
        "env_steps": result.env_steps,
        "reached": result.reached,
        "evaluations": sum(1 for s in spent if s == s),
        "evaluation_s": sum(s for s in spent if s == s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--interval", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=10)
    args = parser.parse_args()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows: dict[str, list[dict[str, Any]]] = {"none": [], "between": [], "parallel": []}
    try:
        for seed in (int(s) for s in args.seeds.split(",")):
            for variant in rows:
                row = run(seed, variant, args.interval, args.episodes)
                rows[variant].append(row)
                base = rows["none"][-1]["wall_s"]
                print(
                    f"seed {seed} {variant:>8}: {row['wall_s']:6.1f} s ({row['wall_s'] / base:.3f}x none), "
                    f"{row['env_steps']} env steps, reached {row['reached']}, {row['evaluations']} evaluations "
                    f"taking {row['evaluation_s']:.1f} s",
                    flush=True,
                )
    finally:
        ray.shutdown()
    for variant in ("between", "parallel"):
        ratios = [r["wall_s"] / b["wall_s"] for r, b in zip(rows[variant], rows["none"])]
        added = [r["wall_s"] - b["wall_s"] for r, b in zip(rows[variant], rows["none"])]
        spent = [r["evaluation_s"] for r in rows[variant]]
        print(
            f"{variant:>8}: median {statistics.median(ratios):.3f}x the run without evaluation "
            f"({', '.join(f'{x:.3f}' for x in ratios)}); added {', '.join(f'{a:.1f}' for a in added)} s against "
            f"evaluations taking {', '.join(f'{s:.1f}' for s in spent)} s"
        )


if __name__ == "__main__":
    main()
