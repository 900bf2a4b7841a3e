"""External-simulator benchmark: ExternalEnvRunner with client processes, each figure beside its baseline.

    .venv/bin/python bench/external_bench.py --mode throughput [--seconds 5] [--rounds 2]
    .venv/bin/python bench/external_bench.py --mode local [--seconds 5] [--rounds 2] [--profile FILE]
    .venv/bin/python bench/external_bench.py --mode clients100 [--seconds 5]
    .venv/bin/python bench/external_bench.py --mode learn [--seeds 0,1,2] [--target 450]

Each mode prints a markdown table (figure, ours, baseline, ratio, goal); the clients are processes
of bench/external_bench_client.py, started and connected before a common start time, the
runner (the plain class, no Ray) lives in this process and calls ``sample()`` in a loop.

1. throughput: CartPole-v1 env steps/s through 8 client processes (one client each, server-side
   inference) taken by one ExternalEnvRunner's ``sample(num_timesteps=1000)`` for ``--seconds``,
   vs an in-process EnvRunner with 8 sub-envs (125 x 8 = 1,000 steps a ``sample()``) for as long,
   and vs raw gymnasium stepping (SyncVectorEnv of 8, random actions). Goal: >= 0.5x in-process.
   Best of ``--rounds``.
2. local: one client process with ``inference="local"`` stepping as fast as it can (the runner
   here taking its steps), vs the bare loop: the same LocalPolicy (from the server's weights)
   acting on CartPole in a process of its own with no server. Client-side steps/s; goal >= 0.9x.
   ``--profile FILE``: cProfile of the external client's loop written to FILE.
3. clients100: 100 concurrent clients (10 processes x 10 client threads each, a connection each)
   on ONE runner with server-side inference: steps/s, min/max steps per client (none starved)
   and p50/p99 of ``get_action``'s latency measured in the clients.
4. learn: ``ray-sampler train --env external --external.spaces-from CartPole-v1 --num-env-runners 2``
   (``--env external`` alone starts ONE runner: 2 runners on ports P and P+1, 8 client threads of
   examples/external_cartpole_client.py --runners 2 spread over both) vs ``ray-sampler train --env
   CartPole-v1`` (2 runners x 4 sub-envs), PPO to a 100-episode mean of ``--target``: env steps
   from each run's metrics.csv, per seed. Goal: external <= 1.5x.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import raw_stepping_s

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLIENT = ROOT / "bench" / "external_bench_client.py"
EXAMPLE_CLIENT = ROOT / "examples" / "external_cartpole_client.py"
CHUNK = 1000
"""Env steps a ``sample()`` call asks for (in-process: 125 per sub-env x 8)."""


# ---------------------------------------------------------------- helpers
def _table(rows: list[tuple[str, str, str, str, str]]) -> None:
    print("| figure | ours | baseline | ratio | goal |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(flush=True)


def _external_runner(num_envs: int = 8, port: int = 0) -> Any:
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.external_config import ExternalConfig
    from ray_sampler.sampling.external_runner import ExternalEnvRunner

    config = EnvRunnerConfig(
        env="CartPole-v1",
        rollout_fragment_length=CHUNK // num_envs,
        num_envs_per_env_runner=num_envs,
        external=ExternalConfig(port=port),
    )
    return ExternalEnvRunner(config, worker_index=1)


class Clients:
    """Client processes of bench/external_bench_client.py: started, connected, then run in one window."""

    def __init__(self, address: str, *, processes: int, threads: int, flags: tuple[str, ...] = ()) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(CLIENT), "--address", address, "--threads", str(threads),
                 "--index", str(p * threads), *flags],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            )
            for p in range(processes)
        ]  # fmt: skip
        for proc in self.procs:  # every client connected (and, local inference, holding the weights)
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a client process did not connect (said {line!r})")

    def go(self, seconds: float, delay_s: float = 0.5) -> tuple[float, float]:
        """Tells every process to step from now + ``delay_s`` for ``seconds``; (start, end) as time.time()."""
        start = time.time() + delay_s
        end = start + seconds
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start} {end}\n")
            proc.stdin.flush()
        return start, end

    def results(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        out = []
        for proc in self.procs:
            stdout, _ = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                raise RuntimeError(f"a client process failed (rc {proc.returncode}): {stdout[-500:]}")
            out.append(json.loads(stdout.strip().splitlines()[-1]))
        return out


def _sample_window(runner: Any, start: float, end: float) -> tuple[float, int]:
    """``runner.sample()`` in a loop over [start, end] (time.time()): (env steps/s, steps taken).
    Steps count from start to the last call that returned within the window."""
    time.sleep(max(start - time.time(), 0.0))
    t0 = time.perf_counter() - (time.time() - start)  # the start on the perf_counter clock
    steps, last = 0, t0
    while time.time() < end:
        try:
            episodes = runner.sample(num_timesteps=CHUNK, timeout_s=max(end - time.time(), 0.05))
        except TimeoutError:
            break
        steps += sum(len(e) for e in episodes)
        last = time.perf_counter()
    return steps / max(last - t0, 1e-9), steps


def _in_process_steps_per_s(seconds: float) -> float:
    """An in-process EnvRunner of 8 CartPole sub-envs calling ``sample()`` for ``seconds``."""
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.env_runner import EnvRunner

    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=8, rollout_fragment_length=CHUNK // 8)
    runner = EnvRunner(config)
    runner.sample()  # warm-up
    t0 = time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < seconds:
        steps += sum(len(e) for e in runner.sample())
    rate = steps / (time.perf_counter() - t0)
    runner.stop()
    return rate


# ---------------------------------------------------------------- modes
def mode_throughput(seconds: float, rounds: int) -> None:
    raw, inproc, ext, ext_clients = [], [], [], []
    for _ in range(rounds):
        raw.append(40_000 / raw_stepping_s("CartPole-v1", 40_000, num_envs=8))
        inproc.append(_in_process_steps_per_s(seconds))
        runner = _external_runner()
        try:
            clients = Clients(runner.address(), processes=8, threads=1)
            start, end = clients.go(seconds)
            rate, _ = _sample_window(runner, start, end)
            results = clients.results()
        finally:
            runner.stop()
        ext.append(rate)
        ext_clients.append(sum(sum(r["steps"]) for r in results) / seconds)
        errors = [e for r in results for e in r["errors"]]
        if errors:
            print(f"client errors: {errors[:3]}", file=sys.stderr)
    best_raw, best_in, best_ext = max(raw), max(inproc), max(ext)
    print(f"### throughput: 8 external client processes, server-side inference (best of {rounds} x {seconds:g} s)\n")
    print(f"rounds (k steps/s): raw {_ks(raw)}; in-process {_ks(inproc)}; external {_ks(ext)} "
          f"(client-side count {_ks(ext_clients)})\n")  # fmt: skip
    _table(
        [
            ("external runner, 8 client processes [k steps/s] vs in-process EnvRunner x8",
             f"{best_ext / 1e3:.2f}", f"{best_in / 1e3:.2f}", f"{best_ext / best_in:.2f}",
             f">= 0.5x: {'met' if best_ext / best_in >= 0.5 else 'NOT met'}"),
            ("external runner [k steps/s] vs raw gymnasium SyncVectorEnv x8 (random actions)",
             f"{best_ext / 1e3:.2f}", f"{best_raw / 1e3:.2f}", f"{best_ext / best_raw:.3f}", "-"),
            ("in-process EnvRunner x8 [k steps/s] vs raw gymnasium x8",
             f"{best_in / 1e3:.2f}", f"{best_raw / 1e3:.2f}", f"{best_in / best_raw:.2f}", "-"),
        ]
    )  # fmt: skip


def mode_local(seconds: float, rounds: int, profile: str | None) -> None:
    bare, ext, ext_runner = [], [], []
    runner = _external_runner()
    try:
        for r in range(rounds):
            clients = Clients(runner.address(), processes=1, threads=1, flags=("--bare",))
            clients.go(seconds)
            bare.append(sum(clients.results()[0]["steps"]) / seconds)
            flags: tuple[str, ...] = ("--inference", "local")
            if profile and r == rounds - 1:
                flags += ("--profile", profile)
            clients = Clients(runner.address(), processes=1, threads=1, flags=flags)
            start, end = clients.go(seconds)
            rate, _ = _sample_window(runner, start, end)
            (result,) = clients.results()
            ext.append(sum(result["steps"]) / seconds)
            ext_runner.append(rate)
            if result["errors"]:
                print(f"client errors: {result['errors']}", file=sys.stderr)
    finally:
        runner.stop()
    best_bare, best_ext = max(bare), max(ext)
    print(f"### local: 1 client process, client-side inference (best of {rounds} x {seconds:g} s)\n")
    print(f"rounds (k steps/s): bare loop {_ks(bare)}; external client {_ks(ext)} "
          f"(taken by the runner's sample(): {_ks(ext_runner)})\n")  # fmt: skip
    _table(
        [
            ("client with inference='local' [k steps/s] vs bare LocalPolicy loop (no server)",
             f"{best_ext / 1e3:.2f}", f"{best_bare / 1e3:.2f}", f"{best_ext / best_bare:.2f}",
             f">= 0.9x: {'met' if best_ext / best_bare >= 0.9 else 'NOT met'}"),
        ]
    )  # fmt: skip
    if profile:
        print(f"cProfile of the last external client's loop: {profile}\n")


def mode_clients100(seconds: float) -> None:
    runner = _external_runner()
    try:
        clients = Clients(runner.address(), processes=10, threads=10, flags=("--latency",))
        start, end = clients.go(seconds, delay_s=1.0)
        rate, _ = _sample_window(runner, start, end)
        results = clients.results()
        stats = runner.server.stats.snapshot()
    finally:
        runner.stop()
    steps = [s for r in results for s in r["steps"]]
    latencies = np.array([x for r in results for x in r["latencies_ms"]])
    errors = [e for r in results for e in r["errors"]]
    p50, p99, worst = np.percentile(latencies, [50, 99, 100])
    print(f"### clients100: 10 processes x 10 client threads on one runner, server-side inference ({seconds:g} s)\n")
    print(f"clients that took >= 1 step: {sum(s > 0 for s in steps)}/{len(steps)}; steps per client min "
          f"{min(steps)}, median {int(np.median(steps))}, max {max(steps)}; client errors: {len(errors)}; "
          f"get_action calls timed: {len(latencies)}; server stats: {json.dumps(stats, default=str)}\n")  # fmt: skip
    _table(
        [
            ("env steps/s through one runner [k steps/s]", f"{rate / 1e3:.2f}", "-", "-", "-"),
            ("steps per client, min / max", f"{min(steps)} / {max(steps)}", "-",
             f"{min(steps) / max(steps):.2f}", f"none starved: {'met' if min(steps) > 0 else 'NOT met'}"),
            ("get_action latency p50 / p99 / max [ms] (client-side)", f"{p50:.1f} / {p99:.1f} / {worst:.1f}",
             "-", "-", "-"),
        ]
    )  # fmt: skip
    if errors:
        print(f"client errors: {errors[:5]}\n")


def _free_port_pair() -> int:
    """A port P with P and P + 1 free on 127.0.0.1 (as far as can be told now)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise RuntimeError("no two consecutive free ports")


def _train(flags: list[str], runs_dir: Path, *, clients_port: int | None = None) -> dict[str, Any]:
    """One ``ray-sampler train`` run (with 8 client threads at ``clients_port`` when given): the last
    metrics.csv row, the wall seconds and the output's tail."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [str(ROOT / ".venv" / "bin" / "ray-sampler"), "train", *flags, "--plain", "--runs-dir", str(runs_dir)]
    t0 = time.perf_counter()
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    client = None
    if clients_port is not None:
        client = subprocess.Popen(
            [sys.executable, str(EXAMPLE_CLIENT), "--address", f"127.0.0.1:{clients_port}", "--clients", "8",
             "--runners", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        )  # fmt: skip
    out, _ = server.communicate(timeout=1800)
    wall = time.perf_counter() - t0
    client_lines: list[str] = []
    if client is not None:
        try:
            client_out, _ = client.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            client.kill()
            client_out, _ = client.communicate()
        client_lines = [line for line in client_out.splitlines() if "cannot connect" in line]
    (run_dir,) = runs_dir.glob("*-CartPole-v1-*")
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    return {
        "rc": server.returncode,
        "env_steps": int(last["env_steps"]),
        "return_mean": float(last["return_mean"]),
        "iterations": int(last["iteration"]),
        "wall_s": wall,
        "head": out.strip().splitlines()[:3],
        "clients_not_connected": client_lines,
    }


def mode_learn(seeds: list[int], target: float) -> None:
    rows = []
    work = Path(tempfile.mkdtemp(prefix="external_bench_learn_"))
    try:
        for seed in seeds:
            common = ["--target-return", str(target), "--seed", str(seed)]
            inproc = _train(["--env", "CartPole-v1", *common], work / f"in-{seed}")
            port = _free_port_pair()
            external = _train(
                [
                    "--env",
                    "external",
                    "--external.spaces-from",
                    "CartPole-v1",
                    "--external.port",
                    str(port),
                    "--num-env-runners",
                    "2",
                    *common,
                ],
                work / f"ext-{seed}",
                clients_port=port,
            )
            rows.append((seed, inproc, external))
            for name, r in (("in-process", inproc), ("external", external)):
                print(f"seed {seed} {name}: rc {r['rc']}, {r['env_steps']} env steps, mean return "
                      f"{r['return_mean']:.1f}, {r['iterations']} iterations, {r['wall_s']:.0f} s wall; "
                      f"{r['head']}; clients that could not connect: {len(r['clients_not_connected'])}",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"### learn: PPO to a 100-episode mean of {target:g}, env steps (seeds {','.join(map(str, seeds))})\n")
    print("| seed | in-process env steps | external env steps | ratio | in-process wall s | external wall s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for seed, inproc, external in rows:
        reached = all(r["return_mean"] >= target for r in (inproc, external))
        print(f"| {seed} | {inproc['env_steps']} | {external['env_steps']} | "
              f"{external['env_steps'] / inproc['env_steps']:.2f}{'' if reached else ' (target not reached)'} | "
              f"{inproc['wall_s']:.0f} | {external['wall_s']:.0f} |")  # fmt: skip
    mean_in = float(np.mean([r[1]["env_steps"] for r in rows]))
    mean_ext = float(np.mean([r[2]["env_steps"] for r in rows]))
    ratio = mean_ext / mean_in
    print(f"| mean | {mean_in:.0f} | {mean_ext:.0f} | {ratio:.2f} | | |\n")
    print(f"goal external <= 1.5x in-process env steps (mean over seeds): {'met' if ratio <= 1.5 else 'NOT met'}\n")


def _ks(values: list[float]) -> str:
    return ", ".join(f"{v / 1e3:.2f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", required=True, choices=["throughput", "local", "clients100", "learn"])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement (modes 1-3)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, best of which is shown (throughput, local)")
    parser.add_argument("--profile", default=None, help="local: write the external client's cProfile here")
    parser.add_argument("--seeds", default="0,1,2", help="learn: seeds")
    parser.add_argument("--target", type=float, default=450.0, help="learn: the 100-episode mean to reach")
    args = parser.parse_args()
    print(f"external_bench --mode {args.mode}  {time.strftime('%Y-%m-%d %H:%M:%S')}  ({os.cpu_count()} CPUs)\n")
    if args.mode == "throughput":
        mode_throughput(args.seconds, args.rounds)
    elif args.mode == "local":
        mode_local(args.seconds, args.rounds, args.profile)
    elif args.mode == "clients100":
        mode_clients100(args.seconds)
    else:
        mode_learn([int(s) for s in args.seeds.split(",")], args.target)


if __name__ == "__main__":
    main()
