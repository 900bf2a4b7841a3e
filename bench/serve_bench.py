"""Serving benchmark: a policy behind Ray Serve (examples/serve_policy.py) beside the same policy called in process.

    .venv/bin/python bench/serve_bench.py [--policy RUN_DIR] [--clients 32] [--requests 2000] [--batch-sizes 1 8 32]

Serves the policy on 127.0.0.1 (one replica, ``@serve.batch``) once per ``max_batch_size`` and
sends ``--requests`` ``POST /`` requests of one observation each from ``--clients`` concurrent
clients (one aiohttp session in this process, connections kept alive), after a warm-up of 100:
requests/s and the p50 and p99 latency of a request. The baseline, measured in the same run, is
``Policy.compute_actions`` called in this process on a batch of the same size: the served
requests/s are shown as a fraction of its observations/s. The ``constant`` row is Serve's own
floor on this machine: a deployment that reads the body and answers a constant, with the same
clients. Last, ``compute_actions`` on one observation (the policy's pipelines around the module)
against the module's bare ``forward_inference`` on the same observation (the goal: within 2x).

The policy is a CartPole-v1 MLPModule (64x64, random weights: a trained one costs the same) saved
and loaded as a run leaves it, unless ``--policy`` names a run directory, checkpoint or policy
folder. Clients, proxy and replica share this machine's cores: on 2 cores the clients' own CPU
is part of what limits the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import gymnasium as gym
import numpy as np
import ray
from ray import serve
from starlette.requests import Request

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.serve_policy import Args, start
from ray_sampler import EnvRunnerConfig
from ray_sampler.policy import Policy
from ray_sampler.sampling.runner_build import build_policy

WARM_UP = 100


@serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 1})
class ConstantServer:
    """Serve's own floor: reads the JSON body and answers a constant action, computing nothing."""

    async def __call__(self, request: Request) -> dict[str, Any]:
        await request.json()
        return {"action": 0}


def best_us(fn: Callable[[], Any], *, calls: int, repeat: int = 5) -> float:
    """Microseconds per call of ``fn``: the best of ``repeat`` runs of ``calls`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


async def _load(url: str, bodies: list[dict[str, Any]], clients: int) -> tuple[float, list[float]]:
    """(seconds, latency of each request in seconds) of posting ``bodies`` from ``clients`` workers."""
    latencies: list[float] = []
    pending = iter(bodies)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client() -> None:
            for body in pending:
                t0 = time.perf_counter()
                async with session.post(url, json=body) as response:
                    assert response.status == 200, await response.text()
                    await response.read()
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - t0, latencies


def policy_to_serve(path: str | None) -> Policy:
    """The policy at ``path``; if None, a CartPole-v1 MLPModule saved and loaded back."""
    if path is not None:
        return Policy.from_checkpoint(path)
    env = gym.make("CartPole-v1")
    config = EnvRunnerConfig(env="CartPole-v1")
    policy = build_policy(config, env.observation_space, env.action_space, info={"env": "CartPole-v1"})
    with tempfile.TemporaryDirectory() as tmp:
        return Policy.from_checkpoint(policy.save(Path(tmp) / "policy"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=None, help="a run directory, checkpoint or policy folder")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per batch size (default 2000)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32], help="max_batch_size values")
    parser.add_argument("--batch-wait-timeout-s", type=float, default=0.002, help="serve.batch's wait (default 2 ms)")
    parser.add_argument("--port", type=int, default=18000, help="the HTTP port on 127.0.0.1 (default 18000)")
    args = parser.parse_args()

    policy = policy_to_serve(args.policy)
    rng = np.random.default_rng(0)
    space = policy.observation_space
    obs = rng.uniform(-0.05, 0.05, (args.requests + WARM_UP, *space.shape)).astype(space.dtype)
    bodies = [{"obs": o.tolist()} for o in obs]

    # The baselines, in this process: compute_actions on a batch of each size, and on one observation
    # against the module's own forward_inference (what compute_actions wraps), taking turns.
    in_process = {n: n / best_us(lambda n=n: policy.compute_actions(obs[:n]), calls=max(200, 4000 // n)) * 1e6
                  for n in args.batch_sizes}  # fmt: skip
    one = obs[:1]
    compute_us = forward_us = float("inf")
    for _ in range(10):
        compute_us = min(compute_us, best_us(lambda: policy.compute_actions(one), calls=1000, repeat=1))
        forward_us = min(
            forward_us, best_us(lambda: policy.module.forward_inference({"obs": one}), calls=1000, repeat=1)
        )

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows = []
    try:
        for size in args.batch_sizes:
            url = start(policy, Args(path=Path(args.policy or "."), port=args.port, max_batch_size=size,
                                     batch_wait_timeout_s=args.batch_wait_timeout_s))  # fmt: skip
            asyncio.run(_load(url, bodies[:WARM_UP], args.clients))
            elapsed, latencies = asyncio.run(_load(url, bodies[WARM_UP:], args.clients))
            p50, p99 = np.percentile(latencies, [50, 99]) * 1e3
            rows.append((size, len(latencies) / elapsed, p50, p99))
        serve.run(ConstantServer.bind(), name="policy", route_prefix="/")  # replaces the policy's app
        asyncio.run(_load(url, bodies[:WARM_UP], args.clients))
        elapsed, latencies = asyncio.run(_load(url, bodies[WARM_UP:], args.clients))
        floor = (len(latencies) / elapsed, *np.percentile(latencies, [50, 99]) * 1e3)
    finally:
        serve.shutdown()
        ray.shutdown()

    module = policy.module
    print(
        f"serve_bench  {time.strftime('%Y-%m-%d')}  python {platform.python_version()}  {platform.machine()}  "
        f"ray {ray.__version__}  {os.cpu_count()} cores  {type(module).__name__} "
        f"{getattr(module, 'hidden_sizes', '')} on {policy.info.get('env', policy.observation_space)}"
    )
    print(f"{args.clients} concurrent clients on 127.0.0.1, {args.requests} requests of one observation per row, "
          f"batch wait {args.batch_wait_timeout_s * 1e3:g} ms")  # fmt: skip
    print("baseline: compute_actions in this process on a batch of max_batch_size observations")
    header = ("max_batch_size", "requests/s", "p50 ms", "p99 ms", "baseline obs/s", "served/baseline")
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, (14, 11, 8, 8, 15, 16))))
    for size, rate, p50, p99 in rows:
        base = in_process[size]
        print(f"{size:>14} {rate:>11,.0f} {p50:>8.2f} {p99:>8.2f} {base:>15,.0f} {rate / base:>16.4f}")
    print(
        f"{'constant':>14} {floor[0]:>11,.0f} {floor[1]:>8.2f} {floor[2]:>8.2f}   (Serve's floor: no policy, no batch)"
    )
    print(
        f"one observation: compute_actions {compute_us:.1f} us, module.forward_inference {forward_us:.1f} us: "
        f"{compute_us / forward_us:.2f}x (goal <= 2x: {'met' if compute_us <= 2 * forward_us else 'missed'})"
    )


if __name__ == "__main__":
    main()
