"""PPO presets for mpe2's scenarios: the CLI's defaults against simple_spread's preset values, per scenario.

    .venv/bin/python bench/mpe_presets.py [--seed 0] [--env-steps 150000] [--settings default,spread]
        [--scenarios simple_v3,simple_adversary_v3,...]

For each scenario, runs ``ray-sampler train --env pettingzoo:mpe2.<scenario> --max-env-steps N
--seed S --plain --target-return None --runs-dir <tmp dir>`` as a subprocess, once per setting:
"default" (the CLI's defaults: 2 runners x 4 sub-envs x 128 steps, the default PPO) and "spread"
(the values of the ``pettingzoo:mpe2.simple_spread_v3`` preset in learner/presets.py, as flags:
8 sub-envs x 125 steps per runner, lr 3e-4, 6 epochs, minibatches of 256). From the run
directory's metrics.csv it reports the summed return of the last 100 episodes at the end, each
module's return, the best summed return (of 100-episode windows), the env steps at which the summed
return first reached 90% of the way from random play to that best, and the curve every ~25k env
steps. Baseline in the same run: random play (each agent's action space sampled) of the bare env
for ``--random-episodes`` episodes, summed per module with the agent -> module mapping the CLI
prints on its second line. The last stdout line is one JSON object with every run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import ROOT

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
SCENARIOS = (
    "simple_v3",
    "simple_adversary_v3",
    "simple_push_v3",
    "simple_reference_v3",
    "simple_speaker_listener_v4",
    "simple_tag_v3",
    "simple_crypto_v3",
    "simple_world_comm_v3",
)
SETTINGS: dict[str, list[str]] = {
    "default": [],
    "spread": [
        "--env-runner.num-envs-per-env-runner", "8",
        "--env-runner.rollout-fragment-length", "125",
        "--ppo.lr", "3e-4",
        "--ppo.num-epochs", "6",
        "--ppo.minibatch-size", "256",
    ],
}  # fmt: skip
MODULES_LINE = re.compile(r"^modules: (?P<body>.*?); ")
MODULE_ITEM = re.compile(r"(?P<name>[^,\s()]+) \((?P<agents>[^)]*)\)")
CLI = ROOT / ".venv" / "bin" / "ray-sampler"


def parse_modules(line: str) -> dict[str, list[str]]:
    """``modules: adversary (adversary_0), agent (agent_0, agent_1); ...`` -> {module: [agents]}."""
    m = MODULES_LINE.match(line)
    if not m:
        return {}
    return {i["name"]: [a.strip() for a in i["agents"].split(",")] for i in MODULE_ITEM.finditer(m["body"])}


def random_returns(scenario: str, episodes: int, seed: int) -> dict[str, float]:
    """Mean return per agent of ``episodes`` episodes of random actions in the bare env."""
    import importlib

    module = importlib.import_module(f"mpe2.{scenario}")
    env = module.parallel_env()
    totals: dict[str, float] = {}
    for ep in range(episodes):
        env.reset(seed=seed * 100_000 + ep)
        for i, a in enumerate(env.possible_agents):
            env.action_space(a).seed(seed * 100_000 + ep * 97 + i)
        while env.agents:
            _, rewards, _, _, _ = env.step({a: env.action_space(a).sample() for a in env.agents})
            for a, r in rewards.items():
                totals[a] = totals.get(a, 0.0) + float(r)
    env.close()
    return {a: r / episodes for a, r in totals.items()}


def read_metrics(path: Path) -> list[dict[str, float]]:
    with path.open() as f:
        return [{k: float(v) if v not in ("", None) else math.nan for k, v in row.items()} for row in csv.DictReader(f)]


def summarize(rows: list[dict[str, float]], random_sum: float, every: int) -> dict[str, Any]:
    last = rows[-1]
    full = [r for r in rows if r["window"] >= 100] or rows  # 100-episode windows, as the stop rule
    best = max(r["return_mean"] for r in full)
    thr = random_sum + 0.9 * (best - random_sum)
    at90 = next((int(r["env_steps"]) for r in full if r["return_mean"] >= thr), None)
    curve: list[list[float]] = []
    mark = every
    for r in rows:
        if r["env_steps"] >= mark or r is last:
            curve.append([int(r["env_steps"]), round(r["return_mean"], 2)])
            while mark <= r["env_steps"]:
                mark += every
    modules = {k.split("/", 2)[2]: round(v, 2) for k, v in last.items() if k.startswith("return/module/")}
    return {
        "env_steps": int(last["env_steps"]),
        "final": round(last["return_mean"], 2),
        "modules": modules,
        "best": round(best, 2),
        "steps_to_90pct": at90,
        "loop_s": round(last["elapsed_s"], 1),
        "curve": curve,
    }


def run_one(scenario: str, setting: str, args: argparse.Namespace, runs_dir: str) -> dict[str, Any]:
    cmd = [
        str(CLI), "train", "--env", f"pettingzoo:mpe2.{scenario}", "--max-env-steps", str(args.env_steps),
        "--seed", str(args.seed), "--plain", "--target-return", "None", "--runs-dir", runs_dir,
        *SETTINGS[setting],
    ]  # fmt: skip
    print("$ " + " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        return {"error": f"timed out after {args.timeout_s} s", "stderr": str(e.stderr or "")[-1500:]}
    wall = time.perf_counter() - t0
    lines = proc.stdout.splitlines()
    out: dict[str, Any] = {"rc": proc.returncode, "wall_s": round(wall, 1)}
    out["modules_map"] = next((parse_modules(ln) for ln in lines if ln.startswith("modules: ")), {})
    run_dir = next((ln.split(": ", 1)[1].strip() for ln in lines if ln.startswith("run directory: ")), None)
    if proc.returncode != 0 or run_dir is None or not (Path(run_dir) / "metrics.csv").exists():
        out["error"] = (proc.stderr.strip() or proc.stdout.strip())[-1500:]
        return out
    out["run_dir"] = run_dir
    out["rows"] = read_metrics(Path(run_dir) / "metrics.csv")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env-steps", type=int, default=150_000)
    parser.add_argument("--settings", default="default,spread")
    parser.add_argument("--random-episodes", type=int, default=200)
    parser.add_argument("--curve-every", type=int, default=25_000)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--runs-dir", default=None, help="where the run directories go (default: a new tmp dir)")
    args = parser.parse_args()
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in settings:
        if s not in SETTINGS:
            parser.error(f"--settings: {s!r} is none of {', '.join(SETTINGS)}")
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="mpe_presets_")
    sys.path.insert(0, str(ROOT))
    results: dict[str, Any] = {}
    table: list[str] = []
    for scenario in scenarios:
        t0 = time.perf_counter()
        rand_agents = random_returns(scenario, args.random_episodes, args.seed)
        rand_s = time.perf_counter() - t0
        entry: dict[str, Any] = {"random_agents": {a: round(r, 2) for a, r in rand_agents.items()}}
        rand_sum = sum(rand_agents.values())
        entry["random_sum"] = round(rand_sum, 2)
        print(f"== {scenario}: random play ({args.random_episodes} episodes, {rand_s:.1f} s) summed {rand_sum:.2f}; "
              + ", ".join(f"{a} {r:.2f}" for a, r in rand_agents.items()), flush=True)  # fmt: skip
        for setting in settings:
            run = run_one(scenario, setting, args, runs_dir)
            modules_map = run.get("modules_map") or {}
            if modules_map:
                entry["random_modules"] = {
                    m: round(sum(rand_agents.get(a, math.nan) for a in agents), 2) for m, agents in modules_map.items()
                }
                entry["modules_map"] = modules_map
            if "error" in run:
                print(f"   {setting}: FAILED (rc {run.get('rc')}): {run['error']}", flush=True)
                entry[setting] = {"error": run["error"], "rc": run.get("rc"), "wall_s": run.get("wall_s")}
                table.append(f"{scenario:27s} {setting:8s} FAILED rc {run.get('rc')}")
                continue
            summ = summarize(run["rows"], rand_sum, args.curve_every)
            summ["wall_s"] = run["wall_s"]
            summ["run_dir"] = run["run_dir"]
            entry[setting] = summ
            mods = ", ".join(f"{m} {v:.2f}" for m, v in summ["modules"].items())
            rmods = ", ".join(f"{m} {v:.2f}" for m, v in entry.get("random_modules", {}).items())
            print(
                f"   {setting}: final {summ['final']:.2f} ({mods}) after {summ['env_steps']} env steps; best "
                f"{summ['best']:.2f}; 90% of random->best at {summ['steps_to_90pct']} env steps; wall "
                f"{summ['wall_s']:.1f} s (loop {summ['loop_s']:.1f} s)\n     curve: "
                + ", ".join(f"{n} {r:.2f}" for n, r in summ["curve"]),
                flush=True,
            )
            table.append(
                f"{scenario:27s} {setting:8s} final {summ['final']:9.2f} [{mods}] random {rand_sum:8.2f} [{rmods}] "
                f"best {summ['best']:8.2f} 90%@{summ['steps_to_90pct']} wall {summ['wall_s']:.0f}s"
            )
        results[scenario] = entry
    print("summary:", flush=True)
    for line in table:
        print("  " + line, flush=True)
    print(json.dumps({"seed": args.seed, "env_steps": args.env_steps, "settings": settings, "runs_dir": runs_dir,
                      "results": results}))  # fmt: skip


if __name__ == "__main__":
    main()
