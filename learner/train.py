"""PPO training on a local Ray cluster's runners: the loop behind ``ray-sampler train``.

Each iteration the EnvRunnerGroup samples, the LearnerGroup updates, and the new weights go to
the runners with one ``ray.put``; a line per iteration goes to ``log``. Ray must be running.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from learner.learner import PPOConfig
from learner.learner_group import LearnerGroup
from ray_sampler.errors import ConfigError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup

__all__ = ["PPOTrainingConfig", "ReturnTracker", "env_spaces", "train_ppo"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOTrainingConfig:
    """Knobs of ``ray-sampler train``."""

    env: str = "CartPole-v1"
    """Gymnasium id to train on."""
    num_env_runners: int = 2
    """Remote env runners."""
    num_envs_per_env_runner: int = 8
    """Sub-envs per runner."""
    rollout_fragment_length: int = 128
    """Steps per sub-env per iteration."""
    num_learners: int = 0
    """Learner actors (0: one local learner)."""
    lr: float = 1e-3
    """Adam learning rate."""
    max_iterations: int = 60
    """Stop after this many iterations."""
    target_return: float = 450.0
    """Stop once the mean return of the last 20 finished episodes reaches this."""
    seed: int = 0
    """Seed of the envs, the policy and the minibatch shuffling."""

    def __post_init__(self) -> None:
        for name in ("num_env_runners", "max_iterations"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"'{name}' must be an int >= 1 (got {value!r})")


def env_spaces(env: str) -> tuple[gym.Space, gym.Space]:
    """The (observation, action) spaces of gymnasium id ``env``."""
    probe = gym.make(env)
    spaces = (probe.observation_space, probe.action_space)
    probe.close()
    return spaces


class ReturnTracker:
    """The mean return of the last 20 finished episodes, and the stop rule on it."""

    def __init__(self, target_return: float, window: int = 20) -> None:
        self.target_return = target_return
        self.returns: deque[float] = deque(maxlen=window)
        self.start = time.perf_counter()

    def add(self, returns: list[float]) -> None:
        self.returns.extend(returns)

    @property
    def count(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns)) if self.returns else float("nan")

    @property
    def reached(self) -> bool:
        return self.count == self.returns.maxlen and self.mean >= self.target_return

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def finish(self, env_steps: int, log: Callable[[str], None]) -> dict[str, Any]:
        """Logs the verdict; what was reached."""
        verdict = "reached" if self.reached else "did not reach"
        log(
            f"{verdict} mean return {self.target_return:g}: {self.mean:.1f} after {env_steps} env steps "
            f"in {self.elapsed:.1f} s"
        )
        return {"reached": self.reached, "mean_return": self.mean, "env_steps": env_steps, "seconds": self.elapsed}


def train_ppo(cfg: PPOTrainingConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Trains until ``target_return`` or ``max_iterations``; returns what it reached, with the
    time spent sampling, updating, and in the learner pipeline (a part of updating; NaN with
    learner actors)."""
    spaces = env_spaces(cfg.env)
    runner_config = EnvRunnerConfig(
        env=cfg.env,
        num_envs_per_env_runner=cfg.num_envs_per_env_runner,
        rollout_fragment_length=cfg.rollout_fragment_length,
        seed=cfg.seed,
    )
    runners = EnvRunnerGroup(
        runner_config, EnvRunnerGroupConfig(num_env_runners=cfg.num_env_runners, num_cpus_per_env_runner=0.5)
    )
    learners = LearnerGroup(
        lambda: MLPModule(*spaces, seed=cfg.seed),
        PPOConfig(lr=cfg.lr, seed=cfg.seed),
        num_learners=cfg.num_learners,
        num_cpus_per_learner=0.5,
    )
    tracker = ReturnTracker(cfg.target_return)
    steps, timings = 0, {"sample_s": 0.0, "update_s": 0.0, "learner_connector_s": 0.0}
    try:
        runners.sync_weights(learners.get_weights())
        for it in range(1, cfg.max_iterations + 1):
            t0 = time.perf_counter()
            episodes = runners.sample()
            t1 = time.perf_counter()
            steps += sum(len(ep) for ep in episodes)
            tracker.add(runners.metrics["episode_returns"])
            metrics = learners.update_from_episodes(episodes)
            timings["sample_s"] += t1 - t0
            timings["update_s"] += time.perf_counter() - t1
            timings["learner_connector_s"] += metrics.get("learner_connector_s", float("nan"))
            version = runners.sync_weights(learners.get_weights())
            log(
                f"iter {it}: {steps} env steps, mean return {tracker.mean:.1f} (last {tracker.count} episodes), "
                f"policy loss {metrics['policy_loss']:.3f}, weights v{version}, {tracker.elapsed:.1f} s"
            )
            if tracker.reached:
                break
    finally:
        learners.stop()
        runners.stop()
    return {**tracker.finish(steps, log), "iterations": it, **timings}
