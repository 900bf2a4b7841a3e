"""End-to-end benchmark: wall clock and env steps to a mean return of 450 on CartPole-v1.

    .venv/bin/python bench/e2e_bench.py [--seeds 0,1,2] [--algos ppo,dqn,ppo-torch] [--rllib-python PATH]

Figures, each beside a baseline measured in the same run:

1. PPO (``learner.train.train_ppo``, 2 env runners x 4 sub-envs, one local learner) per seed:
   env steps and seconds until the mean return of the last 100 episodes reaches 450, as the
   training loop (``seconds``) and as the whole process from ``ray.init`` (``whole_s``).
   Baselines: RLlib 2.60's default PPO with 2 env runners (bench/rllib_e2e.py in its own venv,
   same seeds, its stop rule: ``episode_return_mean`` >= 450) as a ratio of wall clocks; and raw
   gymnasium stepping of the same number of env steps (SyncVectorEnv of 16, random actions):
   the least any sampler could spend on those steps.
2. DQN (``learner.train_dqn.train_dqn``: 2 runners -> ReplayActor -> local learner) per seed,
   uniform and prioritized replay, the same figures (RLlib's PPO stays the reference).
   ``ppo-torch`` and ``dqn-prioritized-torch``: the same runs with ``--framework torch`` (torch
   modules and learners; needs ``ray-sampler[torch]``).
3. The learner connector pipeline (columns + GAE with the value bootstrap) on a 4,000-step
   batch: env steps/s (median of 5, fresh episodes each time) beside RLlib's own learner
   connector on 4,000 steps, and its share of the PPO iterations' wall time in the runs of 1.

Each run is a fresh process (this VM's timings vary up to 2x between processes: see RESULTS.md).
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


def child(algo: str, seed: int) -> dict[str, Any]:
    """One training run in this (fresh) process."""
    t_start = time.perf_counter()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        # The configs of `ray-sampler train --seed N --target-return 450` / `train-dqn ...`: RLlib's run
        # (rllib_e2e.py) stops at episode_return_mean >= 450, which in RLlib 2.60 averages the episodes
        # that finished in its last iteration: a looser rule than our 100 episodes (bench/RESULTS.md).
        from ray_sampler.cli.train import TrainDQN, TrainPPO, command_from_args

        args = ["--seed", str(seed), "--target-return", "450"]
        if algo.endswith("-torch"):  # the same run with torch modules and learners (issue #10)
            args += ["--framework", "torch"]
            algo = algo.removesuffix("-torch")
        if algo == "ppo":
            from learner.train import train_ppo

            result = train_ppo(command_from_args(TrainPPO, args, prog="e2e").to_config(), log=_log)
        else:
            from learner.train_dqn import train_dqn

            args.append("--replay.prioritized" if algo == "dqn-prioritized" else "--replay.no-prioritized")
            result = train_dqn(command_from_args(TrainDQN, args, prog="e2e").to_config(), log=_log, log_every_s=5.0)
    finally:
        ray.shutdown()
    return {**result, "whole_s": time.perf_counter() - t_start}  # a TrainResult reads as a Mapping too


def connector_throughput() -> dict[str, float]:
    """Our learner pipeline on 4,000-step episode lists (8 sub-envs x 500 steps), median of 5."""
    from learner.learner import Learner
    from ray_sampler.modules.mlp_module import MLPModule
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.env_runner import EnvRunner

    runner = EnvRunner(
        EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=8, rollout_fragment_length=500, seed=0)
    )
    learner = Learner(MLPModule(runner.observation_space, runner.action_space, seed=0))
    rates = []
    for _ in range(6):
        episodes = runner.sample()
        t0 = time.perf_counter()
        learner.build_batch(episodes)
        rates.append(sum(len(ep) for ep in episodes) / (time.perf_counter() - t0))
    return {"steps_per_s": statistics.median(rates[1:]), "num_episodes_last": len(episodes)}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--algos", default="ppo,dqn,dqn-prioritized")
    parser.add_argument("--rllib-python", default=str(ROOT / ".venv-rllib" / "bin" / "python"))
    parser.add_argument("--child", choices=["ppo", "dqn", "dqn-prioritized", "ppo-torch", "dqn-prioritized-torch"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.seed)))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    algos = args.algos.split(",")
    rllib = Path(args.rllib_python).exists()
    ours: dict[str, list[dict[str, Any]]] = {a: [] for a in algos}
    theirs: list[dict[str, Any]] = []
    for seed in seeds:  # the sides take turns, so slow phases of the VM hit both
        for algo in algos:
            result = run_json([sys.executable, "bench/e2e_bench.py", "--child", algo, "--seed", str(seed)])
            if result is not None:
                ours[algo].append({**result, "seed": seed})
        if rllib:
            result = run_json([args.rllib_python, "bench/rllib_e2e.py", "--seed", str(seed)])
            if result is not None:
                theirs.append(result)
    print(
        f"{'run':<24}{'seed':>5}{'reached':>9}{'env steps':>11}{'loop s':>9}{'whole s':>9}{'raw gym s':>10}"
        f"{'whole / RLlib':>15}"
    )
    rllib_by_seed = {r["seed"]: r for r in theirs}
    for algo in algos:
        for r in ours[algo]:
            r["raw_gym_s"] = raw_stepping_s("CartPole-v1", r["env_steps"])
            other = rllib_by_seed.get(r["seed"])
            ratio = f"{r['whole_s'] / other['whole_s']:.2f}" if other and other.get("reached") else "n/a"
            print(
                f"{'ours ' + algo:<24}{r['seed']:>5}{r['reached']!s:>9}{r['env_steps']:>11}{r['seconds']:>9.1f}"
                f"{r['whole_s']:>9.1f}{r['raw_gym_s']:>10.2f}{ratio:>15}"
            )
    for r in theirs:
        r["raw_gym_s"] = raw_stepping_s("CartPole-v1", r["env_steps"])
        print(
            f"{'RLlib 2.60 PPO':<24}{r['seed']:>5}{r['reached']!s:>9}{r['env_steps']:>11}{r['seconds']:>9.1f}"
            f"{r['whole_s']:>9.1f}{r['raw_gym_s']:>10.2f}{'1.00':>15}"
        )
    summary: dict[str, Any] = {}
    for algo in algos:
        if ours[algo]:
            summary[algo] = {k: _median(ours[algo], k) for k in ("env_steps", "seconds", "whole_s")}
    if theirs:
        summary["rllib_ppo"] = {k: _median(theirs, k) for k in ("env_steps", "seconds", "whole_s")}
        for algo in algos:
            if ours[algo]:
                summary[algo]["whole_ratio_to_rllib"] = summary[algo]["whole_s"] / summary["rllib_ppo"]["whole_s"]
    print("medians: " + json.dumps(summary))

    pipe = connector_throughput()
    ppo = ours.get("ppo", [])
    share = [r["learner_connector_s"] / (r["sample_s"] + r["update_s"]) for r in ppo]
    line = f"learner pipeline, 4,000-step batches: {pipe['steps_per_s']:,.0f} env steps/s"
    if rllib:
        connector = run_json([args.rllib_python, "bench/rllib_e2e.py", "--connector-only"])
        if connector is not None:
            theirs_rate = connector["learner_connector_steps_per_s"]
            line += f" vs RLlib's learner connector {theirs_rate:,.0f} ({pipe['steps_per_s'] / theirs_rate:.1f}x)"
    print(line)
    if share:
        print(f"learner pipeline share of PPO iteration time: {min(share):.1%}-{max(share):.1%} over seeds {seeds}")
    print(json.dumps({"ours": ours, "rllib": theirs, "pipeline": pipe, "pipeline_share": share}))


if __name__ == "__main__":
    main()
