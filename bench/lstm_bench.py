"""Recurrent PPO benchmark: env steps and wall clock to a mean return of 350 on StatelessCartPole.

    .venv/bin/python bench/lstm_bench.py [--seeds 0,1,2] [--num-env-runners 3] [--rllib-python PATH]
                                         [--rllib-max-seconds 1800]

Figures, each beside the baselines measured in the same run:

1. Ours: ``ray-sampler train --env StatelessCartPole-v1 --seed N --num-env-runners 3`` (the preset
   of learner/presets.py: a torch LSTM, mean/std observation filter, sequences of 20), per seed:
   env steps and seconds until the mean return of the last 100 episodes reaches 350, as the
   training loop (``seconds``) and as the whole process from ``ray.init`` (``whole_s``).
2. RLlib 2.60 (bench/rllib_lstm.py in its own venv, same seeds): its tuned StatelessCartPole
   LSTM PPO with 3 env runners, stopping at ``episode_return_mean`` >= 350 (the mean of one
   iteration's finished episodes: a looser rule than our 100 episodes) or 2M env steps. The
   ratios are ours / RLlib's, env steps and whole-process seconds. Beside ours, the env steps at
   which ours met RLlib's rule (the first iteration whose finished episodes average 350), read
   off the same run. RLlib's env class has no 500-step time limit (its returns pass 500); ours
   keeps CartPole-v1's.
3. Raw gymnasium stepping of the same number of env steps (SyncVectorEnv of 16
   StatelessCartPole-v1, random actions): the least any sampler could spend on them.

The sides take turns per seed, so slow phases of the machine hit both; each run is a fresh process.

``--preset-cli`` instead runs ours exactly as a user does, ``ray-sampler train --env
StatelessCartPole-v1 --seed S --plain --runs-dir DIR --max-env-steps 300000`` (the preset: 2 runners x 4
sub-envs x 256 = 2,048 env steps an iteration; through bench/lstm_ablation.py's wrapper, which records
each iteration's finished episodes), and RLlib with ``--until-100 --max-env-steps 300000``, and
reports both stop rules on both sides (env steps at the end of the iteration where each is met):

  ours  100-episode rule (its stop) | one iteration's finished episodes pooled >= 350 | the same on
        disjoint blocks of iterations of >= 4,000 env steps (RLlib's iteration size; the preset's
        iterations are 2,048)
  RLlib episode_return_mean (its stop: one iteration's episodes, the plain mean of the 3 runners'
        means, each over at most its last 34) | the same iteration's episodes pooled | 100-episode rule
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


def child(seed: int, num_env_runners: int) -> dict[str, Any]:
    """One training run in this (fresh) process."""
    t_start = time.perf_counter()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        import learner.train as train_module
        from learner.train import train_ppo

        # RLlib's rule beside ours: the env steps at the first iteration whose own finished episodes
        # average the target (its episode_return_mean), read off the returns the loop's tracker gets.
        per_iteration: list[list[float]] = []
        original_add = train_module.ReturnTracker.add

        def add(self: Any, returns: list[float]) -> None:
            per_iteration.append(list(returns))
            original_add(self, returns)

        train_module.ReturnTracker.add = add  # type: ignore[method-assign]
        from ray_sampler.cli.train import TrainPPO, command_from_args

        args = ["--env", "StatelessCartPole-v1", "--seed", str(seed), "--num-env-runners", str(num_env_runners)]
        cfg = command_from_args(TrainPPO, args, prog="lstm_bench").to_config()
        result = train_ppo(cfg, log=_log)
    finally:
        ray.shutdown()
    steps_per_iteration = result["env_steps"] // max(result["iterations"], 1)
    rllib_rule = next(
        ((i + 1) * steps_per_iteration for i, r in enumerate(per_iteration) if r and sum(r) / len(r) >= 350.0),
        None,
    )
    return {**result, "whole_s": time.perf_counter() - t_start, "env_steps_rllib_rule": rllib_rule}


def _median(values: list[int | None], budget: int) -> float | None:
    """The median with a miss counted as above the budget (None if the median is a miss)."""
    filled = [v if v is not None else budget + 1 for v in values]
    m = statistics.median(filled) if filled else budget + 1
    return None if m > budget else m


def same_run(
    seeds: list[int],
    rllib_python: str,
    max_env_steps: int,
    max_seconds: float,
    runs_dir: Path,
    rllib_max_episode_steps: int | None = None,
) -> None:
    """Ours (the preset, as the CLI runs it) and RLlib, seed by seed, both stop rules on both sides."""
    import lstm_ablation

    rows: list[dict[str, Any]] = []
    for seed in seeds:
        t0 = time.perf_counter()
        ours = lstm_ablation.one_run("preset", [], seed, max_env_steps, runs_dir)
        ours["wall_s"] = round(time.perf_counter() - t0, 1)
        _log(f"ours s{seed}: {json.dumps(ours)}")
        rows.append({"side": "ours", "seed": seed, **ours})
        cmd = [rllib_python, "bench/rllib_lstm.py", "--seed", str(seed), "--until-100"]
        cmd += ["--max-env-steps", str(max_env_steps), "--max-seconds", str(max_seconds)]
        if rllib_max_episode_steps is not None:
            cmd += ["--max-episode-steps", str(rllib_max_episode_steps)]
        _log("$ " + " ".join(cmd))
        t0 = time.perf_counter()
        other = run_json(cmd, timeout_s=max_seconds + 600) or {"error": True}
        log_rows = other.get("iterations_log") or []
        other["wall_s"] = round(time.perf_counter() - t0, 1)
        other["env_steps_pooled_rule"] = next((r[0] for r in log_rows if r[2] and r[3] >= lstm_ablation.TARGET), None)
        if not other.get("reached"):
            other["env_steps"] = None
        _log(f"RLlib s{seed}: {json.dumps({k: v for k, v in other.items() if k != 'iterations_log'})}")
        rows.append({"side": "rllib", "seed": seed, **other})
    ours_rows = [r for r in rows if r["side"] == "ours"]
    rllib_rows = [r for r in rows if r["side"] == "rllib"]
    print(
        "| seed | ours: 100-episode rule | ours: RLlib rule (iteration pooled) "
        "| ours: RLlib rule on >= 4,000-step blocks | RLlib: its rule (episode_return_mean) "
        "| RLlib: iteration pooled | RLlib: 100-episode rule | ours s | RLlib s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for o, r in zip(ours_rows, rllib_rows, strict=True):
        print(
            f"| {o['seed']} | {o.get('ours_steps')} | {o.get('rllib_steps')} | {o.get('rllib4k_steps')} "
            f"| {r.get('env_steps')} "
            f"| {r.get('env_steps_pooled_rule')} | {r.get('env_steps_100')} | {o['wall_s']} | {r['wall_s']} |"
        )
    medians = {
        "ours_100": _median([r.get("ours_steps") for r in ours_rows], max_env_steps),
        "ours_iteration_pooled": _median([r.get("rllib_steps") for r in ours_rows], max_env_steps),
        "ours_4k_blocks_pooled": _median([r.get("rllib4k_steps") for r in ours_rows], max_env_steps),
        "rllib_episode_return_mean": _median([r.get("env_steps") for r in rllib_rows], max_env_steps),
        "rllib_iteration_pooled": _median([r.get("env_steps_pooled_rule") for r in rllib_rows], max_env_steps),
        "rllib_100": _median([r.get("env_steps_100") for r in rllib_rows], max_env_steps),
    }
    print("medians (a miss counts as above the budget): " + json.dumps(medians))
    print(json.dumps({"rows": rows, "medians": medians}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--num-env-runners", type=int, default=3)
    parser.add_argument("--rllib-python", default=str(ROOT / ".venv-rllib" / "bin" / "python"))
    parser.add_argument("--rllib-max-seconds", type=float, default=1800.0)
    parser.add_argument("--preset-cli", action="store_true", help="ours as `ray-sampler train` runs it; both rules")
    parser.add_argument("--max-env-steps", type=int, default=300_000, help="with --preset-cli: both sides' budget")
    parser.add_argument("--runs-dir", default="/tmp/lstm_same_run", help="with --preset-cli: our runs' directories")
    parser.add_argument(
        "--rllib-max-episode-steps",
        type=int,
        default=None,
        help="with --preset-cli: RLlib's env in a TimeLimit (500: the horizon ours keeps; default: none, as RLlib's)",
    )
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.preset_cli:
        same_run(
            [int(s) for s in args.seeds.split(",")],
            args.rllib_python,
            args.max_env_steps,
            args.rllib_max_seconds,
            Path(args.runs_dir),
            args.rllib_max_episode_steps,
        )
        return
    if args.child:
        print(json.dumps(child(args.seed, args.num_env_runners)))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    rllib = Path(args.rllib_python).exists()
    ours: list[dict[str, Any]] = []
    theirs: dict[int, dict[str, Any]] = {}
    for seed in seeds:
        cmd = [sys.executable, "bench/lstm_bench.py", "--child", "--seed", str(seed)]
        result = run_json([*cmd, "--num-env-runners", str(args.num_env_runners)])
        if result is not None:
            ours.append({**result, "seed": seed})
        if rllib:
            cmd = [args.rllib_python, "bench/rllib_lstm.py", "--seed", str(seed)]
            other = run_json(
                [*cmd, "--max-seconds", str(args.rllib_max_seconds)], timeout_s=args.rllib_max_seconds + 600
            )
            if other is not None:
                theirs[seed] = other
    header = f"{'run':<16}{'seed':>5}{'reached':>9}{'env steps':>11}{'loop s':>9}{'whole s':>9}{'raw gym s':>10}"
    print(header + f"{'steps / RLlib':>15}{'whole / RLlib':>15}{'steps, RLlib rule':>19}")
    for r in ours:
        r["raw_gym_s"] = raw_stepping_s("StatelessCartPole-v1", r["env_steps"])
        other = theirs.get(r["seed"])
        steps_ratio = whole_ratio = "n/a"
        if other is not None:
            # RLlib not reaching 350 bounds its figures from below: ours / RLlib is then an upper bound.
            bound = "" if other.get("reached") else "<="
            steps_ratio = f"{bound}{r['env_steps'] / other['env_steps']:.3f}"
            whole_ratio = f"{bound}{r['whole_s'] / other['whole_s']:.3f}"
        print(
            f"{'ours LSTM':<16}{r['seed']:>5}{r['reached']!s:>9}{r['env_steps']:>11}{r['seconds']:>9.1f}"
            f"{r['whole_s']:>9.1f}{r['raw_gym_s']:>10.2f}{steps_ratio:>15}{whole_ratio:>15}"
            f"{r.get('env_steps_rllib_rule')!s:>19}"
        )
    for seed, r in sorted(theirs.items()):
        r["raw_gym_s"] = raw_stepping_s("StatelessCartPole-v1", r["env_steps"])
        print(
            f"{'RLlib 2.60 LSTM':<16}{seed:>5}{r['reached']!s:>9}{r['env_steps']:>11}{r['seconds']:>9.1f}"
            f"{r['whole_s']:>9.1f}{r['raw_gym_s']:>10.2f}{'1.000':>15}{'1.000':>15}"
        )
    if ours:
        medians = {k: statistics.median(r[k] for r in ours) for k in ("env_steps", "seconds", "whole_s")}
        print("ours, medians: " + json.dumps(medians))
    print(json.dumps({"ours": ours, "rllib": theirs}))


if __name__ == "__main__":
    main()
