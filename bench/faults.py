"""Fault-tolerance benchmark (issue #7): sampling under runner kills and sub-env failures, beside
the same run without faults.

    .venv/bin/python bench/faults.py [--seconds 60] [--runners 4] [--kills 20] [--env-fault-rate 0.01]
    .venv/bin/python bench/faults.py --short      # smoke run: 8 s, 3 kills

Two fresh processes, back to back, each with its own Ray session: the faulty run, then the
baseline (same config, no kills, no env faults). Each keeps an EnvRunnerGroup of ``--runners``
runners (8 sub-envs each, truncate mode, ``rollout_fragment_length`` 64) sampling to the driver
for ``--seconds``. In the faulty run a thread ``ray.kill``s runner actors (round robin over the
worker indices, at evenly spread times with jitter), and every sub-env step raises with
probability ``--env-fault-rate`` (``restart_failed_sub_environments=True``).

The env stamps every observation ``[worker, vector, pid, instance, episode, t]`` (instance: a
random 48-bit id per env object) and counts the steps it made in a per-process shared-memory
file (/dev/shm, survives a killed actor), so the driver checks exactly, on everything delivered:
no step delivered twice, every chunk continuous inside itself and with its episode's previous
chunk, every episode id bound to one env instance and starting at t=0.

Accounting (steps): ``made`` (counted by the envs) = ``delivered`` (steps in returned chunks)
+ ``dropped`` (``RunnerMetrics.num_env_steps_dropped``) + ``unshipped by killed runners``
(made by a killed process, never delivered nor dropped: measured per process). ``lost``
(``GroupMetrics.num_env_steps_lost``) counts the steps each killed request asked for; it is
printed beside the measured figure (a kill between requests loses nothing; a request killed
half-way had made only part of what it asked for). ``GroupMetrics.num_sub_env_restarts`` and
``num_env_steps_dropped`` (per call), summed over the timed calls, are checked against the runners'
own ``RunnerMetrics``.

Replay actor: a third process (``measure_replay``): runners -> ``SupervisedReplay`` ->
ReplayActor with checkpoints, the actor killed twice; the loss reported is compared with the one
measured from the final contents' stamps; the last actor's ``num_env_steps_duplicate_skipped`` (re-sent
chunks skipped as stored already) is printed.

This file holds the command line and the report; the runs are in faults_scenarios.py, the stamped
env and the checks by its stamps in faults_stamps.py.
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
from faults_scenarios import NUM_ENVS, REPLAY_CHECKPOINT_EVERY, ROLLOUT, measure, measure_replay_part

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure_replay(args: argparse.Namespace) -> dict[str, Any] | None:
    """Replay-actor kills: a third fresh process (``measure_replay_part``). The ``--runners``
    runners (same env, no runner kills, no env faults) send their chunks straight to a ReplayActor
    through ``SupervisedReplay.sample_to_replay`` for ``--seconds / 2``; the actor checkpoints every
    ``REPLAY_CHECKPOINT_EVERY`` env steps (parquet in a temp dir) and is ``ray.kill``ed twice, near
    1/3 and 2/3 of the run. After the run (and one more call while a runner still holds chunks)
    the replay's contents (``get_state``) are checked by their stamps. None if the run failed."""
    flags = ["--seconds", str(args.seconds), "--runners", str(args.runners)]
    return run_json([sys.executable, __file__, "--part", "replay", *flags])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["faults", "baseline", "replay"], help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=60.0, help="sampling time of each run")
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--kills", type=int, default=20, help="runner kills in the faulty run")
    parser.add_argument("--env-fault-rate", type=float, default=0.01, help="probability a sub-env step raises")
    parser.add_argument("--short", action="store_true", help="smoke run: 8 s, 3 kills")
    args = parser.parse_args()
    if args.short:
        args.seconds, args.kills = 8.0, 3
    if args.part == "replay":
        print(json.dumps(measure_replay_part(args)))
        return
    if args.part:
        print(json.dumps(measure(args, args.part == "faults")))
        return
    flags = [
        "--seconds",
        str(args.seconds),
        "--runners",
        str(args.runners),
        "--kills",
        str(args.kills),
        "--env-fault-rate",
        str(args.env_fault_rate),
    ]
    faulty = run_json([sys.executable, __file__, "--part", "faults", *flags])
    base = run_json([sys.executable, __file__, "--part", "baseline", *flags])
    if faulty is None or base is None:
        sys.exit(1)
    report(args, faulty, base, measure_replay(args))


def report(args: argparse.Namespace, f: dict[str, Any], b: dict[str, Any], replay: dict[str, Any] | None) -> None:
    print(
        f"faults bench  {time.strftime('%Y-%m-%d')}  {args.runners} runners x {NUM_ENVS} sub-envs, truncate, "
        f"rollout {ROLLOUT}; {f['seconds']:.1f} s with faults, then {b['seconds']:.1f} s without (baseline)"
    )
    print(
        f"faults injected: {f['kills']} runner kills (ray.kill), sub-env step faults at rate {args.env_fault_rate} "
        f"({f['env_faults']} raised)"
    )
    made = f["made"]
    sums = f["delivered"] + f["dropped"] + f["unshipped_by_killed"] + f["unshipped_by_live_processes"]
    print(f"{'env steps':44s} {'with faults':>12s} {'baseline':>12s}")
    for label, key in (
        ("made (counted by the envs)", "made"),
        ("delivered (steps in returned chunks)", "delivered"),
        ("dropped (RunnerMetrics.num_env_steps_dropped)", "dropped"),
        ("unshipped by killed runners (measured)", "unshipped_by_killed"),
        ("lost (GroupMetrics.num_env_steps_lost)", "lost_counted"),
        ("duplicated", "duplicated"),
    ):
        print(f"{label:44s} {f[key]:>12d} {b[key]:>12d}")
    nviol = sum(f["violations"].values())
    print(f"{'continuity violations':44s} {nviol:>12d} {sum(b['violations'].values()):>12d}  {f['violations'] or ''}")
    held_max = (NUM_ENVS - 1) * args.runners
    live_ok = 0 <= f["unshipped_by_live_processes"] <= held_max and 0 <= b["unshipped_by_live_processes"] <= held_max
    print(
        f"made = delivered + dropped + held by live runners + unshipped by killed runners: {made} = "
        f"{f['delivered']} + {f['dropped']} + {f['unshipped_by_live_processes']} + {f['unshipped_by_killed']} "
        f"({'adds up' if sums == made else 'DOES NOT ADD UP'}). Per runner process, made - delivered - dropped is "
        f"measured from the stamps: live runners hold {f['unshipped_by_live_processes']} (baseline "
        f"{b['unshipped_by_live_processes']}) steps of a vector step made past the request after a sub-env fault, "
        f"shipped by their next call ({'within' if live_ok else 'OVER'} the bound {NUM_ENVS - 1} per runner); the "
        f"{f['restarts']} killed ones made {f['unshipped_by_killed']} steps never shipped (max "
        f"{f['unshipped_max_per_killed_process']} per process; a request is {ROLLOUT * NUM_ENVS} shipped steps "
        f"plus the dropped ones it made up for)"
    )
    print(
        f"lost counted by the group {f['lost_counted']} vs unshipped by killed runners measured "
        f"{f['unshipped_by_killed']}: the group counts each killed request's asked-for steps "
        f"({ROLLOUT * NUM_ENVS}); {f['restarts']} restarts, {f['episodes_abandoned']} episodes abandoned"
    )
    ratio = f["steps_per_s"] / b["steps_per_s"]
    print(
        f"throughput (delivered steps/s): {f['steps_per_s'] / 1e3:.1f}k with faults vs {b['steps_per_s'] / 1e3:.1f}k "
        f"baseline: ratio {ratio:.2f}"
    )
    rec = f["kill_recovery_s"]
    if rec:
        print(
            f"runner kill -> first answer of its replacement: median {np.median(rec):.2f} s, max {max(rec):.2f} s "
            f"({len(rec)} of {f['kills']} kills); sampling calls ending with < {args.runners} healthy runners: "
            f"{f['calls_with_unhealthy_group']} of {f['calls']}"
        )
    if f["env_faults"]:
        print(
            f"sub-env fault -> rebuilt sub-env reset: mean {f['sub_env_out_of_service_s_mean'] * 1e3:.2f} ms, "
            f"max {f['sub_env_out_of_service_s_max'] * 1e3:.1f} ms; {f['sub_env_restarts']} sub-env restarts, "
            f"{f['episodes_dropped_env_error']} episodes dropped, {f['dropped'] / f['env_faults']:.0f} steps dropped "
            f"per fault"
        )
        same = (f["group_sub_env_restarts"], f["group_dropped"]) == (f["sub_env_restarts"], f["timed_dropped"])
        print(
            f"GroupMetrics summed over the timed calls: num_sub_env_restarts {f['group_sub_env_restarts']}, "
            f"num_env_steps_dropped {f['group_dropped']} (the runners' answers: {f['sub_env_restarts']}, "
            f"{f['timed_dropped']}: {'agree' if same else 'DO NOT AGREE'})"
        )
    if replay is None:
        print("replay actor kills: NOT MEASURED: the replay run failed (its stderr is above)")
    else:
        report_replay(args, replay)
    print("ratio = with faults / baseline (higher is better); both runs share 2 cores with Ray and the driver.")


def report_replay(args: argparse.Namespace, r: dict[str, Any]) -> None:
    kills = ", ".join(f"{at:.1f}" for at in r["kill_at_s"])
    print(
        f"replay actor kills: {len(r['kill_at_s'])} (ray.kill at {kills} s of {r['seconds']:.1f} s; "
        f"{args.runners} runners -> SupervisedReplay.sample_to_replay -> ReplayActor, checkpoint every "
        f"{REPLAY_CHECKPOINT_EVERY} env steps; "
        f"no runner kills nor env faults): {r['restarts']} replay restarts, {r['acknowledged']} env steps "
        f"acknowledged ({r['steps_per_s'] / 1e3:.1f}k/s), {r['lost_reported']} lost as reported (num_env_steps_lost)"
    )
    missing_acked = r["acknowledged"] - r["stored_distinct"]
    missing_made = r["made"] - r["held_at_end"] - r["stored_distinct"]
    located = r["missing_gaps"] + r["missing_heads"]
    each = r["lost_each"]
    agree = missing_acked == r["lost_reported"] == missing_made and r["evicted"] == 0
    print(
        f"replay contents after the run: {r['stored_steps']} steps in {r['pieces']} episode pieces, {r['evicted']} "
        f"evicted; acknowledged - stored = {r['acknowledged']} - {r['stored_distinct']} = {missing_acked} missing, "
        f"made by the envs - held by runners - stored = {r['made']} - {r['held_at_end']} - {r['stored_distinct']} = "
        f"{missing_made} ({'agree with' if agree else 'DO NOT AGREE with'} the {r['lost_reported']} reported); "
        f"located by the stamps: {r['missing_gaps']} in gaps inside episodes + {r['missing_heads']} episode heads, "
        f"the other {missing_made - located} after an episode's last stored step (tails: not locatable from contents)"
    )
    if not agree and each:
        print(
            f"why: the reported {r['lost_reported']} is the sum of each restart's figure {each}; a restart's "
            f"figure is acknowledged-so-far - the restored actor's received counter (= the steps it holds), i.e. "
            f"every loss so far, so restart k counts the losses of restarts 1..k-1 again: the last figure "
            f"{each[-1]} is the total ({'= measured' if each[-1] == missing_acked == missing_made else '!= measured'})"
        )
    nviol = sum(r["violations"].values())
    print(
        f"replay contents: duplicated {r['duplicated']}, continuity violations {nviol} {r['violations'] or ''}"
        f"(every piece one run of consecutive steps of one env episode, reward = its t, t_started = its stamp); "
        f"re-sent steps skipped as stored already (num_env_steps_duplicate_skipped, last actor): "
        f"{r['duplicate_skipped_by_last_actor']}"
    )
    first = [s for s in r["first_add_s"] if s is not None]
    print(
        "replay kill -> death found / restored actor answering / first successful add after the restore: "
        + "; ".join(
            f"{d:.2f} / {d + rs:.2f} / {fa if fa is None else round(fa, 2)} s"
            for d, rs, fa in zip(r["detect_s"], r["restore_s"], r["first_add_s"])
        )
        + f" ({len(first)} of {len(r['kill_at_s'])} kills reached a first add; {r['calls']} sampling calls)"
    )


if __name__ == "__main__":
    main()
