"""Soak: ``ray-sampler train-dqn`` for N minutes on a Ray cluster, with faults, and the memory of every part.

    python bench/soak.py --minutes 30 --out soak   # its own `ray start --head`; soak.csv, soak.png
    python bench/soak.py --minutes 5 --address 127.0.0.1:6379 --kill-runner-every-s 0

The job trains with an unreachable target, so it runs until stopped. Every ``--kill-runner-every-s``
an env runner is killed (SIGKILL: the group replaces it) and every ``--kill-replay-every-s`` the
replay actor (restored from its last checkpoint), so the memory is that of a run that recovers.
Every ``--interval-s`` the resident memory (RSS, from /proc: Linux) of the driver (with its local
learner), the env runners (their mean: killed ones are replaced by fresh processes), the replay
actor, learner actors (if any), the GCS and the raylet, and the object store's use, are printed and
written to ``<out>.csv``; ``<out>.png`` plots them over time. At the end, each part's growth after
the ``--warmup-min`` mark: the median of the last ``--tail-min`` minutes over the median of the first
``--tail-min`` minutes after the mark (goal: < 5%; medians, so that a replay actor caught just after
its restore does not decide it), and the slope over the last ``--tail-min`` minutes beside the noise
(the residuals' spread) of that window: an upward slope whose rise over the window exceeds twice the
noise and 1% of the part is flagged. The CSV is written as the soak goes, so a stopped soak keeps
its rows. A JSON line closes the output. ``--from-csv soak.csv`` summarizes a soak again.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
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


def raylet_pid(temp_dir: Path | None) -> int | None:
    pattern = f"raylet.*{temp_dir}" if temp_dir else "raylet/raylet"
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False).stdout.split()
    return int(found[0]) if found else None


def actor_pids(address: str) -> dict[str, list[int]]:
    """Class name -> pids of the alive actors of the runner, replay and learner classes."""
    from ray.util.state import list_actors

    actors = list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=1000, raise_on_missing_output=False)
    found: dict[str, list[int]] = {"EnvRunner": [], "ReplayActor": [], "learners": []}
    for a in actors:
        key = (
            a.class_name
            if a.class_name in ("EnvRunner", "ReplayActor")
            else "learners"
            if "Learner" in a.class_name
            else None
        )
        if key is not None and a.pid:
            found[key].append(a.pid)
    return found


PARTS = ("driver", "runners", "replay", "learners", "gcs", "raylet", "object_store")


def mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def sample(job: subprocess.Popen, temp_dir: Path | None, address: str) -> dict[str, Any]:
    pids = actor_pids(address)
    gcs, raylet = gcs_pid(temp_dir), raylet_pid(temp_dir)
    return {
        "driver": rss_mib(job.pid),
        "runners": mean([rss_mib(pid) for pid in pids["EnvRunner"]]),
        "replay": rss_mib(pids["ReplayActor"][0]) if pids["ReplayActor"] else None,
        "learners": mean([rss_mib(pid) for pid in pids["learners"]]),
        "gcs": rss_mib(gcs) if gcs else None,
        "raylet": rss_mib(raylet) if raylet else None,
        "object_store": object_store_mib(address),
    }


def kill_one(address: str, class_name: str, count: int) -> int | None:
    """SIGKILLs one alive actor of ``class_name`` (the ``count``-th, round robin); its pid, or None."""
    pids = sorted(actor_pids(address)[class_name])
    if not pids:
        return None
    pid = pids[count % len(pids)]
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return pid


def trend(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(slope in MiB per minute, the residuals' standard deviation in MiB) of a least-squares line."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    slope = sum((t - mt) * (v - mv) for t, v in points) / var if var else 0.0
    residuals = [v - (mv + slope * (t - mt)) for t, v in points]
    return slope * 60.0, (sum(r * r for r in residuals) / max(n - 2, 1)) ** 0.5


def plot(rows: list[tuple[float, dict[str, Any]]], path: Path, warmup_min: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for part in PARTS:
        points = [(t / 60, row[part]) for t, row in rows if row[part] is not None]
        if points:
            ax.plot(*zip(*points, strict=True), label=part)
    ax.axvline(warmup_min, color="grey", linestyle=":", label="end of warm-up")
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MiB); object store: in use (MiB)")
    ax.set_title("train-dqn soak with a runner killed every minute and the replay every 5")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the job runs")
    parser.add_argument("--interval-s", type=float, default=10.0, help="seconds between memory samples")
    parser.add_argument("--warmup-min", type=float, default=5.0, help="growth is measured from this mark")
    parser.add_argument("--tail-min", type=float, default=10.0, help="the slope is fitted over these last minutes")
    parser.add_argument("--kill-runner-every-s", type=float, default=60.0, help="0: no runner is killed")
    parser.add_argument("--kill-replay-every-s", type=float, default=300.0, help="0: the replay is never killed")
    parser.add_argument("--out", default="soak", help="<out>.csv and <out>.png are written")
    parser.add_argument("--address", default="", help="attach to this cluster (default: start one here)")
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count() or 2, help="CPUs of the started head")
    parser.add_argument("--from-csv", default="", help="run nothing: summarize (and plot) this soak's CSV again")
    args = parser.parse_args()
    if args.from_csv:
        rows = read_csv(Path(args.from_csv))
        plot(rows, Path(args.from_csv).with_suffix(".png"), args.warmup_min)
        print(json.dumps(summarize(rows, args)))
        return

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

    out = Path(args.out)
    csv_path = out.with_suffix(".csv")
    csv_path.write_text("t_s," + ",".join(PARTS) + "\n")
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
        # A replay killed every few minutes restores from its last checkpoint: one every 30 s.
        cmd += [
            "--replay.checkpoint-path",
            str(log_path.parent / "replay.parquet"),
            "--replay.checkpoint-every-s",
            "30",
        ]
        with open(log_path, "wb") as log:
            job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        print(f"soak: {' '.join(cmd[1:])} for {args.minutes:g} min; memory (RSS, MiB) every {args.interval_s:g} s")
        start = time.monotonic()
        end = start + args.minutes * 60
        next_at = start + args.interval_s
        kills = {"EnvRunner": 0, "ReplayActor": 0}
        every = {"EnvRunner": args.kill_runner_every_s, "ReplayActor": args.kill_replay_every_s}
        kill_at = {name: start + s for name, s in every.items() if s > 0}
        while time.monotonic() < end:
            if job.poll() is not None:
                raise SystemExit(f"the job exited early (rc {job.returncode}): {log_path.read_text()[-2000:]}")
            time.sleep(max(0.0, min(next_at, end, *kill_at.values()) - time.monotonic()))
            for name, at in list(kill_at.items()):
                if time.monotonic() >= at:
                    pid = kill_one(address, name, kills[name])
                    kills[name] += pid is not None
                    kill_at[name] = at + every[name]
                    print(f"t={time.monotonic() - start:6.0f} s  killed {name} pid {pid}", flush=True)
            if time.monotonic() < next_at:
                continue
            row = sample(job, temp_dir, address)
            t = time.monotonic() - start
            rows.append((t, row))
            with open(csv_path, "a") as f:  # row by row: an interrupted soak keeps what it measured
                f.write(csv_row(t, row))
            progress = log_path.read_text().strip().splitlines()[-1:] or [""]
            print(
                f"t={t:6.0f} s  " + "  ".join(f"{p} {fmt(row[p])}" for p in PARTS) + f"  | {progress[0][:50]}",
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
    plot(rows, out.with_suffix(".png"), args.warmup_min)
    result = summarize(rows, args)
    result["kills"] = kills
    files = f"{out.with_suffix('.csv')}, {out.with_suffix('.png')}"
    print(f"killed: {kills['EnvRunner']} runners, {kills['ReplayActor']} replay actors; written: {files}")
    print(json.dumps(result))


def csv_row(t: float, row: dict[str, Any]) -> str:
    return f"{t:.1f}," + ",".join("" if row[p] is None else f"{row[p]:.2f}" for p in PARTS) + "\n"


def read_csv(path: Path) -> list[tuple[float, dict[str, Any]]]:
    """The rows of a soak's CSV, as ``main`` collects them."""
    with open(path, newline="") as f:
        return [(float(r["t_s"]), {p: float(r[p]) if r.get(p) else None for p in PARTS}) for r in csv.DictReader(f)]


def summarize(rows: list[tuple[float, dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    """Prints and returns each part's growth: the median of the last ``tail_min`` minutes over the median
    of the first ``tail_min`` minutes after the warm-up (medians, so that one sample, such as a replay
    actor just restored from its checkpoint, does not decide it), its peak, and the last window's slope."""
    after = [(t, row) for t, row in rows if t >= args.warmup_min * 60]
    if len(after) < 3:
        raise SystemExit("too short to compare: run past --warmup-min")
    first_until = after[0][0] + args.tail_min * 60
    tail_from = rows[-1][0] - args.tail_min * 60
    result: dict[str, Any] = {"minutes": round(rows[-1][0] / 60, 1), "warmup_min": args.warmup_min, "parts": {}}
    print(
        f"growth after {args.warmup_min:g} min of warm-up: median of the last {args.tail_min:g} min / median of "
        f"the first {args.tail_min:g} min (goal < 1.05), peak, and the slope of the last {args.tail_min:g} min:"
    )
    for part in PARTS:
        points = [(t, row[part]) for t, row in after if row[part] is not None]
        if len(points) < 3:
            continue
        first = statistics.median(v for t, v in points if t < first_until)
        tail = [(t, v) for t, v in points if t >= tail_from]
        last = statistics.median(v for _, v in tail)
        slope, noise = trend(tail) if len(tail) >= 3 else (0.0, 0.0)
        rise = slope * args.tail_min
        flagged = part != "object_store" and rise > 2 * noise and rise > 0.01 * last
        result["parts"][part] = {
            "start_mib": round(first, 1), "end_mib": round(last, 1), "ratio": round(last / first, 4) if first else None,
            "max_mib": round(max(v for _, v in points), 1), "tail_slope_mib_per_min": round(slope, 3),
            "tail_noise_mib": round(noise, 2), "tail_rising": flagged,
        }  # fmt: skip
        r = result["parts"][part]
        print(
            f"  {part:12s} {fmt(first)} -> {fmt(last)} MiB  ratio {fmt_ratio(r['ratio'])}  peak {fmt(r['max_mib'])}"
            f"  last {args.tail_min:g} min: {slope:+.2f} MiB/min (noise {noise:.2f} MiB){'  RISING' if flagged else ''}"
        )
    return result


def fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}"


if __name__ == "__main__":
    main()
