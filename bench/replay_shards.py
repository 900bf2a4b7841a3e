"""Replay shards: the CPU each replay shard spends per env step, for K = 1 and 2 shards, and the
runner count where the busiest shard would need a whole core.

    .venv/bin/python bench/replay_shards.py [--runners 2] [--seconds 8] [--shards 1,2]

For each K: ``--runners`` runners with ``train-dqn``'s defaults (CartPole-v1 x 4, MLP 2x64,
32-step fragments, ``keep_sampling``) send their chunks to a prioritized replay of K shards
(``SupervisedReplay(num_shards=K)``, the DQN loop's path). After every round the driver, standing
in for one learner, takes what ``train_dqn`` takes: 0.5 updates per new env step, batches of 64,
3-step returns, pulled as ``LearnerGroup.update_from_replay`` pulls them (``plan_draws``: the
shards' masses read, one shard drawn for the round's pull, one ``sample_batches`` call), and the
new priorities sent back to that shard.

Every figure is CPU time (``time.process_time`` read inside each shard and runner through
``actor.__ray_call__``), not wall time, so it holds on a machine with fewer cores than processes.
The baseline, measured in the same run: gymnasium's SyncVectorEnv of the same sub-envs stepped
with random actions in a plain actor. The sums: a runner makes ``1 / runner_cpu_per_step`` steps/s
on a core of its own; the busiest shard saturates at
``N = 1 / (shard_cpu_per_step x per_runner_steps_per_s)`` runners.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scaling_bench import RawStepper, cpu_of, per_step


def measure(k: int, args: argparse.Namespace) -> dict[str, Any]:
    """One K: env steps added, transitions sampled, each shard's and the runners' CPU."""
    from learner.replay_recovery import SupervisedReplay
    from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
    from replay import ReplayConfig
    from replay.shards import plan_draws

    config = EnvRunnerConfig(
        env="CartPole-v1", num_envs_per_env_runner=args.num_envs, rollout_fragment_length=args.fragment
    )
    group_config = EnvRunnerGroupConfig(num_env_runners=args.runners, num_cpus_per_env_runner=0.5, keep_sampling=True)
    replay_config = ReplayConfig(capacity_env_steps=500_000, min_size_to_sample=1000, prioritized=True, seed=0)
    replay = SupervisedReplay(replay_config, num_shards=k, num_cpus=0)
    rng = np.random.default_rng(0)
    try:
        with EnvRunnerGroup(config, group_config) as group:
            while not all(mass > 0 for mass, _, _ in replay.call_each("sampling_mass")):  # every shard warmed up
                replay.sample_to_replay(group)
            runners = [group.actor(i) for i in group.worker_indices]
            r0, q0 = [cpu_of(a) for a in runners], [cpu_of(s) for s in replay.actors]
            t0, steps, sampled, owed = time.perf_counter(), 0, 0, 0.0
            while time.perf_counter() - t0 < args.seconds:
                new = sum(m.num_env_steps for m in replay.sample_to_replay(group))
                steps += new
                owed += new * args.updates_per_env_step
                (draw,) = plan_draws(replay.target if k > 1 else [replay.actor], 1, int(owed), rng)
                batches = draw.pull(args.batch_size, n_step=3, gamma=0.99)
                keys = {j: b["keys"] for j, b in enumerate(batches)}
                draw.push(keys, {j: rng.random(len(v)) for j, v in keys.items()})
                sampled += int(owed) * args.batch_size
                owed -= int(owed)
            wall = time.perf_counter() - t0
            shard_cpu = [cpu_of(s) - q for s, q in zip(replay.actors, q0, strict=True)]
            runner_cpu = sum(cpu_of(a) - r for a, r in zip(runners, r0, strict=True))
    finally:
        replay.stop()
    return {
        "shards": k,
        "env_steps": steps,
        "transitions_sampled": sampled,
        "wall_s": wall,
        "shard_cpu_s": shard_cpu,
        "shard_cpu_per_step": [per_step(c, steps) for c in shard_cpu],
        "runner_cpu_per_step": per_step(runner_cpu, steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--fragment", type=int, default=32, help="rollout_fragment_length")
    parser.add_argument("--seconds", type=float, default=8.0, help="wall seconds per K")
    parser.add_argument("--updates-per-env-step", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shards", default="1,2", help="comma-separated K values")
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=args.runners + 2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    raw = ray.remote(RawStepper).options(num_cpus=1).remote(args.num_envs)
    ray.get(raw.run.remote(10))
    c0, raw_steps = cpu_of(raw), ray.get(raw.run.remote(4000))
    raw_cpu = per_step(cpu_of(raw) - c0, raw_steps)
    ray.kill(raw)
    results = [measure(int(k), args) for k in args.shards.split(",")]
    ray.shutdown()

    print(
        f"replay_shards  {time.strftime('%Y-%m-%d %H:%M')}  CartPole-v1 x{args.num_envs} per runner, "
        f"{args.runners} runners, prioritized, {args.updates_per_env_step:g} updates of {args.batch_size} per env "
        f"step; CPU time"
    )
    print(f"raw stepping (baseline), steps/s per core: {1 / raw_cpu:>10,.0f}")
    print(
        f"{'K':>2}{'env steps':>11}{'sampled':>11}{'runner steps/s/core':>21}{'(x raw)':>9}"
        f"{'shard us/step':>24}{'busiest':>9}{'saturates at N':>16}{'wall steps/s':>14}"
    )
    for r in results:
        per_runner = 1.0 / r["runner_cpu_per_step"]
        shard_us = [c * 1e6 for c in r["shard_cpu_per_step"]]
        busiest = max(r["shard_cpu_per_step"])
        r["per_runner_steps_per_s"] = per_runner
        r["saturates_at_runners"] = 1.0 / (busiest * per_runner)
        print(
            f"{r['shards']:>2}{r['env_steps']:>11,}{r['transitions_sampled']:>11,}{per_runner:>21,.0f}"
            f"{per_runner * raw_cpu:>9.2f}{' / '.join(f'{u:.1f}' for u in shard_us):>24}{busiest * 1e6:>9.1f}"
            f"{r['saturates_at_runners']:>16.1f}{r['env_steps'] / r['wall_s']:>14,.0f}"
        )
    if len(results) > 1:
        print(
            f"busiest shard CPU per env step, K={results[-1]['shards']} / K={results[0]['shards']}: "
            f"{max(results[-1]['shard_cpu_per_step']) / max(results[0]['shard_cpu_per_step']):.2f}"
        )
    print(json.dumps({"raw_cpu_per_step": raw_cpu, "results": results}))


if __name__ == "__main__":
    main()
