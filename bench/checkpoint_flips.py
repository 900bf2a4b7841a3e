"""Damaged run checkpoints: every single-bit flip of a real ``train-dqn`` checkpoint's ``state.json``.

    python bench/checkpoint_flips.py                  # trains a short DQN run, flips every bit
    python bench/checkpoint_flips.py --checkpoint runs/dqn-CartPole-v1-.../checkpoints/ckpt-00000004

Each damaged copy is loaded with ``load_checkpoint`` and counted as one of: refused
(``CheckpointError`` naming the checkpoint and ``state.json``), equal (loads a state exactly equal to
the undamaged one), changed (loads a different state silently: the failure this guards against) or
raw (any other exception). The goal: 0 changed, 0 raw. The last line is JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import ROOT

sys.path.insert(0, str(ROOT))

from learner.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint


def same(a: Any, b: Any) -> bool:
    """Exact equality of two loaded states (arrays by dtype, shape and bytes; NaN equals NaN)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def make_checkpoint(where: Path) -> Path:
    """A short DQN run on CartPole-v1 with a checkpoint every report; its newest checkpoint."""
    cmd = [sys.executable, "-m", "ray_sampler", "train-dqn", "--max-env-steps", "3000", "--checkpoint-every", "1"]
    cmd += ["--runs-dir", str(where), "--plain"]
    done = subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True, text=True, timeout=600)
    runs = list(where.iterdir()) if where.is_dir() else []  # exit 1: the target was missed, as expected
    found = latest_checkpoint(runs[0] / "checkpoints") if len(runs) == 1 else None
    if found is None:
        raise SystemExit(f"train-dqn made no checkpoint (rc {done.returncode}): {done.stderr[-1500:]}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default="", help="a checkpoint directory (default: make one)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="rs-flips-"))
    try:
        source = Path(args.checkpoint) if args.checkpoint else make_checkpoint(scratch / "runs")
        saved = scratch / "ckpt"
        shutil.copytree(source, saved)
        meta = json.loads((saved / "state.json").read_bytes())
        kind = {"algo": meta["algo"], "env": meta["env"], "observation_space": meta["observation_space"]}
        original = dataclasses.asdict(load_checkpoint(saved, **kind))
        data = (saved / "state.json").read_bytes()
        counts = {"refused": 0, "equal": 0, "changed": 0, "raw": 0}
        examples: dict[str, str] = {}
        t0 = time.perf_counter()
        for bit in range(len(data) * 8):
            damaged = bytearray(data)
            damaged[bit // 8] ^= 1 << (bit % 8)
            (saved / "state.json").write_bytes(damaged)
            try:
                back = dataclasses.asdict(load_checkpoint(saved, **kind))
            except CheckpointError as e:
                named = str(e).startswith(f"checkpoint {saved} ") and "state.json" in str(e)
                outcome = "refused" if named else "raw"
                examples.setdefault(outcome, str(e)[:160])
            except Exception as e:  # counted: the goal is none
                outcome = "raw"
                examples.setdefault("raw", f"{type(e).__name__}: {str(e)[:140]}")
            else:
                outcome = "equal" if same(back, original) else "changed"
                if outcome == "changed":
                    examples.setdefault("changed", f"byte {bit // 8} bit {bit % 8}")
            counts[outcome] += 1
        elapsed = time.perf_counter() - t0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"checkpoint: {source} (state.json {len(data):,} bytes; {meta['algo']} on {meta['env']})")
    print(f"{len(data) * 8:,} single-bit flips loaded in {elapsed:.1f} s:")
    for outcome, n in counts.items():
        print(f"  {outcome:8s} {n:6,}  {examples.get(outcome, '')}")
    print(json.dumps({"bytes": len(data), "flips": len(data) * 8, **counts}))
    if counts["changed"] or counts["raw"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
