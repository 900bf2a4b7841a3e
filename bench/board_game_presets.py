"""PettingZoo board games from the command line: self-play measured against a random player.

    .venv/bin/python bench/board_game_presets.py --env pettingzoo:tictactoe_v3 --seeds 0 1 2
    .venv/bin/python bench/board_game_presets.py --env pettingzoo:connect_four_v3 --seeds 0 -- --max-env-steps 300000

Runs ``ray-sampler train --env ENV --seed S --plain`` for each seed (the env's preset where it has
one; anything after ``--`` is passed on, e.g. ``--target-return none`` to use the whole budget, or
the preset's evaluation flags for an env without one), then reads the run directory's
``metrics.csv``: every evaluation against the random player (``evaluation/win``, ``draw``, ``loss``,
and the win rate by seat), the env steps at which the run stopped, and the wall time of the whole
command. Baseline in the same run: the random player against itself, the same number of games
as an evaluation, stepped bare (what an untrained policy's rates would be). The last stdout line is
one JSON object with every run's evaluations.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import ROOT

CLI = str(ROOT / ".venv" / "bin" / "ray-sampler")


def random_against_random(env_id: str, games: int, seed: int) -> dict[str, float]:
    """The first player's win, draw and loss rates when both players move at random (legal moves)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from ray_sampler.sampling.env_creator import pettingzoo_module

    module = pettingzoo_module(env_id.removeprefix("pettingzoo:"))
    rng = np.random.default_rng(seed)
    results = []
    for game in range(games):
        env = module.env()
        env.reset(seed=seed + game)
        first, score = env.agents[0], 0.0
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if agent == first:
                score += float(reward)
            if terminated or truncated:
                env.step(None)
                continue
            env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        results.append(np.sign(score))
        env.close()
    outcomes = np.asarray(results)
    return {
        "win": float(np.mean(outcomes > 0)),
        "draw": float(np.mean(outcomes == 0)),
        "loss": float(np.mean(outcomes < 0)),
    }


def one_run(env_id: str, seed: int, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as runs:
        cmd = [CLI, "train", "--env", env_id, "--seed", str(seed), "--plain", "--runs-dir", runs, *extra]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if proc.returncode not in (0, 1):  # 1: the target missed
            raise SystemExit(f"{' '.join(cmd)} failed (rc {proc.returncode}): {proc.stderr[-800:]}")
        (run_dir,) = Path(runs).iterdir()
        rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    seats = sorted(k.removeprefix("evaluation/win/") for k in rows[0] if k.startswith("evaluation/win/"))
    evaluations = []
    for row in rows:
        win = float(row.get("evaluation/win", "nan") or "nan")
        if math.isnan(win):
            continue
        evaluations.append(
            {
                "env_steps": int(row["env_steps"]),
                "win": win,
                "draw": float(row["evaluation/draw"]),
                "loss": float(row["evaluation/loss"]),
                **{f"win/{s}": float(row[f"evaluation/win/{s}"]) for s in seats},
            }
        )
    stopped = proc.stdout.strip().splitlines()
    headline = next(
        (line for line in stopped if line.split(":")[0] in ("Target reached", "Target missed", "Budget used")), ""
    )
    return {"seed": seed, "env_steps": int(rows[-1]["env_steps"]), "wall_s": wall, "headline": headline,
            "evaluations": evaluations}  # fmt: skip


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="pettingzoo:tictactoe_v3")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--games", type=int, default=200, help="games of the random-against-random baseline")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    baseline = random_against_random(args.env, args.games, seed=0)
    print(f"{args.env}: random against random, {args.games} games: first player won {baseline['win']:.0%} "
          f"drew {baseline['draw']:.0%} lost {baseline['loss']:.0%}", flush=True)  # fmt: skip
    runs = []
    for seed in args.seeds:
        run = one_run(args.env, seed, extra)
        runs.append(run)
        curve = ", ".join(f"{e['env_steps']} {e['win']:.0%}/{e['loss']:.0%}" for e in run["evaluations"])
        took = f"after {run['env_steps']} env steps, {run['wall_s']:.1f} s for the command"
        print(f"seed {seed}: {run['headline']} {took}", flush=True)
        print(f"  against random, won/lost by env steps: {curve}", flush=True)
    print(json.dumps({"env": args.env, "extra": extra, "baseline": baseline, "runs": runs}))


if __name__ == "__main__":
    main()
