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
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from bench_common import run_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NUM_ENVS, ROLLOUT = 8, 64
MAX_VECTORS = 64  # slots in each process's counter file
# Counter file columns (int64): steps made, step faults raised; (float64 file) sum and max of the
# time a sub-env was out of service after a fault (fault raised -> next instance's reset done).
MADE, FAULTS = 0, 1


class BenchStampEnv(gym.Env):
    """obs = [worker, vector, pid, instance, episode, t]; reward = t; episodes last 20..200 steps.

    Raises in ``step()`` with probability ``fault_rate``; counts its steps in ``counter_dir``.
    """

    def __init__(self, worker: int, vector: int, counter_dir: str, fault_rate: float) -> None:
        self.worker, self.vector, self.pid = worker, vector, os.getpid()
        self.instance = secrets.randbits(48)
        self.rng = np.random.default_rng(secrets.randbits(64))
        self.fault_rate = fault_rate
        self.observation_space = gym.spaces.Box(0, 2**62, shape=(6,), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.t, self.length = -1, 0, 0
        self.counts, self.times = _counters(counter_dir)

    def _obs(self) -> np.ndarray:
        return np.array([self.worker, self.vector, self.pid, self.instance, self.episode, self.t], dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode += 1
        self.t, self.length = 0, int(self.rng.integers(20, 201))
        since = self.times[self.vector, 2]
        if since > 0:  # the first reset after a fault in this sub-env slot: it is back
            out = time.monotonic() - since
            self.times[self.vector, 0] += out
            self.times[self.vector, 1] = max(self.times[self.vector, 1], out)
            self.times[self.vector, 2] = 0.0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.fault_rate and self.rng.random() < self.fault_rate:
            self.counts[self.vector, FAULTS] += 1
            self.times[self.vector, 2] = time.monotonic()
            raise RuntimeError(f"injected fault in sub-env {self.worker}/{self.vector}")
        self.t += 1
        self.counts[self.vector, MADE] += 1
        return self._obs(), float(self.t), self.t >= self.length, False, {}


def _counters(counter_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """This process's counter files (created on first use): int64 and float64 [MAX_VECTORS, 3]."""
    out = []
    for name, dtype in (("counts", np.int64), ("times", np.float64)):
        path = os.path.join(counter_dir, f"{os.getpid()}.{name}")
        mode = "r+" if os.path.exists(path) else "w+"
        out.append(np.memmap(path, dtype=dtype, mode=mode, shape=(MAX_VECTORS, 3)))
    return out[0], out[1]


def bench_creator(ctx: Any) -> BenchStampEnv:
    return BenchStampEnv(ctx["worker_index"], ctx["vector_index"], ctx["counter_dir"], ctx["fault_rate"])


def read_counters(counter_dir: str) -> dict[int, dict[str, float]]:
    """Per process id: steps made, faults, out-of-service time sum and max, recoveries seen."""
    out: dict[int, dict[str, float]] = {}
    for name in os.listdir(counter_dir):
        pid, kind = name.split(".")
        if kind != "counts":
            continue
        counts = np.fromfile(os.path.join(counter_dir, name), dtype=np.int64).reshape(MAX_VECTORS, 3)
        times = np.fromfile(os.path.join(counter_dir, f"{pid}.times"), dtype=np.float64).reshape(MAX_VECTORS, 3)
        out[int(pid)] = {
            "made": int(counts[:, MADE].sum()),
            "faults": int(counts[:, FAULTS].sum()),
            "out_s_sum": float(times[:, 0].sum()),
            "out_s_max": float(times[:, 1].max()),
        }
    return out


class Checker:
    """Duplicates and continuity violations over every delivered chunk, by env instance and episode id."""

    def __init__(self) -> None:
        self.last_t: dict[tuple[int, int], int] = {}  # (instance, episode) -> last t delivered
        self.id_owner: dict[str, tuple[int, int]] = {}  # episode id -> (instance, episode)
        self.id_last: dict[str, tuple[int, bool]] = {}  # episode id -> (last t, done)
        self.duplicated = 0
        self.violations: dict[str, int] = {}
        self.delivered_by_pid: dict[int, int] = {}

    def _bad(self, what: str, n: int = 1) -> None:
        self.violations[what] = self.violations.get(what, 0) + n

    def add(self, col: Any) -> None:
        obs = np.asarray(col.data.observations)
        rewards = np.asarray(col.data.rewards)
        obs_off, step_off = col.obs_offsets, col.step_offsets
        for i, id_ in enumerate(col.ids):
            o = obs[obs_off[i] : obs_off[i + 1]]
            n = len(o) - 1
            if n <= 0:
                continue
            inst, ep, t = int(o[0, 3]), int(o[0, 4]), o[:, 5]
            pid = int(o[0, 2])
            self.delivered_by_pid[pid] = self.delivered_by_pid.get(pid, 0) + n
            if (o[:, 3] != inst).any() or (o[:, 4] != ep).any() or (o[:, :3] != o[0, :3]).any():
                self._bad("chunk mixes env instances or episodes")
            if (np.diff(t) != 1).any():
                self._bad("steps not consecutive inside a chunk")
            if int(col.t_started[i]) != int(t[0]):
                self._bad("t_started differs from the stamped t")
            if not np.array_equal(rewards[step_off[i] : step_off[i + 1]], t[1:].astype(rewards.dtype)):
                self._bad("reward does not belong to its step")
            key = (inst, ep)
            prev = self.last_t.get(key)
            if prev is not None and int(t[0]) <= prev:
                self.duplicated += min(n, prev - int(t[0]))
            owner = self.id_owner.setdefault(id_, key)
            if owner != key:
                self._bad("episode id continued by another env instance or episode")
            last = self.id_last.get(id_)
            if last is None:
                if int(t[0]) != 0:
                    self._bad("episode's first chunk delivered does not start at t=0")
            elif last[1]:
                self._bad("chunk after the episode ended")
            elif int(t[0]) > last[0]:
                self._bad("gap between an episode's chunks")
            self.last_t[key] = max(prev or 0, int(t[-1]))
            self.id_last[id_] = (int(t[-1]), bool(col.terminated[i] or col.truncated[i]))


def measure(args: argparse.Namespace, faults: bool) -> dict[str, Any]:
    """One run in this process (its own Ray session)."""
    import ray

    from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig

    counter_dir = tempfile.mkdtemp(prefix="faults-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ray.init(num_cpus=args.runners + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = EnvRunnerConfig(
        env=bench_creator,
        env_config={"counter_dir": counter_dir, "fault_rate": args.env_fault_rate if faults else 0.0},
        num_envs_per_env_runner=NUM_ENVS,
        rollout_fragment_length=ROLLOUT,
        restart_failed_sub_environments=True,
    )
    group_config = EnvRunnerGroupConfig(
        num_env_runners=args.runners,
        num_cpus_per_env_runner=1,
        delay_between_env_runner_restarts_s=0.0,
        validate_env_locally=False,
    )
    checker = Checker()
    dropped_by_pid: dict[int, int] = {}
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
                checker.add(col)
                pid = int(np.asarray(col.data.observations)[0, 2])
                dropped_by_pid[pid] = dropped_by_pid.get(pid, 0) + metrics.num_env_steps_dropped
                last_pid[metrics.worker_index] = pid
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
                checker.add(col)
                pid = int(np.asarray(col.data.observations)[0, 2])
                dropped_by_pid[pid] = dropped_by_pid.get(pid, 0) + metrics.num_env_steps_dropped
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
                checker.add(col)
                pid = int(np.asarray(col.data.observations)[0, 2])
                dropped_by_pid[pid] = dropped_by_pid.get(pid, 0) + metrics.num_env_steps_dropped
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
        pid: c["made"] - checker.delivered_by_pid.get(pid, 0) - dropped_by_pid.get(pid, 0)
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


REPLAY_CHECKPOINT_EVERY = 50_000  # env steps between the replay actor's checkpoints (replay part)


class ReplayContents:
    """Duplicates, continuity violations and gaps over the replay's final contents (``get_state``),
    by the stamps: every stored piece is one run of consecutive steps of one env episode."""

    def __init__(self, col: Any) -> None:
        self.pieces = 0 if col is None else len(col.ids)
        self.steps = 0
        self.violations: dict[str, int] = {}
        ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (instance, episode) -> [(t first, t last)]
        owner: dict[str, tuple[int, int]] = {}  # episode id (a piece's "#t" suffix removed) -> (instance, episode)
        if col is not None:
            obs = np.asarray(col.data.observations)
            rewards = np.asarray(col.data.rewards)
            obs_off, step_off = col.obs_offsets, col.step_offsets
            for i, id_ in enumerate(col.ids):
                o = obs[obs_off[i] : obs_off[i + 1]]
                n = len(o) - 1
                if n <= 0:
                    continue
                self.steps += n
                t = o[:, 5]
                key = (int(o[0, 3]), int(o[0, 4]))
                if (o[:, :5] != o[0, :5]).any():
                    self._bad("piece mixes env instances or episodes")
                if (np.diff(t) != 1).any():
                    self._bad("steps not consecutive inside a piece")
                if int(col.t_started[i]) != int(t[0]):
                    self._bad("t_started differs from the stamped t")
                if not np.array_equal(rewards[step_off[i] : step_off[i + 1]], t[1:].astype(rewards.dtype)):
                    self._bad("reward does not belong to its step")
                if owner.setdefault(id_.split("#")[0], key) != key:
                    self._bad("episode id bound to two env instances or episodes")
                ranges.setdefault(key, []).append((int(t[1]), int(t[-1])))  # a step is named by the t it reached
        self.duplicated = self.gaps = self.heads = 0
        for spans in ranges.values():
            spans.sort()
            self.heads += spans[0][0] - 1  # steps 1 .. first stored - 1: the episode's head is missing
            reach = spans[0][1]
            for lo, hi in spans[1:]:
                if lo <= reach:
                    self.duplicated += min(hi, reach) - lo + 1
                else:
                    self.gaps += lo - reach - 1
                reach = max(reach, hi)
        self.distinct = self.steps - self.duplicated

    def _bad(self, what: str) -> None:
        self.violations[what] = self.violations.get(what, 0) + 1


def measure_replay_part(args: argparse.Namespace) -> dict[str, Any]:
    """The replay run in this process (its own Ray session): see ``measure_replay``."""
    import ray

    from learner.replay_recovery import SupervisedReplay
    from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
    from replay.actor import ReplayConfig

    counter_dir = tempfile.mkdtemp(prefix="faults-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    checkpoint_dir = tempfile.mkdtemp(prefix="faults-bench-replay-")
    ray.init(num_cpus=args.runners + 1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = EnvRunnerConfig(
        env=bench_creator,
        env_config={"counter_dir": counter_dir, "fault_rate": 0.0},
        num_envs_per_env_runner=NUM_ENVS,
        rollout_fragment_length=ROLLOUT,
    )
    group_config = EnvRunnerGroupConfig(
        num_env_runners=args.runners,
        num_cpus_per_env_runner=1,
        delay_between_env_runner_restarts_s=0.0,
        validate_env_locally=False,
    )
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
