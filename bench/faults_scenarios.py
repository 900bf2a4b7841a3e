"""The faults benchmark's two runs, each in its own process and Ray session: runner kills with
sub-env faults (or the baseline without them), and replay actor kills (see faults.py)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from typing import Any

import numpy as np
from faults_stamps import Checker, ReplayContents, bench_creator, read_counters

__all__ = ["NUM_ENVS", "REPLAY_CHECKPOINT_EVERY", "ROLLOUT", "measure", "measure_replay_part"]

NUM_ENVS, ROLLOUT = 8, 64
REPLAY_CHECKPOINT_EVERY = 50_000  # env steps between the replay actor's checkpoints (replay part)


def _start_run(args: argparse.Namespace, *, fault_rate: float, restart_sub_envs: bool) -> tuple[str, Any, Any]:
    """Starts this process's Ray session; the env counters' folder and the run's two configs."""
    import ray

    from ray_sampler import EnvRunnerConfig, EnvRunnerGroupConfig

    counter_dir = tempfile.mkdtemp(prefix="faults-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ray.init(num_cpus=args.runners + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = EnvRunnerConfig(
        env=bench_creator,
        env_config={"counter_dir": counter_dir, "fault_rate": fault_rate},
        num_envs_per_env_runner=NUM_ENVS,
        rollout_fragment_length=ROLLOUT,
        restart_failed_sub_environments=restart_sub_envs,
    )
    group_config = EnvRunnerGroupConfig(
        num_env_runners=args.runners,
        num_cpus_per_env_runner=1,
        delay_between_env_runner_restarts_s=0.0,
        validate_env_locally=False,
    )
    return counter_dir, config, group_config


def measure(args: argparse.Namespace, faults: bool) -> dict[str, Any]:
    """One run in this process (its own Ray session)."""
    import ray

    from ray_sampler import EnvRunnerGroup

    counter_dir, config, group_config = _start_run(
        args, fault_rate=args.env_fault_rate if faults else 0.0, restart_sub_envs=True
    )
    checker = Checker()
    delivered = dropped = sub_env_restarts = episodes_dropped = calls = warmup = 0
    timed_dropped = group_restarts = group_dropped = 0  # the timed calls: answers' sums vs GroupMetrics
    last_pid: dict[int, int] = {}  # worker index -> pid of its last delivery
    kills: list[dict[str, Any]] = []  # index, old pid, time; recovered: seconds to its first answer
    healthy_gaps: list[float] = []  # calls that ended with fewer than all runners healthy
    lock = threading.Lock()
    stop = threading.Event()
    with EnvRunnerGroup(config, group_config) as group:
        for col, metrics in group.sample_columnar():  # warm-up (every runner up): counted and checked, not timed
            dropped += metrics.num_env_steps_dropped
            if col is not None and col.num_env_steps:
                warmup += col.num_env_steps
                last_pid[metrics.worker_index] = checker.add(col, metrics.num_env_steps_dropped)
        start = time.monotonic()

        def killer() -> None:
            rng = np.random.default_rng(0)
            span = args.seconds * 0.85
            for k in range(args.kills if faults else 0):
                at = start + args.seconds * 0.05 + span * (k + rng.uniform(0.1, 0.9)) / args.kills
                if stop.wait(max(0.0, at - time.monotonic())):
                    return
                index = group.worker_indices[k % len(group.worker_indices)]
                actor = None
                for _ in range(100):
                    try:
                        actor = group.actor(index)
                        break
                    except KeyError:  # being replaced right now
                        time.sleep(0.05)
                if actor is None:
                    continue
                with lock:
                    kills.append({"index": index, "old_pid": last_pid.get(index), "at": time.monotonic()})
                ray.kill(actor)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        restarts_before = group.metrics.num_env_runner_restarts
        while time.monotonic() - start < args.seconds:
            answers = group.sample_columnar()
            now = time.monotonic()
            calls += 1
            group_restarts += group.metrics.num_sub_env_restarts
            group_dropped += group.metrics.num_env_steps_dropped
            for col, metrics in answers:
                dropped += metrics.num_env_steps_dropped
                timed_dropped += metrics.num_env_steps_dropped
                sub_env_restarts += metrics.num_sub_env_restarts
                episodes_dropped += metrics.num_episodes_dropped_env_error
                if col is None or col.num_env_steps == 0:
                    continue
                delivered += col.num_env_steps
                pid = checker.add(col, metrics.num_env_steps_dropped)
                with lock:
                    last_pid[metrics.worker_index] = pid
                    for kill in kills:
                        if (
                            kill["index"] == metrics.worker_index
                            and "recovered_s" not in kill
                            and pid != kill["old_pid"]
                        ):
                            kill["recovered_s"] = now - kill["at"]
            if group.metrics.num_healthy_env_runners < args.runners:
                healthy_gaps.append(now - start)
        seconds = time.monotonic() - start
        stop.set()
        thread.join()
        leftover = group.collect_in_flight()
        leftover_steps = sum(col.num_env_steps for col, _ in leftover if col is not None)
        for col, metrics in leftover:
            dropped += metrics.num_env_steps_dropped
            if col is not None and col.num_env_steps:
                delivered += col.num_env_steps
                checker.add(col, metrics.num_env_steps_dropped)
        gm = group.metrics
        lost, restarts = gm.num_env_steps_lost, gm.num_env_runner_restarts - restarts_before
        abandoned = gm.num_episodes_abandoned
        live_pids = {last_pid[i] for i in group.worker_indices if i in last_pid}
    ray.shutdown()
    counters = read_counters(counter_dir)
    shutil.rmtree(counter_dir, ignore_errors=True)
    made = sum(c["made"] for c in counters.values())
    # Per process: steps made (its envs' count) minus those delivered (stamped with its pid) and
    # dropped (in answers whose chunks carry its pid). Live runners: must be 0; killed ones: what
    # their last request had made when the kill landed.
    unshipped = {
        pid: c["made"] - checker.delivered_by_pid.get(pid, 0) - checker.dropped_by_pid.get(pid, 0)
        for pid, c in counters.items()
    }
    unshipped_by_killed = sum(n for pid, n in unshipped.items() if pid not in live_pids)
    out_sum = sum(c["out_s_sum"] for c in counters.values())
    env_faults = sum(c["faults"] for c in counters.values())
    recovered = [k["recovered_s"] for k in kills if "recovered_s" in k]
    return {
        "faults": faults,
        "seconds": seconds,
        "calls": calls,
        "made": made,
        "delivered": delivered + warmup,
        "dropped": dropped,
        "lost_counted": lost,
        "unshipped_by_killed": unshipped_by_killed,
        "unshipped_by_live_processes": sum(n for pid, n in unshipped.items() if pid in live_pids),
        "unshipped_max_per_killed_process": max((n for pid, n in unshipped.items() if pid not in live_pids), default=0),
        "made_by_killed": sum(c["made"] for pid, c in counters.items() if pid not in live_pids),
        "duplicated": checker.duplicated,
        "violations": checker.violations,
        "kills": len(kills),
        "restarts": restarts,
        "episodes_abandoned": abandoned,
        "kill_recovery_s": recovered,
        "calls_with_unhealthy_group": len(healthy_gaps),
        "env_faults": env_faults,
        "sub_env_restarts": sub_env_restarts,
        "timed_dropped": timed_dropped,
        "group_sub_env_restarts": group_restarts,
        "group_dropped": group_dropped,
        "episodes_dropped_env_error": episodes_dropped,
        "sub_env_out_of_service_s_mean": out_sum / env_faults if env_faults else None,
        "sub_env_out_of_service_s_max": max((c["out_s_max"] for c in counters.values()), default=0.0),
        "steps_per_s": (delivered - leftover_steps) / seconds,
    }


def measure_replay_part(args: argparse.Namespace) -> dict[str, Any]:
    """The replay run in this process (its own Ray session): see ``measure_replay``."""
    import ray

    from learner.replay_recovery import SupervisedReplay
    from ray_sampler import EnvRunnerGroup
    from replay.actor import ReplayConfig

    checkpoint_dir = tempfile.mkdtemp(prefix="faults-bench-replay-")
    counter_dir, config, group_config = _start_run(args, fault_rate=0.0, restart_sub_envs=False)
    replay_config = ReplayConfig(
        capacity_env_steps=1_000_000_000,  # no eviction: the final contents are everything that survived
        checkpoint_path=os.path.join(checkpoint_dir, "replay.parquet"),
        checkpoint_every_env_steps=REPLAY_CHECKPOINT_EVERY,
    )
    restarts: list[tuple[float, float]] = []  # (restart began: death found, restored actor answered)
    lost_each: list[int] = []  # what each restart added to num_env_steps_lost

    class TimedReplay(SupervisedReplay):
        def restart(self, cause: BaseException | str) -> None:
            t0, lost = time.monotonic(), self.metrics.num_env_steps_lost
            super().restart(cause)
            restarts.append((t0, time.monotonic()))
            lost_each.append(self.metrics.num_env_steps_lost - lost)

    seconds = args.seconds / 2
    kills: list[float] = []
    calls: list[tuple[float, int, bool]] = []  # (end, restarts before the call, acked steps with no restart inside)
    stop = threading.Event()
    replay = TimedReplay(replay_config, timeout_s=60, num_cpus=0)
    held_resent = 0
    with EnvRunnerGroup(config, group_config) as group:
        replay.sample_to_replay(group)  # warm-up (every runner up): acknowledged and checked, not timed
        acked_warmup = replay.metrics.num_env_steps_acknowledged
        start = time.monotonic()

        def killer() -> None:
            rng = np.random.default_rng(1)
            for k in range(2):
                at = start + seconds * (k + 1 + rng.uniform(-0.1, 0.1)) / 3
                if stop.wait(max(0.0, at - time.monotonic())):
                    return
                kills.append(time.monotonic())
                ray.kill(replay.actor)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        answers: list[Any] = []
        while time.monotonic() - start < seconds or (answers and any(m.num_env_steps_held_for_replay for m in answers)):
            before = replay.metrics.num_replay_restarts
            answers = replay.sample_to_replay(group)
            clean = replay.metrics.num_replay_restarts == before
            acked = sum(m.replay.num_env_steps_received for m in answers if m.replay is not None)
            calls.append((time.monotonic(), before, clean and acked > 0))
            if clean:
                held_resent += sum(m.num_env_steps_held_for_replay for m in answers)
        elapsed = time.monotonic() - start
        stop.set()
        thread.join()
        held_at_end = sum(m.num_env_steps_held_for_replay for m in answers)
    state = replay.call("get_state")
    replay_metrics = replay.call("get_metrics")
    sup = replay.metrics
    replay.stop()
    ray.shutdown()
    made = sum(c["made"] for c in read_counters(counter_dir).values())
    shutil.rmtree(counter_dir, ignore_errors=True)
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    contents = ReplayContents(state.episodes)
    first_add = []
    for k, at in enumerate(kills):
        after = [end for end, before, ok in calls if ok and before > k and end > at]
        first_add.append(min(after) - at if after else None)
    return {
        "seconds": elapsed,
        "kill_at_s": [at - start for at in kills],
        "calls": len(calls),
        "restarts": sup.num_replay_restarts,
        "acknowledged": sup.num_env_steps_acknowledged,
        "lost_reported": sup.num_env_steps_lost,
        "lost_each": lost_each,
        "made": made,
        "held_at_end": held_at_end,
        "stored_steps": contents.steps,
        "stored_distinct": contents.distinct,
        "pieces": contents.pieces,
        "evicted": state.num_evicted_env_steps,
        "duplicated": contents.duplicated,
        "violations": contents.violations,
        "missing_gaps": contents.gaps,
        "missing_heads": contents.heads,
        "received_by_last_actor": replay_metrics.num_env_steps_received,
        "duplicate_skipped_by_last_actor": replay_metrics.num_env_steps_duplicate_skipped,
        "checkpoints_by_last_actor": replay_metrics.num_checkpoints,
        "restored_from": replay_metrics.restored_from is not None,
        "detect_s": [t0 - at for at, (t0, _) in zip(kills, restarts)],
        "restore_s": [t1 - t0 for t0, t1 in restarts],
        "first_add_s": first_add,
        "steps_per_s": (sup.num_env_steps_acknowledged - acked_warmup) / elapsed,
    }
