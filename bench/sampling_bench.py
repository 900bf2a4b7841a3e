"""Sampling benchmark: EnvRunner and EnvRunnerGroup throughput and memory beside their baselines.

    .venv/bin/python bench/sampling_bench.py [--processes 3] [--runners 1,2] [--rllib-python PATH]

Figures, each beside a baseline measured in the same run:

1. One local EnvRunner, CartPole-v1 x 8 sub-envs, MLP 2x64, truncate mode, ``sample_columnar()``
   (what a remote runner ships): env steps/s vs a bare loop of the same SyncVectorEnv stepping
   with the same MLP forward and action sampling.
2. The same with gymnasium's native vector CartPole x 1024 sub-envs.
   (1 and 2 run in ``--processes`` fresh processes, taking turns; best of each: see
   bench/RESULTS.md on this VM's per-process variance.)
3. EnvRunnerGroup of N remote runners (8 sub-envs each) sampling and shipping columnar
   objects to the driver (one request per call, and with ``keep_sampling``): aggregate env
   steps/s vs a raw fleet of N actors that only step a SyncVectorEnv of 8 CartPoles with random
   actions, in the same Ray session; and vs a fleet of N actors running part 1's bare loop (the
   same MLP acting, nothing else), which shows what the policy costs apart from the sampler.
4. RSS of one runner actor vs one raw stepping actor; bytes shipped per step vs raw bytes.
5. RLlib 2.60 (own venv, bench/rllib_sampling.py): local runner x 8, remote runners, RSS.
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
sys.path.insert(0, str(ROOT))


def _bare_loop(num_envs: int, steps: int, mode: str) -> float:
    """Steps/s of the env stepping with the same MLP forward and action sampling, nothing else."""
    import gymnasium as gym

    from ray_sampler.modules.distributions import Categorical
    from ray_sampler.modules.mlp_module import MLPModule

    env = gym.make_vec("CartPole-v1", num_envs, vectorization_mode=mode)
    module = MLPModule(env.single_observation_space, env.single_action_space)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = module.forward_exploration({"obs": obs})
        dist = Categorical(out["action_dist_inputs"])
        actions = dist.sample(rng)
        dist.logp(actions)
        obs, *_ = env.step(actions)
    return num_envs * steps / (time.perf_counter() - t0)


def _runner_loop(num_envs: int, steps: int, mode: str) -> float:
    """Steps/s of one EnvRunner's ``sample_columnar()`` (what a remote runner ships)."""
    from ray_sampler import EnvRunner, EnvRunnerConfig

    runner = EnvRunner(
        EnvRunnerConfig(
            env="CartPole-v1", num_envs_per_env_runner=num_envs, rollout_fragment_length=steps, vectorization_mode=mode
        )
    )
    runner.sample_columnar()  # warm-up
    t0 = time.perf_counter()
    col, _ = runner.sample_columnar()
    return col.num_env_steps / (time.perf_counter() - t0)


def measure_local() -> dict[str, float]:
    """Part 1 and 2 in this process: best of 3 alternating rounds each."""
    out: dict[str, float] = {}
    for key, num_envs, steps, mode in (("x8", 8, 1000, "sync"), ("x1024", 1024, 128, "vector_entry_point")):
        bare, ours = [], []
        for _ in range(3):
            bare.append(_bare_loop(num_envs, steps, mode))
            ours.append(_runner_loop(num_envs, steps, mode))
        out[f"bare_{key}"], out[f"runner_{key}"] = max(bare), max(ours)
    return out


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


class RawStepper:
    """Baseline actor: steps a SyncVectorEnv of CartPoles with random actions, nothing else."""

    def __init__(self, num_envs: int) -> None:
        import gymnasium as gym

        self.env = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="sync")
        self.env.reset(seed=0)
        self.rng = np.random.default_rng(0)

    def run(self, steps: int) -> int:
        for _ in range(steps):
            self.env.step(self.rng.integers(0, 2, self.env.num_envs))
        return steps * self.env.num_envs

    def rss_mib(self) -> float:
        return _rss_mib()


class BareLoop:
    """Second baseline actor: part 1's bare loop (a SyncVectorEnv of 8 CartPoles stepped with the
    runner's MLP forward and action sampling, nothing else), run in the same resumable way."""

    def __init__(self, num_envs: int) -> None:
        import gymnasium as gym

        from ray_sampler.modules.mlp_module import MLPModule

        self.env = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="sync")
        self.module = MLPModule(self.env.single_observation_space, self.env.single_action_space)
        self.obs, _ = self.env.reset(seed=0)
        self.rng = np.random.default_rng(0)

    def run(self, steps: int) -> int:
        from ray_sampler.modules.distributions import Categorical

        for _ in range(steps):
            dist = Categorical(self.module.forward_exploration({"obs": self.obs})["action_dist_inputs"])
            actions = dist.sample(self.rng)
            dist.logp(actions)
            self.obs, *_ = self.env.step(actions)
        return steps * self.env.num_envs


def measure_groups(runner_counts: list[int], seconds: float) -> dict[str, Any]:
    """Part 3 and 4: groups of N runners vs N raw stepping actors, in one Ray session."""
    import ray

    from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig

    ray.init(num_cpus=max(runner_counts) + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    out: dict[str, Any] = {"raw_fleet": {}}
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=8, rollout_fragment_length=256)
    for n in runner_counts:
        raw = [ray.remote(RawStepper).options(num_cpus=1).remote(8) for _ in range(n)]
        ray.get([a.run.remote(10) for a in raw])
        t0, steps = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            steps += sum(ray.get([a.run.remote(256) for a in raw]))
        out["raw_fleet"][n] = steps / (time.perf_counter() - t0)
        if n == runner_counts[0]:
            out["raw_actor_rss_mib"] = ray.get(raw[0].rss_mib.remote())
        for a in raw:
            ray.kill(a)
        # The same fleet acting with the runner's MLP (part 1's bare loop): what the policy costs.
        bare = [ray.remote(BareLoop).options(num_cpus=1).remote(8) for _ in range(n)]
        ray.get([a.run.remote(10) for a in bare])
        t0, steps = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            steps += sum(ray.get([a.run.remote(256) for a in bare]))
        out.setdefault("mlp_fleet", {})[n] = steps / (time.perf_counter() - t0)
        for a in bare:
            ray.kill(a)
        for keep_sampling in (False, True):
            group_config = EnvRunnerGroupConfig(
                num_env_runners=n, num_cpus_per_env_runner=1, keep_sampling=keep_sampling
            )
            with EnvRunnerGroup(config, group_config) as group:
                group.sample_columnar()
                t0, steps, sample = time.perf_counter(), 0, None
                while time.perf_counter() - t0 < seconds:
                    for col, metrics in group.sample_columnar():
                        steps += metrics.num_env_steps
                        sample = col if col is not None else sample
                key = "group_keep_sampling" if keep_sampling else "group"
                out.setdefault(key, {})[n] = steps / (time.perf_counter() - t0)
                if n == runner_counts[0] and not keep_sampling:
                    extra = sum(v.nbytes for v in sample.data.extra_model_outputs.values())
                    raw_bytes = sample.raw_step_nbytes() * sample.num_env_steps
                    out["shipped_over_raw"] = sample.serialized_nbytes() / raw_bytes
                    out["shipped_over_raw_with_model_outputs"] = sample.serialized_nbytes() / (raw_bytes + extra)
                    out["runner_rss_mib"] = ray.get(
                        group.actor(group.worker_indices[0]).__ray_call__.remote(lambda runner: _rss_mib())
                    )
    ray.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["local", "groups"], help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=3, help="fresh processes for the local figures")
    parser.add_argument("--runners", default="1,2", help="group sizes to measure (default 1,2)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per group measurement")
    default_rllib = ROOT / ".venv-rllib" / "bin" / "python"
    parser.add_argument("--rllib-python", default=str(default_rllib) if default_rllib.exists() else None)
    args = parser.parse_args()
    counts = [int(x) for x in args.runners.split(",")]
    if args.part == "local":
        print(json.dumps(measure_local()))
        return
    if args.part == "groups":
        print(json.dumps(measure_groups(counts, args.seconds)))
        return

    runs = [r for r in (run_json([sys.executable, __file__, "--part", "local"]) for _ in range(args.processes)) if r]
    local = {k: max(r[k] for r in runs) for k in runs[0]}
    groups = run_json(
        [sys.executable, __file__, "--part", "groups", "--runners", args.runners, "--seconds", str(args.seconds)]
    )
    rllib = None
    if args.rllib_python:
        rllib = run_json(
            [
                args.rllib_python,
                str(ROOT / "bench" / "rllib_sampling.py"),
                "--remote",
                args.runners,
                "--seconds",
                str(args.seconds),
            ]
        )
    print(
        f"sampling_bench  {time.strftime('%Y-%m-%d')}  local figures: best of {len(runs)} processes; "
        f"RLlib: {'yes' if rllib else 'not installed / not given'}"
    )
    print(f"{'figure':58s} {'ours':>10s} {'baseline':>10s} {'ratio':>7s} {'RLlib':>9s} {'ours/RLlib':>10s}")

    def row(label: str, mine: float, base: float | None, theirs: float | None = None, unit: str = "k/s") -> None:
        scale = 1e-3 if unit == "k/s" else 1.0
        ratio = f"{mine / base:.2f}" if base else "-"
        vs = f"{mine / theirs:.1f}x" if theirs else "-"
        fmt = lambda v: f"{v * scale:.1f}" if v is not None else "-"  # noqa: E731
        print(
            f"{label + ' [' + unit + ']':58s} {fmt(mine):>10s} {fmt(base):>10s} {ratio:>7s} {fmt(theirs):>9s} {vs:>10s}"
        )

    rl = rllib or {}
    row(
        "local runner, CartPole x8, MLP 2x64 (baseline: bare loop)",
        local["runner_x8"],
        local["bare_x8"],
        rl.get("local_steps_per_s"),
    )
    row("local runner, native vector CartPole x1024, MLP", local["runner_x1024"], local["bare_x1024"])
    if groups:
        for n in counts:
            theirs = (rl.get("remote_steps_per_s") or {}).get(str(n))
            row(
                f"group of {n} runner(s) x8, shipped to driver (baseline: raw fleet)",
                groups["group"][str(n)],
                groups["raw_fleet"][str(n)],
                theirs,
            )
            row("  ... keep_sampling=True", groups["group_keep_sampling"][str(n)], groups["raw_fleet"][str(n)], theirs)
            row(
                "  ... keep_sampling=True (baseline: fleet of bare MLP loops)",
                groups["group_keep_sampling"][str(n)],
                groups["mlp_fleet"][str(n)],
            )
            row(
                "  fleet of bare MLP loops (baseline: raw fleet)",
                groups["mlp_fleet"][str(n)],
                groups["raw_fleet"][str(n)],
            )
        row(
            "RSS of one runner actor (baseline: raw stepping actor)",
            groups["runner_rss_mib"],
            groups["raw_actor_rss_mib"],
            rl.get("runner_rss_mib"),
            unit="MiB",
        )
        print(
            f"bytes shipped per step / raw (obs+action+reward+2 flags): {groups['shipped_over_raw']:.3f}; "
            f"/ raw incl. the model outputs shipped: {groups['shipped_over_raw_with_model_outputs']:.3f}"
        )
    if rl.get("errors"):
        print(f"RLlib errors: {rl['errors']}")
    print("ratio = ours / baseline (higher is better for k/s, lower for MiB); ours/RLlib > 1: ours faster (k/s).")


if __name__ == "__main__":
    main()
