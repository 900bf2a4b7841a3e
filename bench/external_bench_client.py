"""One client process of bench/external_bench.py: ``--threads`` CartPole clients (a thread each).

    .venv/bin/python bench/external_bench_client.py --address 127.0.0.1:PORT --threads 10 [--inference local]
        [--runners 2] [--latency] [--bare] [--profile FILE]

Each thread connects its own ``PolicyClient`` (to ``address``'s port plus ``index % runners``) and
plays CartPole-v1 episodes. Once every thread is connected the process prints ``ready`` and reads
one line from stdin, ``START END`` (``time.time()`` values): the threads step from START until END,
then close. It prints one JSON line: the steps each thread took, the seconds, and with ``--latency``
each ``get_action``'s round trip in ms (measured here, around the call).

``--bare`` (with one thread): the baseline of local inference. It connects once only to build the
same ``LocalPolicy`` from the server's weights, closes, and then acts on CartPole with that policy
and no server at all. ``--profile FILE``: cProfile of thread 0's stepping loop, as pstats text.
Imports no Ray.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import threading
import time
from typing import Any

import gymnasium as gym

from ray_sampler.client import PolicyClient


def _address(args: argparse.Namespace, index: int) -> str:
    host, port = args.address.rsplit(":", 1)
    return f"{host}:{int(port) + index % args.runners}"


def _play(client: PolicyClient, env: gym.Env, end: float, seed: int, latencies: list[float] | None) -> int:
    """Episodes through ``client`` until ``end``; the steps taken."""
    steps, episode = 0, 0
    clock = time.perf_counter
    while time.time() < end:
        obs, _ = env.reset(seed=seed * 1000 + episode)
        episode_id = client.start_episode()
        while True:
            t0 = clock()
            action = client.get_action(episode_id, obs)
            if latencies is not None:
                latencies.append((clock() - t0) * 1e3)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            client.log_returns(episode_id, float(reward))
            steps += 1
            if terminated or truncated or time.time() >= end:
                client.end_episode(episode_id, obs, truncated=not terminated)
                break
        episode += 1
    return steps


def _play_bare(policy: Any, env: gym.Env, end: float, seed: int) -> int:
    """The same episodes acted by ``policy`` with no client and no server; the steps taken."""
    steps, episode, total = 0, 0, 0.0
    while time.time() < end:
        obs, _ = env.reset(seed=seed * 1000 + episode)
        while True:
            action, _ = policy.compute(obs)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)  # what the client's log_returns adds up
            steps += 1
            if terminated or truncated or time.time() >= end:
                break
        episode += 1
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="host:port of the first runner")
    parser.add_argument("--runners", type=int, default=1, help="runners on consecutive ports to spread over")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--index", type=int, default=0, help="index of this process's first client (seeds)")
    parser.add_argument("--inference", default="remote", choices=["remote", "local"])
    parser.add_argument("--batch-steps", type=int, default=200)
    parser.add_argument("--latency", action="store_true", help="time each get_action")
    parser.add_argument("--bare", action="store_true", help="local policy, no server (the baseline)")
    parser.add_argument("--profile", default=None, help="write cProfile stats of thread 0 here")
    args = parser.parse_args()

    indices = [args.index + k for k in range(args.threads)]
    clients = [
        PolicyClient(
            _address(args, i), inference="local" if args.bare else args.inference, batch_steps=args.batch_steps,
            seed=i, connect_timeout_s=60.0, reconnect_timeout_s=2.0, timeout_s=120.0,
        )
        for i in indices
    ]  # fmt: skip
    envs = [gym.make("CartPole-v1") for _ in indices]
    policies = [client.policy for client in clients]  # local inference: built from the server's weights
    if args.bare:
        for client in clients:
            client.close()
    print("ready", flush=True)
    start, end = (float(x) for x in sys.stdin.readline().split())

    steps = [0] * len(indices)
    latencies: list[list[float]] = [[] for _ in indices]
    errors: list[str] = []
    profiler = cProfile.Profile() if args.profile else None

    def run(k: int) -> None:
        time.sleep(max(start - time.time(), 0.0))
        if k == 0 and profiler is not None:
            profiler.enable()
        try:
            if args.bare:
                steps[k] = _play_bare(policies[k], envs[k], end, indices[k])
            else:
                steps[k] = _play(clients[k], envs[k], end, indices[k], latencies[k] if args.latency else None)
                clients[k].close()
        except (OSError, ConnectionError, RuntimeError) as e:
            errors.append(f"client {indices[k]}: {type(e).__name__}: {e}")
        finally:
            if k == 0 and profiler is not None:
                profiler.disable()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(indices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if profiler is not None:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(30)
        with open(args.profile, "w") as f:
            f.write(text.getvalue())
    out: dict[str, Any] = {"steps": steps, "seconds": end - start, "errors": errors}
    if args.latency:
        out["latencies_ms"] = [round(x, 3) for per_client in latencies for x in per_client]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
