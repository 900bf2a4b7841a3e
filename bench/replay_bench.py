"""Replay benchmark: insert, uniform sampling, memory and Parquet save/restore, beside RLlib's buffer.

    .venv/bin/python bench/replay_bench.py [--rllib-python .venv-rllib/bin/python]

Data: 100 episodes x 500 steps, CartPole-shaped (float32[4] obs, int64 action, float64 reward,
no model outputs), as RLlib's side (bench/rllib_replay.py, its own venv) uses. Figures:
- insert: ``EpisodeReplayBuffer.add`` of one ColumnarEpisodes per 50,000 steps (what the
  ReplayActor does per runner shipment), into a 1M-step buffer, and into a 100k-step buffer
  (steady state with eviction);
- uniform sample with next_obs, B=256, n_step 1 and 3;
- memory: bytes the buffer's arrays hold per stored step, and RSS growth per stored step (the
  method RLlib's side uses), each / raw bytes (obs + action + reward + 2 flags = 34 B);
- Parquet save and restore of 1M steps (seconds; peak RSS of a fresh process doing only that);
- baseline in the same run: raw gymnasium CartPole-v1 ``env.step`` per second.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import run_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RAW_STEP_BYTES = 16 + 8 + 8 + 2


def make_columnar(num_episodes: int, steps: int, tag: str, seed: int = 0) -> Any:
    from ray_sampler.data.columnar import ColumnarEpisodes, StepRows

    rng = np.random.default_rng(seed)
    n = num_episodes * steps
    empty = np.zeros(0, np.int64)
    return ColumnarEpisodes(
        ids=[f"{tag}-{i}" for i in range(num_episodes)],
        t_started=np.zeros(num_episodes, np.int64),
        lens=np.full(num_episodes, steps, np.int64),
        lookback_lens=np.zeros(num_episodes, np.int64),
        terminated=np.ones(num_episodes, bool),
        truncated=np.zeros(num_episodes, bool),
        data=StepRows(
            observations=rng.standard_normal((n + num_episodes, 4)).astype(np.float32),
            actions=rng.integers(0, 2, n),
            rewards=np.ones(n),
            extra_model_outputs={},
            info_rows=empty,
            info_values=[],
        ),
        lookback=StepRows(
            observations=np.zeros((0, 4), np.float32),
            actions=np.zeros(0, np.int64),
            rewards=np.zeros(0),
            extra_model_outputs={},
            info_rows=empty,
            info_values=[],
        ),
    )


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) * 1024


def measure_buffer() -> dict[str, float]:
    from replay.buffer import EpisodeReplayBuffer

    out: dict[str, float] = {}
    batches = [make_columnar(100, 500, f"b{k}", seed=k) for k in range(20)]
    rss0 = rss_bytes()
    buf = EpisodeReplayBuffer(capacity_env_steps=1_000_000, seed=0)
    t0 = time.perf_counter()
    for col in batches:
        buf.add(col)
    out["insert_steps_per_s"] = len(buf) / (time.perf_counter() - t0)
    out["arrays_bytes_per_step"] = buf.storage.nbytes() / len(buf)
    out["rss_bytes_per_step"] = (rss_bytes() - rss0) / len(buf)
    small = EpisodeReplayBuffer(capacity_env_steps=100_000, seed=0)
    for col in batches[:4]:
        small.add(col)
    t0 = time.perf_counter()
    for col in batches[4:]:
        small.add(col)
    out["insert_evicting_steps_per_s"] = 16 * 50_000 / (time.perf_counter() - t0)
    out["evicting_arrays_bytes_per_step"] = small.storage.nbytes() / len(small)
    for n_step in (1, 3):
        buf.sample(256, n_step=n_step)
        t0, calls = time.perf_counter(), 0
        while time.perf_counter() - t0 < 1.5:
            buf.sample(256, n_step=n_step)
            calls += 1
        out[f"sample_n{n_step}_per_s"] = calls * 256 / (time.perf_counter() - t0)
    from replay.prioritized import PrioritizedEpisodeReplayBuffer

    prio = PrioritizedEpisodeReplayBuffer(capacity_env_steps=1_000_000, seed=0)
    for col in batches:
        prio.add(col)
    batch = prio.sample(256)
    prio.update_priorities(batch["keys"], np.random.default_rng(0).random(256))
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < 1.5:
        batch = prio.sample(256)
        prio.update_priorities(batch["keys"], np.abs(batch["rewards"] - 0.5))
        calls += 1
    out["prioritized_sample_update_per_s"] = calls * 256 / (time.perf_counter() - t0)
    return out


def measure_parquet(part: str, path: str) -> dict[str, float]:
    """Save or restore 1M steps in this (fresh) process; seconds and peak RSS."""
    from replay.buffer import EpisodeReplayBuffer
    from replay.persistence import restore_buffer, save_buffer

    if part == "save":
        buf = EpisodeReplayBuffer(capacity_env_steps=1_000_000, seed=0)
        for k in range(20):
            buf.add(make_columnar(100, 500, f"b{k}", seed=k))
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        t0 = time.perf_counter()
        save_buffer(buf, path)
        seconds = time.perf_counter() - t0
    else:
        base = rss_bytes()
        t0 = time.perf_counter()
        buf = restore_buffer(path)
        seconds = time.perf_counter() - t0
        assert len(buf) == 1_000_000
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "seconds": seconds,
        "peak_rss_mib": peak / 2**20,
        "peak_over_start_mib": (peak - base) / 2**20,
        "file_mib": os.path.getsize(path) / 2**20,
    }


def raw_gym_steps_per_s() -> float:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, 20000).tolist()
    t0 = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    return len(actions) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["buffer", "save", "restore"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    default_rllib = ROOT / ".venv-rllib" / "bin" / "python"
    parser.add_argument("--rllib-python", default=str(default_rllib) if default_rllib.exists() else None)
    args = parser.parse_args()
    if args.part == "buffer":
        print(json.dumps(measure_buffer()))
        return
    if args.part in ("save", "restore"):
        print(json.dumps(measure_parquet(args.part, args.path)))
        return

    raw = raw_gym_steps_per_s()
    ours = run_json([sys.executable, __file__, "--part", "buffer"]) or {}
    path = os.path.join(tempfile.mkdtemp(), "replay_1m.parquet")
    save = run_json([sys.executable, __file__, "--part", "save", "--path", path]) or {}
    restore = run_json([sys.executable, __file__, "--part", "restore", "--path", path]) or {}
    rllib = run_json([args.rllib_python, str(ROOT / "bench" / "rllib_replay.py")]) if args.rllib_python else None
    rl = rllib or {}
    print(f"replay_bench  {time.strftime('%Y-%m-%d')}  RLlib: {'yes' if rllib else 'not installed / not given'}")
    print(f"baseline: raw gymnasium CartPole-v1 env.step: {raw / 1e6:.3f} M steps/s")
    print(f"{'figure':52s} {'ours':>10s} {'RLlib':>10s} {'ours/RLlib':>11s} {'vs raw step':>12s}")

    def row(label: str, mine: float | None, theirs: float | None, unit: str, higher: bool = True) -> None:
        scale = 1e-6 if unit.startswith("M") else 1.0
        ratio = f"{(mine / theirs if higher else theirs / mine):.1f}x" if mine and theirs else "-"
        vs_raw = f"{mine / raw:.1f}x" if mine and unit.endswith("/s") else ""
        fmt = lambda v: f"{v * scale:.3f}" if v is not None else "-"  # noqa: E731
        print(f"{label + ' [' + unit + ']':52s} {fmt(mine):>10s} {fmt(theirs):>10s} {ratio:>11s} {vs_raw:>12s}")

    row("insert 1M steps (50k per add)", ours.get("insert_steps_per_s"), rl.get("add_steps_per_s"), "M steps/s")
    row("insert with eviction (100k-step buffer)", ours.get("insert_evicting_steps_per_s"), None, "M steps/s")
    row(
        "sample B=256, T=1, next_obs",
        ours.get("sample_n1_per_s"),
        rl.get("sample_batch_transitions_per_s"),
        "M transitions/s",
    )
    row("sample B=256, n_step=3", ours.get("sample_n3_per_s"), rl.get("sample_transitions_per_s_n3"), "M transitions/s")
    row(
        "prioritized: sample B=256 + update_priorities",
        ours.get("prioritized_sample_update_per_s"),
        None,
        "M transitions/s",
    )
    row(
        "RSS growth per stored step", ours.get("rss_bytes_per_step"), rl.get("stored_bytes_per_step"), "B", higher=False
    )
    print(
        f"memory per stored step / raw ({RAW_STEP_BYTES} B): "
        f"arrays {ours.get('arrays_bytes_per_step', 0) / RAW_STEP_BYTES:.2f} "
        f"(1M-step buffer), {ours.get('evicting_arrays_bytes_per_step', 0) / RAW_STEP_BYTES:.2f} (evicting 100k); "
        f"RSS growth {ours.get('rss_bytes_per_step', 0) / RAW_STEP_BYTES:.2f}; RLlib RSS growth "
        f"{(rl.get('stored_bytes_per_step') or 0) / RAW_STEP_BYTES:.2f}"
    )
    if save and restore:
        print(
            f"Parquet, 1M steps: save {save['seconds']:.2f} s (peak RSS +{save['peak_over_start_mib']:.0f} MiB over "
            f"the filled buffer), restore {restore['seconds']:.2f} s (peak RSS {restore['peak_rss_mib']:.0f} MiB), "
            f"file {save['file_mib']:.1f} MiB"
        )


if __name__ == "__main__":
    main()
