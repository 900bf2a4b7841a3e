"""Scaling on paper: per-runner throughput, and the CPU the driver and the replay actor spend per
env step, so that the runner count where either saturates is a sum.

    .venv/bin/python bench/scaling_bench.py [--runners 2] [--seconds 8] [--num-envs 8]

Every figure is CPU time (``time.process_time`` in the process that spends it: the runner
actors, the driver, the replay actor, read through ``actor.__ray_call__``), not wall time, so it
holds on a machine with fewer cores than processes (this one has 2). For CartPole-v1 with
``--num-envs`` sub-envs per runner, MLP 2x64, truncate mode, 256-step fragments:

1. a runner's CPU seconds per env step it samples and ships (``sample_columnar``);
2. the driver's CPU seconds per env step received, for ``EnvRunnerGroup.sample_columnar()`` one
   request at a time and with ``keep_sampling``, and for ``sample_to_replay`` (the chunks go from
   the runners straight to the replay actor; the driver only gets the acknowledgements: the DQN
   loop's path);
3. the replay actor's CPU seconds per env step added (the same ``sample_to_replay`` calls), and
   per transition of ``sample(32)`` (one DQN batch per call) and of ``sample_batches(32, 16)``
   (what the DQN learners pull: 16 batches per call).

Then the sums: a runner makes ``1 / runner_cpu_per_step`` steps/s on a core of its own; the driver
saturates at ``N = 1 / (driver_cpu_per_step x per_runner_steps_per_s)`` runners, the replay actor at
``N = 1 / (replay_cpu_per_step x per_runner_steps_per_s)`` (adds only; sampling takes its share
at the train ratio). The baseline beside the runner figure, measured in the same run: gymnasium's
SyncVectorEnv of the same sub-envs stepped with random actions in a plain actor (CPU per step).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def cpu_of(actor: Any) -> float:
    import ray

    return float(ray.get(actor.__ray_call__.remote(lambda self: time.process_time())))


class RawStepper:
    """Baseline: a SyncVectorEnv of CartPoles stepped with random actions, nothing else."""

    def __init__(self, num_envs: int) -> None:
        import gymnasium as gym

        self.env = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="sync")
        self.env.reset(seed=0)
        self.rng = np.random.default_rng(0)

    def run(self, steps: int) -> int:
        for _ in range(steps):
            self.env.step(self.rng.integers(0, 2, self.env.num_envs))
        return steps * self.env.num_envs


def per_step(spent: float, steps: int) -> float:
    return spent / max(steps, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0, help="wall seconds per measured path")
    args = parser.parse_args()

    import ray

    from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
    from replay import ReplayConfig, create_replay_actor

    ray.init(num_cpus=args.runners + 2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=args.num_envs, rollout_fragment_length=256)
    out: dict[str, Any] = {"runners": args.runners, "num_envs": args.num_envs}

    raw = ray.remote(RawStepper).options(num_cpus=1).remote(args.num_envs)
    ray.get(raw.run.remote(10))
    c0, steps = cpu_of(raw), ray.get(raw.run.remote(4000))
    out["raw_cpu_per_step"] = per_step(cpu_of(raw) - c0, steps)
    ray.kill(raw)

    def drive(keep_sampling: bool) -> tuple[float, float]:
        """(driver CPU per received step, runner CPU per sampled step) over ``--seconds``."""
        group_config = EnvRunnerGroupConfig(
            num_env_runners=args.runners, num_cpus_per_env_runner=1, keep_sampling=keep_sampling
        )
        with EnvRunnerGroup(config, group_config) as group:
            group.sample_columnar()
            actors = [group.actor(i) for i in group.worker_indices]
            r0, d0, t0, steps = [cpu_of(a) for a in actors], time.process_time(), time.perf_counter(), 0
            while time.perf_counter() - t0 < args.seconds:
                steps += sum(m.num_env_steps for _, m in group.sample_columnar())
            driver = time.process_time() - d0
            runner = sum(cpu_of(a) - r for a, r in zip(actors, r0, strict=True))
        return per_step(driver, steps), per_step(runner, steps)

    out["driver_cpu_per_step"], out["runner_cpu_per_step"] = drive(False)
    out["driver_cpu_per_step_keep_sampling"], out["runner_cpu_per_step_keep_sampling"] = drive(True)

    replay = create_replay_actor(ReplayConfig(capacity_env_steps=500_000), num_cpus=1)
    group_config = EnvRunnerGroupConfig(num_env_runners=args.runners, num_cpus_per_env_runner=1)
    with EnvRunnerGroup(config, group_config) as group:
        group.sample_to_replay(replay)
        q0, d0, t0, steps = cpu_of(replay), time.process_time(), time.perf_counter(), 0
        while time.perf_counter() - t0 < args.seconds:
            steps += sum(m.num_env_steps for m in group.sample_to_replay(replay))
        out["driver_cpu_per_step_to_replay"] = per_step(time.process_time() - d0, steps)
        out["replay_cpu_per_added_step"] = per_step(cpu_of(replay) - q0, steps)
    q0, sampled = cpu_of(replay), 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds / 2:
        refs = [replay.sample.remote(32) for _ in range(50)]
        sampled += sum(len(b["rewards"]) for b in ray.get(refs))
    out["replay_cpu_per_sampled_transition"] = per_step(cpu_of(replay) - q0, sampled)
    q0, sampled = cpu_of(replay), 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds / 2:  # the learners' pull: many batches per call
        refs = [replay.sample_batches.remote(32, 16) for _ in range(10)]
        sampled += sum(32 * len(batches) for batches in ray.get(refs))
    out["replay_cpu_per_batched_transition"] = per_step(cpu_of(replay) - q0, sampled)
    ray.shutdown()

    per_runner = 1.0 / out["runner_cpu_per_step_keep_sampling"]
    out["per_runner_steps_per_s"] = per_runner
    rows = [
        ("sample_columnar(), one request per call", out["driver_cpu_per_step"], None),
        ("sample_columnar(), keep_sampling", out["driver_cpu_per_step_keep_sampling"], None),
        ("sample_to_replay() (DQN's path)", out["driver_cpu_per_step_to_replay"], out["replay_cpu_per_added_step"]),
    ]
    print(f"scaling_bench  {time.strftime('%Y-%m-%d %H:%M')}  CartPole-v1 x{args.num_envs} per runner, MLP 2x64, "
          f"{args.runners} runners measured; CPU time, not wall")  # fmt: skip
    raw_rate = 1.0 / out["raw_cpu_per_step"]
    print(f"raw stepping (baseline), steps/s per core:  {raw_rate:>10,.0f}")
    print(f"one runner, steps/s per core:               {per_runner:>10,.0f}   ({per_runner / raw_rate:.2f} x raw)")
    print(
        f"replay CPU per sampled transition: sample(32) {out['replay_cpu_per_sampled_transition'] * 1e6:.2f} us, "
        f"sample_batches(32, 16) {out['replay_cpu_per_batched_transition'] * 1e6:.2f} us"
    )
    print(f"{'path':<42}{'driver us/step':>16}{'driver saturates at N':>24}{'replay us/step':>16}{'replay at N':>13}")
    sums = {}
    for name, driver, replay_cpu in rows:
        n_driver = 1.0 / (driver * per_runner)
        n_replay = 1.0 / (replay_cpu * per_runner) if replay_cpu else None
        sums[name] = {"driver_saturates_at": n_driver, "replay_saturates_at": n_replay}
        replay_text = f"{replay_cpu * 1e6:>16.2f}{n_replay:>13.1f}" if replay_cpu else f"{'-':>16}{'-':>13}"
        print(f"{name:<42}{driver * 1e6:>16.2f}{n_driver:>24.1f}{replay_text}")
    out["saturation"] = sums
    print(json.dumps(out))


if __name__ == "__main__":
    main()
