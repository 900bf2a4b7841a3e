"""RLlib sampling benchmark: SingleAgentEnvRunner throughput, local and remote, beside raw gymnasium.

    .venv-rllib/bin/python bench/rllib_sampling.py [--seconds 3] [--remote 1,2]
                                                   [--rollout-fragment-length 128] [--local-calls K]

Runs ONLY under RLlib's own interpreter (.venv-rllib); it imports nothing from this project.
Uses RLlib's new API stack: PPO's default RLModule on CartPole-v1, 8 sub-envs per EnvRunner
(gymnasium SyncVectorEnv, RLlib's default ``gym_env_vectorize_mode``).

Measures:
  local_steps_per_s      a local SingleAgentEnvRunner, repeated ``sample()`` (explore=True),
                         env steps = sum(len(e) for e in episodes)
  remote_steps_per_s     {"N": steps/s} for N remote SingleAgentEnvRunner actors sampling in
                         parallel, episodes ray.get()-ed back to the driver (as PPO does)
  runner_rss_mib         VmRSS of one remote EnvRunner actor process after warm-up
  raw_vector_steps_per_s gymnasium SyncVectorEnv of 8 CartPole-v1, random actions

Prints exactly one JSON object on the last stdout line; everything else goes to stderr. A part
that fails is reported as null and its error appended to "errors".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
import traceback
from typing import Any

NUM_ENVS = 8
ENV_ID = "CartPole-v1"


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def make_config(*, rollout_fragment_length: int, num_env_runners: int):
    """PPOConfig on the new API stack (the 2.60 default), 8 sub-envs per runner."""
    from ray.rllib.algorithms.ppo import PPOConfig

    return (
        PPOConfig()
        .environment(ENV_ID)
        .env_runners(
            # 0 for the local runner: SingleAgentEnvRunner only builds its env on worker
            # index 0 when num_env_runners == 0 (or create_env_on_local_worker=True).
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=NUM_ENVS,
            rollout_fragment_length=rollout_fragment_length,
            num_cpus_per_env_runner=1,
        )
    )


def count_steps(episodes) -> int:
    return sum(len(e) for e in episodes)


def bench_local(args) -> dict:
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = make_config(rollout_fragment_length=args.rollout_fragment_length, num_env_runners=0)
    runner = SingleAgentEnvRunner(config=config)
    try:
        t0 = time.perf_counter()
        warm = count_steps(runner.sample(explore=True))
        warm_s = time.perf_counter() - t0
        log(f"[local] warm-up {warm} steps in {warm_s:.3f}s")
        # K calls: --local-calls if given, else as many as fit in --seconds (at least 3).
        # Time-bounded rather than extrapolated from the warm-up call, which is noisy.
        steps = 0
        calls = 0
        per_call = []  # (steps, seconds) per call, for a noise-robust median rate
        t0 = time.perf_counter()
        while True:
            t1 = time.perf_counter()
            n = count_steps(runner.sample(explore=True))
            per_call.append((n, time.perf_counter() - t1))
            steps += n
            calls += 1
            dt = time.perf_counter() - t0
            if args.local_calls > 0:
                if calls >= args.local_calls:
                    break
            elif dt >= args.seconds and calls >= 3:
                break
    finally:
        runner.stop()
    return {
        "local_steps_per_s": steps / dt,
        "local_steps_per_call": steps / calls,
        "local_steps_per_s_median_call": median_rate(per_call),
        "local_calls": calls,
        "local_seconds": dt,
    }


def median_rate(samples: list[tuple[int, float]]) -> float:
    """Steps/s of the median-duration call: less sensitive to other load on a shared VM."""
    n, secs = sorted(samples, key=lambda x: x[1])[len(samples) // 2]
    return n / secs


def _actor_rss_bytes(runner) -> int:
    """Runs inside the actor (via FaultAwareApply.apply): this process's resident set size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return -1


def _actor_torch_threads(runner) -> int:
    import torch

    return torch.get_num_threads()


def bench_remote(n: int, args) -> dict:
    import ray
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = make_config(rollout_fragment_length=args.rollout_fragment_length, num_env_runners=n)
    actor_cls = ray.remote(num_cpus=1)(SingleAgentEnvRunner)
    # Same kwargs EnvRunnerGroup._make_worker passes that matter here: worker_index >= 1
    # makes the runner build its env, num_workers is the group size.
    actors = [actor_cls.remote(config=config, worker_index=i + 1, num_workers=n) for i in range(n)]
    try:
        t0 = time.perf_counter()
        ray.get([a.ping.remote() for a in actors])
        log(f"[remote {n}] {n} actors up in {time.perf_counter() - t0:.1f}s")
        # Warm-up: two rounds (first call resets envs, pays lazy-init costs).
        for _ in range(2):
            ray.get([a.sample.remote(explore=True) for a in actors])
        rss = ray.get(actors[0].apply.remote(_actor_rss_bytes))
        actor_threads = ray.get(actors[0].apply.remote(_actor_torch_threads))
        steps = 0
        rounds = 0
        per_round = []
        t0 = time.perf_counter()
        while True:
            t1 = time.perf_counter()
            results = ray.get([a.sample.remote(explore=True) for a in actors])
            n_round = sum(count_steps(eps) for eps in results)
            per_round.append((n_round, time.perf_counter() - t1))
            steps += n_round
            rounds += 1
            dt = time.perf_counter() - t0
            if dt >= args.seconds:
                break
    finally:
        for a in actors:
            with contextlib.suppress(Exception):  # a runner that fails to stop is killed with Ray
                ray.get(a.stop.remote(), timeout=30)
            ray.kill(a)
    return {
        "steps_per_s": steps / dt,
        "steps_per_s_median_round": median_rate(per_round),
        "rounds": rounds,
        "steps_per_round": steps / rounds,
        "rss_mib": rss / 2**20 if rss > 0 else None,
        "torch_num_threads_actor": actor_threads,
    }


def bench_raw(args) -> dict:
    import gymnasium as gym
    import numpy as np

    envs = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(NUM_ENVS)])
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    # Pre-draw actions so the RNG isn't timed.
    actions = rng.integers(0, 2, size=(4096, NUM_ENVS))
    for i in range(200):
        envs.step(actions[i % len(actions)])
    steps = 0
    i = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(256):
            envs.step(actions[i % len(actions)])
            i += 1
        steps += 256 * NUM_ENVS
        dt = time.perf_counter() - t0
        if dt >= args.seconds:
            break
    envs.close()
    return {"raw_vector_steps_per_s": steps / dt}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per measurement")
    p.add_argument("--remote", default="1,2", help="comma-separated remote runner counts ('' = none)")
    p.add_argument("--rollout-fragment-length", type=int, default=128)
    p.add_argument(
        "--local-calls",
        type=int,
        default=0,
        help="fixed number of timed local sample() calls (0 = as many as fit in --seconds)",
    )
    args = p.parse_args()
    remote_ns = [int(x) for x in args.remote.split(",") if x.strip()]

    out: dict[str, Any] = {
        "impl": "rllib",
        "env": ENV_ID,
        "num_envs_per_env_runner": NUM_ENVS,
        "rollout_fragment_length": args.rollout_fragment_length,
        "seconds": args.seconds,
        "local_steps_per_s": None,
        "local_steps_per_call": None,
        "remote_steps_per_s": {str(n): None for n in remote_ns},
        "runner_rss_mib": None,
        "raw_vector_steps_per_s": None,
        "errors": [],
    }
    try:
        import gymnasium
        import ray
        import torch

        out["versions"] = {
            "ray": ray.__version__,
            "torch": torch.__version__,
            "gymnasium": gymnasium.__version__,
            "python": platform.python_version(),
        }
        # Driver-process torch intra-op threads (the local runner's); Ray actors run with
        # OMP_NUM_THREADS=num_cpus=1.
        out["torch_num_threads_local"] = torch.get_num_threads()
        out["cpu_count"] = os.cpu_count()
    except Exception as e:
        out["errors"].append(f"versions: {type(e).__name__}: {e}")

    def part(name: str, fn) -> Any:
        try:
            return fn()
        except Exception as e:
            log(f"[{name}] FAILED:\n{traceback.format_exc()}")
            out["errors"].append(f"{name}: {type(e).__name__}: {e}")
            return None

    t_start = time.perf_counter()
    # Other load on the machine skews everything (torch's 2 intra-op threads in the local
    # runner suffer most); record it so a noisy run can be recognised.
    out["loadavg_1m_start"] = os.getloadavg()[0]

    raw = part("raw", lambda: bench_raw(args))
    if raw:
        out.update(raw)

    local = part("local", lambda: bench_local(args))
    if local:
        out.update(local)

    if remote_ns:
        ray_started = False
        try:
            import ray

            ray.init(
                num_cpus=max(remote_ns) + 1,
                include_dashboard=False,
                log_to_driver=False,
                logging_level="ERROR",
            )
            ray_started = True
        except Exception as e:
            log(f"[ray.init] FAILED:\n{traceback.format_exc()}")
            out["errors"].append(f"ray.init: {type(e).__name__}: {e}")
        if ray_started:
            details = {}
            for n in remote_ns:
                res = part(f"remote[{n}]", lambda n=n: bench_remote(n, args))
                if res:
                    out["remote_steps_per_s"][str(n)] = res["steps_per_s"]
                    details[str(n)] = {k: res[k] for k in ("steps_per_s_median_round", "rounds", "steps_per_round")}
                    if out["runner_rss_mib"] is None and res["rss_mib"] is not None:
                        out["runner_rss_mib"] = res["rss_mib"]
                        out["torch_num_threads_actor"] = res["torch_num_threads_actor"]
            out["remote_details"] = details
            try:
                ray.shutdown()
            except Exception as e:
                out["errors"].append(f"ray.shutdown: {type(e).__name__}: {e}")

    out["loadavg_1m_end"] = os.getloadavg()[0]
    out["total_wall_s"] = time.perf_counter() - t_start
    sys.stdout.flush()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
