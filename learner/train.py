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
from ray_sampler.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.env_runner_group import EnvRunnerGroup
from ray_sampler.errors import ConfigError
from ray_sampler.module import MLPModule

__all__ = ["PPOTrainingConfig", "train_ppo"]


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


def train_ppo(cfg: PPOTrainingConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Trains until ``target_return`` or ``max_iterations``; returns what it reached."""
    probe = gym.make(cfg.env)
    spaces = (probe.observation_space, probe.action_space)
    probe.close()
    runner_config = EnvRunnerConfig(env=cfg.env, num_envs_per_env_runner=cfg.num_envs_per_env_runner,
                                     rollout_fragment_length=cfg.rollout_fragment_length, seed=cfg.seed)
    runners = EnvRunnerGroup(runner_config, EnvRunnerGroupConfig(num_env_runners=cfg.num_env_runners,
                                                                 num_cpus_per_env_runner=0.5))
    learners = LearnerGroup(lambda: MLPModule(*spaces, seed=cfg.seed), PPOConfig(lr=cfg.lr, seed=cfg.seed),
                            num_learners=cfg.num_learners, num_cpus_per_learner=0.5)
    returns: deque[float] = deque(maxlen=20)
    steps, start, mean, reached = 0, time.perf_counter(), float("nan"), False
    try:
        runners.sync_weights(learners.get_weights())
        for it in range(1, cfg.max_iterations + 1):
            episodes = runners.sample()
            steps += sum(len(ep) for ep in episodes)
            returns.extend(runners.metrics["episode_returns"])
            metrics = learners.update_from_episodes(episodes)
            version = runners.sync_weights(learners.get_weights())
            mean = float(np.mean(returns)) if returns else float("nan")
            log(f"iter {it}: {steps} env steps, mean return {mean:.1f} (last {len(returns)} episodes), "
                f"policy loss {metrics['policy_loss']:.3f}, weights v{version}, {time.perf_counter() - start:.1f} s")
            if len(returns) == returns.maxlen and mean >= cfg.target_return:
                reached = True
                break
    finally:
        learners.stop()
        runners.stop()
    elapsed = time.perf_counter() - start
    verdict = "reached" if reached else "did not reach"
    log(f"{verdict} mean return {cfg.target_return:g}: {mean:.1f} after {steps} env steps in {elapsed:.1f} s")
    return {"reached": reached, "mean_return": mean, "env_steps": steps, "seconds": elapsed}
