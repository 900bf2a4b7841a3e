"""The faults benchmark's stamps: the env that writes them (and counts its steps per process, and
raises injected faults) and the checks that read them back from what was delivered or stored."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["BenchStampEnv", "Checker", "ReplayContents", "bench_creator", "read_counters", "stamped_pieces"]

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


def stamped_pieces(col: Any, unit: str) -> Iterator[tuple[int, str, np.ndarray, list[str]]]:
    """Each piece of ``col`` with at least one step: (index, id, its stamps [steps + 1, 6], what its
    stamps say is wrong with it, naming it a ``unit``: "chunk" or "piece")."""
    obs = np.asarray(col.data.observations)
    rewards = np.asarray(col.data.rewards)
    obs_off, step_off = col.obs_offsets, col.step_offsets
    for i, id_ in enumerate(col.ids):
        o = obs[obs_off[i] : obs_off[i + 1]]
        if len(o) <= 1:
            continue
        t = o[:, 5]
        wrong = []
        if (o[:, :5] != o[0, :5]).any():  # worker, vector, pid, instance, episode
            wrong.append(f"{unit} mixes env instances or episodes")
        if (np.diff(t) != 1).any():
            wrong.append(f"steps not consecutive inside a {unit}")
        if int(col.t_started[i]) != int(t[0]):
            wrong.append("t_started differs from the stamped t")
        if not np.array_equal(rewards[step_off[i] : step_off[i + 1]], t[1:].astype(rewards.dtype)):
            wrong.append("reward does not belong to its step")
        yield i, id_, o, wrong


class Checker:
    """Duplicates and continuity violations over every delivered chunk, by env instance and episode id."""

    def __init__(self) -> None:
        self.last_t: dict[tuple[int, int], int] = {}  # (instance, episode) -> last t delivered
        self.id_owner: dict[str, tuple[int, int]] = {}  # episode id -> (instance, episode)
        self.id_last: dict[str, tuple[int, bool]] = {}  # episode id -> (last t, done)
        self.duplicated = 0
        self.violations: dict[str, int] = {}
        self.delivered_by_pid: dict[int, int] = {}
        self.dropped_by_pid: dict[int, int] = {}  # in answers whose chunks carry the pid

    def _bad(self, what: str, n: int = 1) -> None:
        self.violations[what] = self.violations.get(what, 0) + n

    def add(self, col: Any, num_env_steps_dropped: int) -> int:
        """Checks ``col`` (one runner's answer, with ``num_env_steps_dropped`` by that call) and counts
        it for the runner process that stamped it; returns that process's pid."""
        pid = int(np.asarray(col.data.observations)[0, 2])
        self.dropped_by_pid[pid] = self.dropped_by_pid.get(pid, 0) + num_env_steps_dropped
        for i, id_, o, wrong in stamped_pieces(col, "chunk"):
            n = len(o) - 1
            inst, ep, t = int(o[0, 3]), int(o[0, 4]), o[:, 5]
            stamped_pid = int(o[0, 2])
            self.delivered_by_pid[stamped_pid] = self.delivered_by_pid.get(stamped_pid, 0) + n
            for what in wrong:
                self._bad(what)
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
        return pid


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
            for _, id_, o, wrong in stamped_pieces(col, "piece"):
                self.steps += len(o) - 1
                t = o[:, 5]
                key = (int(o[0, 3]), int(o[0, 4]))
                for what in wrong:
                    self._bad(what)
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
