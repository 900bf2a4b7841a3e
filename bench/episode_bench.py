"""Episode benchmark: add_env_step, cut, to_numpy and columnar packing, beside raw gymnasium and RLlib.

    .venv/bin/python bench/episode_bench.py [--rllib-python .venv-rllib/bin/python]

Prints one table. Each implementation is measured in ``--processes`` fresh processes, ours and
RLlib's taking turns, and every figure is the best over them: timings of the same code differ
by up to 2x between processes on this VM, so one process per side would compare noise. The
RLlib side runs this same file under RLlib's own interpreter (``--impl rllib``) with the same
data and loops; RLlib is never imported into ours. Raw gymnasium CartPole-v1 stepping is the
baseline every process measures.
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def best_of(fn: Callable[[], Any], *, repeat: int = 5) -> float:
    """Fastest of ``repeat`` runs of ``fn``, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cartpole_data(num_steps: int, seed: int = 0) -> tuple[list, list, list]:
    rng = np.random.default_rng(seed)
    obs = [rng.standard_normal(4).astype(np.float32) for _ in range(num_steps + 1)]
    actions = [int(a) for a in rng.integers(0, 2, num_steps)]
    return obs, actions, [1.0] * num_steps


def build(cls: Any, obs: list, actions: list, rewards: list, extra: bool) -> Any:
    ep = cls()
    ep.add_env_reset(obs[0], {})
    outputs = {"action_logp": np.float32(-0.69), "action_dist_inputs": np.zeros(2, np.float32)} if extra else None
    for i, a in enumerate(actions):
        ep.add_env_step(obs[i + 1], a, rewards[i], {}, terminated=False, truncated=False, extra_model_outputs=outputs)
    return ep


def measure(impl: str) -> dict[str, float]:
    """All figures for one implementation ("ours" or "rllib")."""
    if impl == "rllib":
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    else:
        sys.path.insert(0, str(ROOT))
        from ray_sampler import SingleAgentEpisode, episodes_to_columnar

    out: dict[str, float] = {}
    obs, actions, rewards = cartpole_data(1000)
    for extra in (False, True):
        key = "add_env_step_per_s" + ("_ppo_outputs" if extra else "")
        out[key] = (
            20
            * 1000
            / best_of(lambda extra=extra: [build(SingleAgentEpisode, obs, actions, rewards, extra) for _ in range(20)])
        )

    long = build(SingleAgentEpisode, obs, actions, rewards, False)
    for h in (1, 64):
        out[f"cut_h{h}_us"] = best_of(lambda h=h: [long.cut(len_lookback_buffer=h) for _ in range(200)]) / 200 * 1e6

    def to_numpy_us() -> float:
        fresh = [build(SingleAgentEpisode, obs, actions, rewards, False) for _ in range(20)]
        t0 = time.perf_counter()
        for ep in fresh:
            ep.to_numpy()
        return (time.perf_counter() - t0) / 20 * 1e6

    out["to_numpy_us"] = min(to_numpy_us() for _ in range(5))

    obs5, actions5, rewards5 = cartpole_data(500, seed=1)
    batch = [build(SingleAgentEpisode, obs5, actions5, rewards5, False) for _ in range(100)]
    num_steps = 100 * 500
    if impl == "rllib":
        # RLlib ships (numpy'd) episode objects by pickling them.
        for ep in batch:
            ep.to_numpy()
        out["pack_numpy_steps_per_s"] = num_steps / best_of(lambda: pickle.dumps(batch, protocol=5))
        out["packed_bytes_per_step"] = len(pickle.dumps(batch, protocol=5)) / num_steps
    else:
        out["pack_list_steps_per_s"] = num_steps / best_of(lambda: episodes_to_columnar(batch))
        for ep in batch:
            ep.to_numpy()
        out["pack_numpy_steps_per_s"] = num_steps / best_of(lambda: episodes_to_columnar(batch))
        col = episodes_to_columnar(batch)
        out["packed_bytes_per_step"] = col.serialized_nbytes() / num_steps
        out["raw_bytes_per_step"] = col.raw_step_nbytes()
    return out


def raw_gym_steps_per_s() -> float:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, 20000).tolist()

    def run() -> None:
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                env.reset()

    return len(actions) / best_of(run, repeat=3)


def run_impl(python: str, impl: str) -> dict[str, float] | None:
    """Figures of one fresh process of ``impl``, raw gymnasium stepping included."""
    proc = subprocess.run([python, __file__, "--impl", impl], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        print(f"{impl} run failed (rc {proc.returncode}): {proc.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best(runs: list[dict[str, float]]) -> dict[str, float] | None:
    """Per figure, the best value over processes (highest rate, lowest time or size)."""
    if not runs:
        return None
    lower_is_better = {key for key, *_, higher in ROWS if not higher}
    return {k: (min if k in lower_is_better else max)(r[k] for r in runs) for k in runs[0]}


ROWS = [
    ("add_env_step_per_s", "add_env_step calls/s (CartPole data)", "M/s", 1e-6, True),
    ("add_env_step_per_s_ppo_outputs", "  ... with PPO-like model outputs", "M/s", 1e-6, True),
    ("cut_h1_us", "cut() of 1,000 steps, H=1", "us", 1, False),
    ("cut_h64_us", "cut() of 1,000 steps, H=64", "us", 1, False),
    ("to_numpy_us", "to_numpy() of 1,000 steps", "us", 1, False),
    ("pack_list_steps_per_s", "pack 100 x 500 steps, list-form episodes", "M steps/s", 1e-6, True),
    ("pack_numpy_steps_per_s", "pack 100 x 500 steps, numpy'd episodes", "M steps/s", 1e-6, True),
    ("packed_bytes_per_step", "bytes shipped per step (pickle-5 payload)", "B", 1, False),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", choices=["ours", "rllib"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per implementation (default 3)")
    default_rllib = ROOT / ".venv-rllib" / "bin" / "python"
    parser.add_argument(
        "--rllib-python",
        default=str(default_rllib) if default_rllib.exists() else None,
        help="interpreter of a separate venv with ray[rllib] (default: .venv-rllib if present)",
    )
    args = parser.parse_args()
    if args.impl is not None:
        print(json.dumps({**measure(args.impl), "raw_steps_per_s": raw_gym_steps_per_s()}))
        return

    ours_runs, rllib_runs = [], []
    for _ in range(args.processes):
        ours_runs.append(run_impl(sys.executable, "ours"))
        if args.rllib_python:
            rllib_runs.append(run_impl(args.rllib_python, "rllib"))
    ours, theirs = best([r for r in ours_runs if r]), best([r for r in rllib_runs if r])
    if ours is None:
        raise SystemExit("our benchmark process failed")
    raw = ours["raw_steps_per_s"]
    print(
        f"episode_bench  {time.strftime('%Y-%m-%d')}  python {platform.python_version()}  "
        f"{platform.machine()}  RLlib: {'yes' if theirs else 'not installed / not given'}  "
        f"best of {args.processes} processes per side"
    )
    print(
        f"baseline: raw gymnasium CartPole-v1 env.step: {raw / 1e6:.3f} M steps/s "
        f"({1e6 / raw:.2f} us/step)"
        + (f"; in RLlib's processes {theirs['raw_steps_per_s'] / 1e6:.3f}" if theirs else "")
    )
    print(f"{'figure':44s} {'ours':>10s} {'RLlib':>10s} {'ours/RLlib':>11s} {'vs raw step':>12s}")
    for key, label, unit, scale, higher_is_better in ROWS:
        mine = ours.get(key)
        if mine is None:
            continue
        other = theirs.get(key) if theirs else None
        ratio = ""
        if other:
            ratio = f"{(mine / other if higher_is_better else other / mine):.1f}x"
        vs_raw = ""
        if unit.endswith("/s"):
            vs_raw = f"{mine / raw:.1f}x"
        elif unit == "us":
            vs_raw = f"{mine / (1e6 / raw):.1f} steps"
        fmt = (lambda v, scale=scale: f"{v * scale:.3f}") if scale != 1 else (lambda v: f"{v:.1f}")
        print(
            f"{label + ' [' + unit + ']':44s} {fmt(mine):>10s} {fmt(other) if other else '-':>10s} "
            f"{ratio:>11s} {vs_raw:>12s}"
        )
    print(
        f"raw bytes per step (obs + action + reward + 2 flags): {ours['raw_bytes_per_step']:.0f} B; "
        f"packed / raw = {ours['packed_bytes_per_step'] / ours['raw_bytes_per_step']:.3f}"
    )
    print("ours/RLlib > 1 means ours is better (faster or smaller); 'vs raw step' compares with one env.step.")


if __name__ == "__main__":
    main()
