"""Soak: ``ray-sampler train-dqn`` for N minutes on a Ray cluster, with the memory of every part every 30 s.

    python bench/soak.py --minutes 30            # starts its own `ray start --head` (stopped at the end)
    python bench/soak.py --minutes 5 --address 127.0.0.1:6379

Every ``--interval-s`` it prints the resident memory (RSS, from /proc: Linux) of the driver, each
env runner, the replay actor and the GCS, and the object store's use; at the end, each one's
growth from the ``--baseline-min`` mark (the baseline, measured in the same run) to the end, as a
ratio, and a JSON line. The job trains with an unreachable target, so it runs until stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import ROOT

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def start_head(temp_dir: Path, env: dict[str, str], num_cpus: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [str(BIN / "ray"), "start", "--head", "--block", f"--num-cpus={num_cpus}", f"--port={port}"]
    command += [f"--{flag}={free_port()}" for flag in ("dashboard-port", "ray-client-server-port")]
    command += ["--dashboard-host=127.0.0.1", f"--temp-dir={temp_dir / 'ray'}", "--disable-usage-stats"]
    log = open(temp_dir / "head.log", "wb")  # noqa: SIM115 -- lives as long as the head
    head = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return head, f"127.0.0.1:{port}"


def stop_head(head: subprocess.Popen, temp_dir: Path) -> None:
    os.killpg(head.pid, signal.SIGTERM)
    time.sleep(2)
    found = subprocess.run(["pgrep", "-f", str(temp_dir)], capture_output=True, text=True, check=False).stdout
    for pid in [head.pid, *map(int, found.split())]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    head.wait(timeout=10)


def gcs_pid(temp_dir: Path | None) -> int | None:
    pattern = f"gcs_server.*{temp_dir}" if temp_dir else "gcs_server"
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False).stdout.split()
    return int(found[0]) if found else None


def object_store_mib(address: str) -> float | None:
    from ray._private.internal_api import memory_summary  # noqa: PLC2701 -- `ray memory`'s own summary

    match = re.search(r"Plasma memory usage (\d+) MiB", memory_summary(address=address, stats_only=True))
    return float(match.group(1)) if match else None


def sample(job: subprocess.Popen, temp_dir: Path | None, address: str) -> dict[str, Any]:
    from ray.util.state import list_actors

    actors = list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=1000, raise_on_missing_output=False)
    runners = sorted((a.name or "", a.pid) for a in actors if a.class_name == "EnvRunner")
    replay = [a.pid for a in actors if a.class_name == "ReplayActor"]
    gcs = gcs_pid(temp_dir)
    return {
        "driver": rss_mib(job.pid),
        "runners": [rss_mib(pid) for _, pid in runners],
        "replay": rss_mib(replay[0]) if replay else None,
        "gcs": rss_mib(gcs) if gcs else None,
        "object_store": object_store_mib(address),
    }


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def growth(first: float | None, last: float | None) -> float | None:
    return None if not first or last is None else last / first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the job runs")
    parser.add_argument("--interval-s", type=float, default=30.0, help="seconds between memory lines")
    parser.add_argument("--baseline-min", type=float, default=2.0, help="growth is measured from this mark")
    parser.add_argument("--address", default="", help="attach to this cluster (default: start one here)")
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count() or 2, help="CPUs of the started head")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    head, temp_dir = None, None
    if not args.address:
        temp_dir = Path(tempfile.mkdtemp(prefix="rs-soak-"))
        token = temp_dir / "auth_token"
        token.write_text(secrets.token_hex(32))
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
        head, address = start_head(temp_dir, env, args.num_cpus)
    else:
        address = args.address
    os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH") if k in env})
    import ray  # after the token settings: Ray reads them when it loads

    log_path = Path(tempfile.mkdtemp(prefix="rs-soak-job-")) / "train-dqn.log"
    job = None
    rows: list[tuple[float, dict[str, Any]]] = []
    try:
        host, port = address.rsplit(":", 1)
        for _ in range(120):  # the head takes a few seconds to come up
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        time.sleep(3)
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        cmd = [sys.executable, "-m", "ray_sampler", "train-dqn", "--address", address]
        cmd += ["--target-return", "1e9", "--max-env-steps", str(10**12)]
        with open(log_path, "wb") as log:
            job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        print(f"soak: {' '.join(cmd[1:])} for {args.minutes:g} min; memory (RSS, MiB) every {args.interval_s:g} s")
        start = time.monotonic()
        end = start + args.minutes * 60
        next_at = start + args.interval_s
        while time.monotonic() < end:
            if job.poll() is not None:
                raise SystemExit(f"the job exited early (rc {job.returncode}): {log_path.read_text()[-2000:]}")
            time.sleep(max(0.0, min(next_at, end) - time.monotonic()))
            row = sample(job, temp_dir, address)
            t = time.monotonic() - start
            rows.append((t, row))
            progress = log_path.read_text().strip().splitlines()[-1:] or [""]
            print(
                f"t={t:6.0f} s  driver {fmt(row['driver'])}  runners {', '.join(fmt(r) for r in row['runners'])}  "
                f"replay {fmt(row['replay'])}  gcs {fmt(row['gcs'])}  object store {fmt(row['object_store'])}  "
                f"| {progress[0][:60]}",
                flush=True,
            )
            next_at += args.interval_s
    finally:
        if job is not None and job.poll() is None:
            job.send_signal(signal.SIGINT)
            try:
                job.wait(timeout=30)
            except subprocess.TimeoutExpired:
                job.kill()
        ray.shutdown()
        if head is not None and temp_dir is not None:
            stop_head(head, temp_dir)
            shutil.rmtree(temp_dir, ignore_errors=True)
    baseline = [row for t, row in rows if t >= args.baseline_min * 60]
    if len(baseline) < 2:
        raise SystemExit("too short to compare: run past --baseline-min")
    first, last = baseline[0], baseline[-1]
    result: dict[str, Any] = {"minutes": args.minutes, "baseline_min": args.baseline_min}
    for part in ("driver", "replay", "gcs"):
        result[part] = {"baseline_mib": first[part], "end_mib": last[part], "ratio": growth(first[part], last[part])}
    # The object store holds a few MiB in flight at any moment: its peak says more than a ratio.
    store = [row["object_store"] for row in baseline if row["object_store"] is not None]
    result["object_store"] = {
        "baseline_mib": first["object_store"],
        "end_mib": last["object_store"],
        "max_mib": max(store, default=None),
    }
    result["runners"] = [
        {"baseline_mib": a, "end_mib": b, "ratio": growth(a, b)}
        for a, b in zip(first["runners"], last["runners"], strict=False)
    ]
    print(f"growth from {args.baseline_min:g} min to the end (end / baseline; goal < 1.05):")
    for part in ("driver", "replay", "gcs"):
        r = result[part]
        print(f"  {part:12s} {fmt(r['baseline_mib'])} -> {fmt(r['end_mib'])} MiB  ratio {fmt_ratio(r['ratio'])}")
    r = result["object_store"]
    print(
        f"  object store {fmt(r['baseline_mib'])} -> {fmt(r['end_mib'])} MiB  (at most {fmt(r['max_mib'])} MiB in use)"
    )
    for i, r in enumerate(result["runners"], 1):
        print(f"  runner {i:<5d} {fmt(r['baseline_mib'])} -> {fmt(r['end_mib'])} MiB  ratio {fmt_ratio(r['ratio'])}")
    print(json.dumps(result))


def fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}"


if __name__ == "__main__":
    main()
