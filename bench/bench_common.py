"""Helpers shared by the benchmark scripts (run as ``python bench/<name>.py``; no project imports)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_json(cmd: list[str], *, timeout_s: float = 900.0) -> dict[str, Any] | None:
    """Runs ``cmd`` from the project root; the JSON object on its last stdout line, or None (and
    its stderr's tail printed) if it failed."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if proc.returncode != 0:
        print(f"{cmd[1]} failed (rc {proc.returncode}): {proc.stderr.strip()[-600:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def raw_stepping_s(env_id: str, env_steps: int, num_envs: int = 16) -> float:
    """Seconds gymnasium's SyncVectorEnv of ``num_envs`` ``env_id`` takes for ``env_steps`` steps of
    actions drawn beforehand (uniform over the action space): the least any sampler could spend."""
    import gymnasium as gym

    sys.path.insert(0, str(ROOT))
    import ray_sampler.envs  # noqa: F401  registers the project's envs (StatelessCartPole-v1)

    env = gym.make_vec(env_id, num_envs, vectorization_mode="sync")
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(env_steps // num_envs + 1)]
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
    elapsed = time.perf_counter() - t0
    env.close()
    return elapsed


def sync_ppo_to(target: float, seed: int, max_env_steps: int) -> tuple[Any, Any, float]:
    """``train_ppo`` with its defaults (2 runners x 4 CartPole-v1 sub-envs, 1,024 env steps an
    iteration) at ``seed`` until the 100-episode mean reaches ``target`` or ``max_env_steps``, in the
    Ray session already started: (its config, its result, its seconds). The baseline the
    asynchronous loops' benchmarks compare with."""
    import dataclasses

    sys.path.insert(0, str(ROOT))
    from learner.learner import PPOConfig
    from learner.train import PPOTrainingConfig, train_ppo

    cfg = PPOTrainingConfig(target_return=target, max_iterations=max_env_steps // 1024)
    cfg = dataclasses.replace(cfg, env_runner=dataclasses.replace(cfg.env_runner, seed=seed), ppo=PPOConfig(seed=seed))
    t0 = time.perf_counter()
    result = train_ppo(cfg, log=lambda line: None)
    return cfg, result, time.perf_counter() - t0
