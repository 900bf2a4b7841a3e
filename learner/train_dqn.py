"""DQN training through a ReplayActor: the off-policy loop behind ``ray-sampler train-dqn``.

Every iteration the runners send their chunks straight to the ReplayActor
(``EnvRunnerGroup.sample_to_replay``; with ``keep_sampling`` they sample the next fragment
while the learners work), the LearnerGroup pulls batches from the replay and takes
``updates_per_env_step`` gradient steps per new env step (with prioritized replay the learners
send |TD errors| back), and the new weights, with the epsilon of the exploration schedule, go to
the runners with one ``ray.put``. Ray must be running.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from learner.dqn import DQNConfig, DQNLearner, QModule
from learner.learner_group import LearnerGroup
from learner.train import ReturnTracker, env_spaces
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from replay.actor import ReplayConfig, create_replay_actor

__all__ = ["DQNTrainingConfig", "epsilon_at", "train_dqn"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNTrainingConfig:
    """Knobs of ``ray-sampler train-dqn`` (defaults that train CartPole-v1)."""

    env: str = "CartPole-v1"
    """Gymnasium id to train on."""
    num_env_runners: int = 2
    """Remote env runners."""
    num_envs_per_env_runner: int = 4
    """Sub-envs per runner."""
    rollout_fragment_length: int = 32
    """Steps per sub-env per runner request."""
    keep_sampling: bool = True
    """Runners sample their next fragment while the learners update."""
    num_learners: int = 0
    """Learner actors pulling from the replay (0: one local learner)."""
    lr: float = 1e-3
    """Adam learning rate."""
    hidden_size: int = 64
    """Units of each of the Q-network's two ReLU layers."""
    batch_size: int = 64
    """Transitions per gradient step (over all learners together)."""
    n_step: int = 3
    """Steps of the n-step return."""
    updates_per_env_step: float = 0.5
    """Gradient steps per new env step."""
    target_update_every: int = 128
    """Gradient steps between target network copies."""
    learning_starts: int = 1000
    """Env steps stored before the first gradient step."""
    epsilon_final: float = 0.04
    """Exploration rate after the decay."""
    epsilon_steps: int = 8000
    """Env steps over which epsilon falls linearly from 1 to ``epsilon_final``."""
    replay_capacity: int = 50_000
    """Env steps the replay keeps."""
    prioritized: bool = True
    """Prioritized replay (|TD error| priorities); False: uniform (see bench/RESULTS.md: with
    these defaults prioritized replay reached 450 in every measured run, uniform in most)."""
    max_env_steps: int = 150_000
    """Stop after this many env steps."""
    target_return: float = 450.0
    """Stop once the mean return of the last 20 finished episodes reaches this."""
    seed: int = 0
    """Seed of the envs, the network, exploration and the replay's sampling."""

    def __post_init__(self) -> None:
        for name in (
            "num_env_runners",
            "num_envs_per_env_runner",
            "rollout_fragment_length",
            "hidden_size",
            "batch_size",
            "n_step",
            "target_update_every",
            "epsilon_steps",
            "replay_capacity",
            "max_env_steps",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"'{name}' must be an int >= 1 (got {value!r})")
        if not isinstance(self.learning_starts, int) or not 0 <= self.learning_starts <= self.replay_capacity:
            raise ConfigError(
                f"'learning_starts' must be an int in [0, replay_capacity] (got {self.learning_starts!r})"
            )
        if not 0 <= self.epsilon_final <= 1:
            raise ConfigError(f"'epsilon_final' must be in [0, 1] (got {self.epsilon_final!r})")
        for name in ("lr", "updates_per_env_step"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ConfigError(f"'{name}' must be a finite number > 0 (got {value!r})")
        if not isinstance(self.num_learners, int) or self.num_learners < 0:
            raise ConfigError(f"'num_learners' must be an int >= 0 (got {self.num_learners!r})")
        if self.batch_size < self.num_learners:
            raise ConfigError(
                f"'batch_size' ({self.batch_size}) must be >= 'num_learners' ({self.num_learners}): "
                "every learner takes a share of each batch"
            )


def epsilon_at(cfg: DQNTrainingConfig, env_steps: int) -> float:
    """The exploration rate after ``env_steps``: linear from 1 to ``epsilon_final``, then flat."""
    return max(cfg.epsilon_final, 1.0 - (1.0 - cfg.epsilon_final) * env_steps / cfg.epsilon_steps)


def train_dqn(
    cfg: DQNTrainingConfig, *, log: Callable[[str], None] = print, log_every_s: float = 1.0
) -> dict[str, Any]:
    """Trains until ``target_return`` or ``max_env_steps``; returns what it reached.

    A progress line goes to ``log`` at most every ``log_every_s`` seconds, and at the end."""
    spaces = env_spaces(cfg.env)
    hidden = (cfg.hidden_size, cfg.hidden_size)
    runner_config = EnvRunnerConfig(
        env=cfg.env,
        num_envs_per_env_runner=cfg.num_envs_per_env_runner,
        rollout_fragment_length=cfg.rollout_fragment_length,
        seed=cfg.seed,
        module_class=QModule,
        module_config={"hidden_sizes": hidden, "seed": cfg.seed},
    )
    replay_config = ReplayConfig(
        capacity_env_steps=cfg.replay_capacity,
        min_size_to_sample=max(cfg.learning_starts, 1),
        prioritized=cfg.prioritized,
        seed=cfg.seed,
    )
    dqn_config = DQNConfig(lr=cfg.lr, target_update_every=cfg.target_update_every)
    # The learners first: a space they cannot train on raises before the replay and runners start.
    learners = LearnerGroup(
        lambda: QModule(*spaces, hidden_sizes=hidden, seed=cfg.seed),
        dqn_config,
        learner_class=DQNLearner,
        num_learners=cfg.num_learners,
        num_cpus_per_learner=0.5,
    )
    replay, runners = None, None
    tracker = ReturnTracker(cfg.target_return)
    steps, owed, num_updates, last_log = 0, 0.0, 0, float("-inf")
    metrics: dict[str, Any] = {}
    try:
        replay = create_replay_actor(replay_config, num_cpus=0)
        runners = EnvRunnerGroup(
            runner_config,
            EnvRunnerGroupConfig(
                num_env_runners=cfg.num_env_runners, num_cpus_per_env_runner=0.5, keep_sampling=cfg.keep_sampling
            ),
        )
        runners.sync_weights({**learners.get_weights(), "epsilon": np.float64(1.0)})
        while steps < cfg.max_env_steps and not tracker.reached:
            runners.sample_to_replay(replay)
            steps += runners.metrics["num_env_steps"]
            tracker.add(runners.metrics["episode_returns"])
            if steps >= cfg.learning_starts:
                owed += runners.metrics["num_env_steps"] * cfg.updates_per_env_step
                if owed >= 1:
                    metrics = learners.update_from_replay(
                        replay, int(owed), cfg.batch_size, n_step=cfg.n_step, prioritized=cfg.prioritized
                    )
                    num_updates += int(owed)
                    owed -= int(owed)
            epsilon = epsilon_at(cfg, steps)
            version = runners.sync_weights({**learners.get_weights(), "epsilon": np.float64(epsilon)})
            if time.perf_counter() - last_log >= log_every_s or tracker.reached:
                last_log = time.perf_counter()
                log(
                    f"{steps} env steps, mean return {tracker.mean:.1f} (last {tracker.count} episodes), "
                    f"epsilon {epsilon:.2f}, {num_updates} updates, loss {metrics.get('loss', float('nan')):.3f}, "
                    f"weights v{version}, {tracker.elapsed:.1f} s"
                )
        # What the runners sampled meanwhile is in the replay already: count it too.
        steps_sent = steps + sum(m["num_env_steps"] for _, m in runners.collect_in_flight())
        replay_metrics = ray.get(replay.get_metrics.remote(), timeout=60)
    finally:  # whatever was started stops, also when starting the rest failed
        learners.stop()
        if runners is not None:
            runners.stop()
        if replay is not None:
            ray.kill(replay)
    return {
        **tracker.finish(steps, log),
        "num_updates": num_updates,
        "runner_env_steps_sent": steps_sent,
        "replay_num_env_steps_received": replay_metrics["num_env_steps_received"],
    }
