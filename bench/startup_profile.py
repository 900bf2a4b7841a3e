"""Startup and memory profile of the main job, ``ray-sampler train --seed 0 --plain``, as a whole process.

Runs the command ``--runs`` times (default 5) as a subprocess with ``RAY_SAMPLER_PHASES=1``, so the
CLI stamps each phase on stderr (``ray_sampler.cli.phases``): imports, checks before the actors
(preflight), Ray started, actors started, first iteration done, loop done; the whole run is the
time to the process's exit. The driver's peak RSS is its own VmHWM (``/proc/<pid>/status``), polled
every 20 ms and stamped at each phase: Ray's gcs_server, raylet and workers are other processes and
do not count. Baselines from the same run, alternated with the job: ``import gymnasium`` alone, and a
bare ``import ray; ray.init(num_cpus=2); ray.get(ray.put(0)); ray.shutdown()`` (Ray's own start, and
the driver RSS Ray alone takes before and after its first ``ray.put``, whose serialization context
imports pyarrow, pydantic and starlette). Prints the medians beside the baselines; the last stdout
line is one JSON object.

    python bench/startup_profile.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("imports", "preflight", "ray_init", "actors", "first_iteration", "loop")
"""The CLI's stamps, in order (``ray_sampler.cli.phases.mark``)."""
_RAY_BARE = (
    "import sys, time; t0 = time.time(); import ray; t1 = time.time(); "
    "ray.init(address='local', num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False); "
    "t2 = time.time(); hwm = lambda: [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
    "h2 = hwm(); ray.get(ray.put(0)); t3 = time.time(); h3 = hwm(); ray.shutdown(); "
    "print(f'ray-sampler-phase ray_import {t1} 0\\nray-sampler-phase ray_init {t2} {h2}\\n'"
    "f'ray-sampler-phase ray_first_put {t3} {h3}', file=sys.stderr)"
)


def _vm_hwm_kib(pid: int) -> int:
    """The process's peak RSS so far, in KiB (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


def run_profiled(cmd: list[str], *, timeout_s: float = 600.0) -> dict[str, Any]:
    """Runs ``cmd`` from the project root: {"rc", "total_s", "peak_rss_mib", "phases": {name: seconds
    since the start}, "phase_rss_mib": {name: the driver's peak RSS at that stamp}}."""
    env = {**os.environ, "RAY_SAMPLER_PHASES": "1"}
    with tempfile.TemporaryFile("w+") as err:
        start = time.time()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _vm_hwm_kib(proc.pid))
            if time.time() - start > timeout_s:
                proc.kill()
            time.sleep(0.02)
        total = time.time() - start
        err.seek(0)
        stderr = err.read()
    phases, phase_rss = {}, {}
    for line in stderr.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ray-sampler-phase":
            phases[parts[1]] = float(parts[2]) - start
            phase_rss[parts[1]] = int(parts[3]) / 1024
            peak = max(peak, int(parts[3]))
    if proc.returncode not in (0, 1):
        print(f"{cmd} failed (rc {proc.returncode}): {stderr.strip()[-600:]}", file=sys.stderr)
    return {
        "rc": proc.returncode,
        "total_s": total,
        "peak_rss_mib": peak / 1024,
        "phases": phases,
        "phase_rss_mib": phase_rss,
    }


def _median(runs: list[dict[str, Any]], key: str, field: str = "phases") -> float | None:
    values = [r[field][key] for r in runs if key in r[field]]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of the job and of each baseline")
    parser.add_argument("--label", default="", help="a name for this build, copied into the JSON")
    args = parser.parse_args()
    exe = Path(sys.executable)
    cli = exe.parent / "ray-sampler"
    jobs, ray_bare, gym_bare = [], [], []
    with tempfile.TemporaryDirectory() as runs_dir:
        for _ in range(args.runs):  # alternated, so the machine's load weighs on all three alike
            gym_bare.append(run_profiled([str(exe), "-c", "import gymnasium"]))
            ray_bare.append(run_profiled([str(exe), "-c", _RAY_BARE]))
            jobs.append(run_profiled([str(cli), "train", "--seed", "0", "--plain", "--runs-dir", runs_dir]))
    job = {p: _median(jobs, p) for p in PHASES}
    job_rss = {p: _median(jobs, p, "phase_rss_mib") for p in PHASES}
    print(f"median of {args.runs} runs, seconds since the process started (driver peak RSS at that point)")
    gym_label = 'python -c "import gymnasium"'
    print(f"  {gym_label:<44} exit {statistics.median(r['total_s'] for r in gym_bare):6.2f} s")
    ray_import, ray_init = _median(ray_bare, "ray_import") or math.nan, _median(ray_bare, "ray_init") or math.nan
    ray_put_rss = _median(ray_bare, "ray_first_put", "phase_rss_mib") or math.nan
    ray_exit = statistics.median(r["total_s"] for r in ray_bare)
    ray_peak = statistics.median(r["peak_rss_mib"] for r in ray_bare)
    print(
        f"  {'bare ray.init(num_cpus=2)':<44} import {ray_import:.2f} s, init {ray_init:.2f} s, "
        f"exit {ray_exit:.2f} s, peak RSS {ray_peak:.0f} MiB ({ray_put_rss:.0f} MiB once a first ray.put made Ray's "
        "serialization context, which imports pyarrow, pydantic and starlette)"
    )
    print("  ray-sampler train --seed 0 --plain:")
    for p in PHASES:
        t, rss = job[p], job_rss[p]
        print(f"    {p:<16} {t or math.nan:6.2f} s  ({rss or math.nan:.0f} MiB)")
    total = statistics.median(r["total_s"] for r in jobs)
    peak = statistics.median(r["peak_rss_mib"] for r in jobs)
    each = ", ".join(f"{r['peak_rss_mib']:.0f}" for r in jobs)
    print(f"    {'exit':<16} {total:6.2f} s  (peak RSS {peak:.0f} MiB; runs: {each})")
    summary = {
        "label": args.label,
        "runs": args.runs,
        "job_phases_s": job,
        "job_phase_rss_mib": job_rss,
        "job_total_s": total,
        "job_peak_rss_mib": peak,
        "job_peak_rss_mib_each": [round(r["peak_rss_mib"], 1) for r in jobs],
        "job_rc": [r["rc"] for r in jobs],
        "ray_bare_import_s": _median(ray_bare, "ray_import"),
        "ray_bare_init_s": _median(ray_bare, "ray_init"),
        "ray_bare_total_s": statistics.median(r["total_s"] for r in ray_bare),
        "ray_bare_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in ray_bare),
        "ray_bare_init_rss_mib": _median(ray_bare, "ray_init", "phase_rss_mib"),
        "ray_bare_first_put_rss_mib": _median(ray_bare, "ray_first_put", "phase_rss_mib"),
        "gymnasium_import_s": statistics.median(r["total_s"] for r in gym_bare),
        "gymnasium_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in gym_bare),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
