"""Replay with large observations: peak RSS while adding 84x84 uint8 frames, and add speed, beside RLlib.

    .venv/bin/python bench/replay_frames_bench.py [--rllib-python .venv-rllib/bin/python]
                                                  [--steps 50000] [--evict-capacity 20000]

Data: episodes of 500 steps of random 84x84 uint8 frames (one frame: 7,056 B), int64 actions,
float64 rewards, shipped 2 episodes (1,000 steps) per ``add``; every batch is built fresh, then
dropped after its add (as a runner's shipment is). RLlib's side (bench/rllib_replay.py
``--frames``, its own interpreter) adds the same shapes as numpy'd SingleAgentEpisodes to its
EpisodeReplayBuffer. Each side runs in a fresh process per phase:
- fill: a ``--steps``-step buffer filled to the brim; the ratio at fill levels 10/25/50/75/100 %;
- evict: a ``--evict-capacity``-step buffer fed ``--steps`` steps; the worst ratio once full.
The ratio: peak RSS during one add (VmHWM, reset before each add through /proc/self/clear_refs),
less the RSS before the buffer existed and the incoming batch's bytes, / the stored payload
(stored env steps x (frame + action + reward) = 7,072 B). Add speed: env steps / seconds in
``add``. Also the buffer's own bytes per stored step / one frame, and the worst peak RSS rise
during an add (the incoming batch included) over the capacity's frame bytes (capacity x 7,056 B),
the issue's measure (ours only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import run_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: A/B runs point it at another checkout

FRAME = (84, 84)
FRAME_BYTES = 84 * 84
STEP_BYTES = FRAME_BYTES + 8 + 8
EPISODE_STEPS = 500
EPISODES_PER_ADD = 2
LEVELS = (0.1, 0.25, 0.5, 0.75, 1.0)
_STEPS_PER_ADD = EPISODES_PER_ADD * EPISODE_STEPS


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) * 1024


def make_batch(k: int) -> Any:
    from ray_sampler.data.columnar import ColumnarEpisodes, StepRows

    rng = np.random.default_rng(k)
    n, m = EPISODES_PER_ADD * EPISODE_STEPS, EPISODES_PER_ADD
    empty = np.zeros(0, np.int64)
    return ColumnarEpisodes(
        ids=[f"b{k}-{i}" for i in range(m)],
        t_started=np.zeros(m, np.int64),
        lens=np.full(m, EPISODE_STEPS, np.int64),
        lookback_lens=np.zeros(m, np.int64),
        terminated=np.ones(m, bool),
        truncated=np.zeros(m, bool),
        data=StepRows(
            observations=rng.integers(0, 256, (n + m, *FRAME), np.uint8),
            actions=rng.integers(0, 6, n),
            rewards=np.ones(n),
            extra_model_outputs={},
            info_rows=empty,
            info_values=[],
        ),
        lookback=StepRows(
            observations=np.zeros((0, *FRAME), np.uint8),
            actions=empty,
            rewards=np.zeros(0),
            extra_model_outputs={},
            info_rows=empty,
            info_values=[],
        ),
    )


def batch_nbytes(col: Any) -> int:
    return int(col.data.observations.nbytes + col.data.actions.nbytes + col.data.rewards.nbytes)


def measure(capacity: int, steps: int) -> dict[str, Any]:
    """Feeds ``steps`` steps to a ``capacity``-step buffer; per add: stored steps, ratio, seconds."""
    from replay.buffer import EpisodeReplayBuffer

    base = _status("VmRSS")
    buf = EpisodeReplayBuffer(capacity_env_steps=capacity, seed=0)
    adds, over_capacity = [], 0.0
    for k in range(steps // (EPISODES_PER_ADD * EPISODE_STEPS)):
        col = make_batch(k)
        incoming = batch_nbytes(col)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        t0 = time.perf_counter()
        buf.add(col)
        seconds = time.perf_counter() - t0
        peak = _status("VmHWM")
        del col
        adds.append((len(buf), (peak - base - incoming) / (len(buf) * STEP_BYTES), seconds))
        over_capacity = max(over_capacity, (peak - base) / (capacity * FRAME_BYTES))
    return {
        "adds": adds,
        "peak_over_capacity_frames": over_capacity,
        "nbytes_per_step_over_frame": buf.get_metrics().nbytes / len(buf) / FRAME_BYTES,
    }


def summarize(result: dict[str, Any] | None, capacity: int, steps: int) -> dict[str, Any]:
    """Ratios at the fill levels, the worst ratio while filling and once full, add steps/s."""
    if not result:
        return {}
    adds = result["adds"]
    out: dict[str, Any] = {"levels": {}}
    for level in LEVELS:
        at = next((a for a in adds if a[0] >= level * capacity), None)
        out["levels"][level] = at[1] if at else None
    full = next((i for i, a in enumerate(adds) if a[0] >= capacity), len(adds))
    out["worst_filling"] = max(a[1] for a in adds[: full + 1])
    out["worst_evicting"] = max((a[1] for a in adds[full + 1 :]), default=None)
    filling, evicting = adds[: full + 1], adds[full + 1 :]
    out["add_steps_per_s"] = len(filling) * _STEPS_PER_ADD / sum(a[2] for a in filling)
    out["evicting_add_steps_per_s"] = len(evicting) * _STEPS_PER_ADD / sum(a[2] for a in evicting) if evicting else None
    out["nbytes_per_step_over_frame"] = result.get("nbytes_per_step_over_frame")
    out["peak_over_capacity_frames"] = result.get("peak_over_capacity_frames")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["ours"], help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--evict-capacity", type=int, default=20_000)
    default_rllib = ROOT / ".venv-rllib" / "bin" / "python"
    parser.add_argument("--rllib-python", default=str(default_rllib) if default_rllib.exists() else None)
    args = parser.parse_args()
    if args.part == "ours":
        print(json.dumps(measure(args.capacity, args.steps)))
        return

    phases = {"fill": args.steps, "evict": args.evict_capacity}
    ours, theirs = {}, {}
    for name, capacity in phases.items():
        cmd = ["--capacity", str(capacity), "--steps", str(args.steps)]
        ours[name] = summarize(run_json([sys.executable, __file__, "--part", "ours", *cmd]), capacity, args.steps)
        rllib = (
            run_json([args.rllib_python, str(ROOT / "bench" / "rllib_replay.py"), "--frames", *cmd])
            if args.rllib_python
            else None
        )
        theirs[name] = summarize(rllib, capacity, args.steps)
    print(f"replay_frames_bench  {time.strftime('%Y-%m-%d')}  RLlib: {'yes' if theirs['fill'] else 'no'}")
    print(
        f"84x84 uint8 frames, {EPISODE_STEPS}-step episodes, {EPISODES_PER_ADD * EPISODE_STEPS} steps per add; "
        f"ratio = peak RSS while adding (less the incoming batch) / stored payload ({STEP_BYTES} B per step)"
    )
    print(f"{'figure':52s} {'ours':>10s} {'RLlib':>10s} {'ours/RLlib':>11s}")

    def row(label: str, mine: float | None, other: float | None, fmt: str = "{:.2f}") -> None:
        ratio = f"{mine / other:.2f}" if mine and other else "-"
        show = lambda v: fmt.format(v) if v is not None else "-"  # noqa: E731
        print(f"{label:52s} {show(mine):>10s} {show(other):>10s} {ratio:>11s}")

    fill, rfill = ours["fill"], theirs["fill"]
    for level in LEVELS:
        label = f"RSS peak / stored, {args.steps}-step buffer {level:.0%} full"
        row(label, fill.get("levels", {}).get(level), rfill.get("levels", {}).get(level))
    row("RSS peak / stored, worst while filling", fill.get("worst_filling"), rfill.get("worst_filling"))
    evict, revict = ours["evict"], theirs["evict"]
    label = f"RSS peak / stored, evicting ({args.evict_capacity}-step buffer)"
    row(label, evict.get("worst_evicting"), revict.get("worst_evicting"))
    row("add, filling [k steps/s]", _k(fill.get("add_steps_per_s")), _k(rfill.get("add_steps_per_s")), "{:.1f}")
    row(
        "add, evicting [k steps/s]",
        _k(evict.get("evicting_add_steps_per_s")),
        _k(revict.get("evicting_add_steps_per_s")),
        "{:.1f}",
    )
    row("buffer bytes per stored step / one frame (full)", fill.get("nbytes_per_step_over_frame"), None)
    row("buffer bytes per stored step / one frame (evicting)", evict.get("nbytes_per_step_over_frame"), None)
    row("RSS peak while adding / capacity's frames (filling)", fill.get("peak_over_capacity_frames"), None)
    row("RSS peak while adding / capacity's frames (evicting)", evict.get("peak_over_capacity_frames"), None)


def _k(v: float | None) -> float | None:
    return v / 1e3 if v else None


if __name__ == "__main__":
    main()
