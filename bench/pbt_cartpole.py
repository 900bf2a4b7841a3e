"""Population-based training against independent trials: PPO on CartPole-v1 to a mean return of 450.

    .venv/bin/python bench/pbt_cartpole.py [--seeds 0,1,2] [--lrs 1e-4,3e-4,1e-3,3e-3] [--cpus 8]

For each seed, two sweeps of ``ray-sampler tune`` (``run_sweep``, the command's own code) with the
same four starting configs (one learning rate each, the same seeds):

- **independent**: the four trials run to 450 or their budget, nothing shared (scheduler fifo);
- **pbt**: every ``--interval`` iterations the worst quarter copies the best quarter's
  checkpoint and mutates ``ppo.lr`` (loguniform over ``--lr-range``) and ``ppo.entropy_coeff``.

Each trial stops at 450 (its stop rule: the mean of the last 100 episodes) or ``--budget``
iterations. Figures, all in env steps:

- ``independent median``: the median over the four trials of the env steps each needed to reach
  450 (inf for a trial that never did);
- ``pbt lineage``: the env steps behind the first PBT trial to reach 450, counted along its line
  of copied checkpoints (its own ``env_steps`` counter, which goes on from the checkpoint it
  copied);
- ``pbt population``: every env step any PBT trial sampled until that moment (their rows
  reported by then, by Tune's timestamps), the copies' lost work included;
- the same population count for the independent trials when their median trial got there.

The ratio ``pbt lineage / independent median`` is the goal's (below 1: PBT needed fewer). Logical
CPUs (``--cpus``) let the four trials of a sweep run at once on a small machine: each trial's
wall time stretches, its env steps do not.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET = 450.0


def sweep_toml(kind: str, seed: int, args: argparse.Namespace) -> str:
    lrs = ", ".join(repr(float(x)) for x in args.lrs.split(","))
    low, high = (float(x) for x in args.lr_range.split(","))
    text = f"""
algo = "ppo"
scheduler = "{"pbt" if kind == "pbt" else "fifo"}"

[config]
max_iterations = {args.budget}
target_return = {TARGET}
env_runner_group.num_env_runners = 1
env_runner.seed = {seed}
ppo.seed = {seed}

[space]
ppo.lr = {{ grid = [{lrs}] }}
"""
    if kind == "pbt":
        text += f"""
[pbt]
perturbation_interval = {args.interval}
[pbt.mutations]
ppo.lr = {{ loguniform = [{low}, {high}] }}
ppo.entropy_coeff = {{ choice = [0.0, 0.005, 0.01] }}
"""
    return text


def trial_rows(sweep_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Tune's reported rows of each trial (result.json), in order."""
    out = {}
    for trial_dir in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and (p / "result.json").is_file()):
        lines = (trial_dir / "result.json").read_text().splitlines()
        out[trial_dir.name] = [json.loads(line) for line in lines if line]
    return out


def reached_at(rows: list[dict[str, Any]]) -> tuple[int, float] | None:
    """(env steps, timestamp) of a trial's first row whose full window averages >= 450."""
    for row in rows:
        if row.get("window", 0) >= 100 and row["return_mean"] >= TARGET:
            return int(row["env_steps"]), float(row["timestamp"])
    return None


def population_steps(trials: dict[str, list[dict[str, Any]]], until: float, batch: int) -> int:
    """Env steps every trial sampled in the rows it reported by ``until`` (one batch a row)."""
    return sum(batch for rows in trials.values() for row in rows if float(row["timestamp"]) <= until)


def one_sweep(kind: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from ray_sampler.cli.sweep import TuneCommand, run_sweep

    config = root / f"{kind}-{seed}.toml"
    config.write_text(sweep_toml(kind, seed, args))
    started = time.perf_counter()
    run_sweep(TuneCommand(config=config, sweeps_dir=root, name=f"{kind}-{seed}"))
    wall = time.perf_counter() - started
    trials = trial_rows(root / f"{kind}-{seed}")
    first = next(iter(trials.values()))[0]
    batch = int(first["env_steps"]) // int(first["iteration"])
    reached = {name: reached_at(rows) for name, rows in trials.items()}
    got = sorted((r for r in reached.values() if r is not None), key=lambda r: r[1])
    steps = sorted(r[0] if r is not None else math.inf for r in reached.values())
    out: dict[str, Any] = {"kind": kind, "seed": seed, "wall_s": round(wall, 1), "batch": batch}
    out["steps_to_target"] = [s if math.isfinite(s) else None for s in steps]
    if kind == "pbt":
        out["lineage"] = got[0][0] if got else None
        out["population"] = population_steps(trials, got[0][1], batch) if got else None
        out["exploits"] = len((root / f"{kind}-{seed}" / "pbt_global.txt").read_text().splitlines())
    else:
        median = statistics.median(steps)
        out["median"] = median if math.isfinite(median) else None
        # the population's steps when the median trial got there (the later of the middle two)
        if len(got) >= 3:
            out["population"] = population_steps(trials, got[len(steps) // 2][1], batch)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--lrs", default="1e-4,3e-4,1e-3,3e-3", help="the four trials' starting ppo.lr")
    parser.add_argument("--lr-range", default="5e-5,1e-2", help="PBT's ppo.lr range")
    parser.add_argument("--interval", type=int, default=4, help="PBT's perturbation interval (iterations)")
    parser.add_argument("--budget", type=int, default=150, help="iterations a trial may run")
    parser.add_argument("--cpus", type=int, default=8, help="logical CPUs of the local Ray")
    parser.add_argument("--out", default=None, help="JSON lines of the results")
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    results = []
    with tempfile.TemporaryDirectory(prefix="pbt-bench-") as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            pair = {kind: one_sweep(kind, seed, args, Path(tmp)) for kind in ("independent", "pbt")}
            results.append(pair)
            ind, pbt = pair["independent"], pair["pbt"]
            ratio = pbt["lineage"] / ind["median"] if pbt["lineage"] and ind["median"] else None
            print(
                f"seed {seed}: independent median {ind['median']} (trials {ind['steps_to_target']}, population "
                f"{ind.get('population')}, {ind['wall_s']} s); pbt lineage {pbt['lineage']} population "
                f"{pbt['population']} ({pbt['exploits']} exploits, {pbt['wall_s']} s); lineage/median "
                f"{'-' if ratio is None else f'{ratio:.2f}'}",
                flush=True,
            )
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(pair) + "\n")
    ray.shutdown()


if __name__ == "__main__":
    main()
