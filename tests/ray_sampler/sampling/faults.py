"""Fault injection for the sampling tests: a StampEnv raising on chosen calls, its creators, a dead replay."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from tests.helpers import StampEnv, kill_and_wait

FAULTY_STAMP_ID = "RaySamplerFaultyStamp-v0"


class EnvBoom(RuntimeError):
    """The injected failure."""


@dataclasses.dataclass
class FaultPlan:
    """Which calls raise, and what happened: shared by every instance of every sub-env.

    ``steps``/``resets``: (vector_index, n) raises in that sub-env's n-th ``step()``/``reset()`` call
    (1-based, counted over all its instances); ``p``: each step (and each autoreset, never an
    instance's first reset) raises with that probability, from ``seed``.
    """

    steps: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    resets: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    p: float = 0.0
    seed: int = 0
    num_steps: dict[int, int] = dataclasses.field(default_factory=dict)
    """Step calls so far, by vector index."""
    num_resets: dict[int, int] = dataclasses.field(default_factory=dict)
    num_instances: dict[int, int] = dataclasses.field(default_factory=dict)
    step_faults: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)
    """(vector, episode, t before the step) of every step that raised."""
    num_reset_faults: int = 0
    num_ok_steps: int = 0
    """Steps that happened (did not raise)."""
    live: dict[int, Any] = dataclasses.field(default_factory=dict)
    """The newest instance of each sub-env."""
    snapshots: list[dict[int, tuple[int, int]]] = dataclasses.field(default_factory=list)
    """At each step fault: every sub-env's newest instance's (episode, t)."""

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def new_instance(self, vector: int) -> int:
        self.num_instances[vector] = self.num_instances.get(vector, 0) + 1
        return self.num_instances[vector] - 1


class FaultyStampEnv(StampEnv):
    """StampEnv raising as its plan says; instance k of a sub-env numbers its episodes from 100 k,
    so steps stay distinct across rebuilds."""

    def __init__(self, plan: FaultPlan | None = None, worker: int = 0, vector: int = 0) -> None:
        super().__init__(worker, vector)
        self.plan = plan = plan or FaultPlan()  # none: never raises
        self.episode = 100 * plan.new_instance(vector) - 1
        plan.live[vector] = self
        self.num_resets = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        plan, v = self.plan, self.vector
        plan.num_resets[v] = plan.num_resets.get(v, 0) + 1
        self.num_resets += 1
        if (v, plan.num_resets[v]) in plan.resets or (self.num_resets > 1 and plan.p and plan.rng.random() < plan.p):
            plan.num_reset_faults += 1
            raise EnvBoom(f"reset {plan.num_resets[v]} of sub-env {v}")
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        plan, v = self.plan, self.vector
        plan.num_steps[v] = plan.num_steps.get(v, 0) + 1
        if (v, plan.num_steps[v]) in plan.steps or (plan.p and plan.rng.random() < plan.p):
            plan.step_faults.append((v, self.episode, self.t))
            plan.snapshots.append({u: (env.episode, env.t) for u, env in sorted(plan.live.items())})
            raise EnvBoom(f"step {plan.num_steps[v]} of sub-env {v}")
        plan.num_ok_steps += 1
        return super().step(action)


def faulty_creator(ctx: Any) -> FaultyStampEnv:
    """Creator: a FaultyStampEnv following ``ctx["plan"]``."""
    return FaultyStampEnv(ctx["plan"], ctx["worker_index"], ctx["vector_index"])


def faulty_vector_env(num_envs: int = 1, plan: FaultPlan | None = None, autoreset_mode: str = "NextStep") -> Any:
    """A 'native' vector env of FaultyStampEnvs (gymnasium's SyncVectorEnv: one raising sub-env
    makes the whole step raise)."""
    return gym.vector.SyncVectorEnv(
        [lambda v=v: FaultyStampEnv(plan or FaultPlan(), 0, v) for v in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode(autoreset_mode),
    )


def dead_replay() -> Any:
    """A replay actor handle whose actor has died: every ``add`` raises ``RayActorError`` (needs Ray)."""
    import ray

    @ray.remote(num_cpus=0)
    class Replay:
        def add(self, data: Any) -> None:
            return None

    actor = Replay.remote()
    kill_and_wait(actor)
    return actor


if FAULTY_STAMP_ID not in gym.registry:
    gym.register(
        FAULTY_STAMP_ID,
        entry_point="tests.ray_sampler.sampling.faults:FaultyStampEnv",
        vector_entry_point="tests.ray_sampler.sampling.faults:faulty_vector_env",
    )
