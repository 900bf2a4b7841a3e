"""DQNTrainingConfig: the knobs of ``ray-sampler train-dqn`` and ``train_dqn``, and the exploration schedule."""

from __future__ import annotations

import dataclasses

from learner.dqn import DQNConfig
from learner.frameworks import Framework, with_framework
from learner.learner_group import GradientSync
from learner.train import (
    StopOn,
    check_budgets,
    check_evaluation,
    check_stop_rule,
    check_training_components,
)
from ray_sampler.errors import ConfigError
from ray_sampler.modules.q_module import QModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.evaluation import EvaluationConfig
from ray_sampler.validate import (
    check_callable,
    check_enum,
    check_int,
    check_number,
    check_probability,
    check_type,
    replace_field,
)
from replay.actor import ReplayConfig
from replay.shards import check_num_replay_shards

__all__ = ["DQNTrainingConfig", "epsilon_at"]


def _default_dqn_runner() -> EnvRunnerConfig:
    return EnvRunnerConfig(
        env="CartPole-v1",
        num_envs_per_env_runner=4,
        rollout_fragment_length=32,
        seed=0,
        module_class=QModule,
        module_config={"hidden_sizes": (64, 64), "seed": 0},
    )


def _default_dqn_runner_group() -> EnvRunnerGroupConfig:
    return EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5, keep_sampling=True)


def _default_dqn() -> DQNConfig:
    return DQNConfig(lr=1e-3, target_update_every=128)


def _default_replay() -> ReplayConfig:
    return ReplayConfig(capacity_env_steps=50_000, min_size_to_sample=1000, prioritized=True, seed=0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNTrainingConfig:
    """Knobs of ``ray-sampler train-dqn`` (defaults that train CartPole-v1): the component configs,
    and the loop's own batch, update ratio, exploration schedule, budget and stop rule.

    The learners' Q-network is built as the runners build theirs (``env_runner.module_class`` with
    ``module_config``), so both start equal. Learning starts once the replay can serve a sample:
    when ``replay.min_size_to_sample`` env steps have been sent to it and it holds that many; a
    replay restored (after its actor died) with fewer is refilled by the sampling first, and the
    updates owed meanwhile are taken once it holds enough again."""

    env_runner: EnvRunnerConfig = dataclasses.field(default_factory=_default_dqn_runner)
    """What each runner steps (a gymnasium id) and how: 4 CartPole-v1 sub-envs, 32 steps each per
    request, seed 0, a QModule of two 64-unit ReLU layers."""
    env_runner_group: EnvRunnerGroupConfig = dataclasses.field(default_factory=_default_dqn_runner_group)
    """The runner actors: 2, half a CPU each, sampling their next fragment while the learners update."""
    dqn: DQNConfig = dataclasses.field(default_factory=_default_dqn)
    """DQN's hyperparameters: learning rate 1e-3, a target network copy every 128 gradient steps."""
    replay: ReplayConfig = dataclasses.field(default_factory=_default_replay)
    """The replay actor: 50,000 env steps, sampling (and learning) from 1,000 on, prioritized (see
    bench/RESULTS.md: with these defaults prioritized replay reached 450 in every measured run,
    uniform in most), seed 0."""
    framework: Framework | str = Framework.NUMPY
    """``"numpy"`` (no extra needed) or ``"torch"`` (``ray-sampler[torch]``): the learner, and the
    built-in Q-network the runners and learners build (learner/frameworks.py)."""
    num_learners: int = 0
    """Learner actors pulling from the replay (0: one local learner)."""
    num_cpus_per_learner: float = 0.5
    """CPUs each learner actor reserves."""
    gradient_sync: GradientSync | str = GradientSync.DRIVER
    """How learner actors average their gradients at every step: ``"driver"`` (gathered by the
    driver, one mean sent back) or ``"allreduce"`` (among themselves, torch.distributed's gloo: the
    driver sends only the data; needs torch). Unused with one local learner."""
    batch_size: int = 64
    """Transitions per gradient step (over all learners together)."""
    n_step: int = 3
    """Steps of the n-step return."""
    updates_per_env_step: float = 0.5
    """Gradient steps per new env step."""
    epsilon_final: float = 0.04
    """Exploration rate after the decay."""
    epsilon_steps: int = 8000
    """Env steps over which epsilon falls linearly from 1 to ``epsilon_final``."""
    max_env_steps: int | None = 300_000
    """Stop once the runners have sent this many env steps to the replay (None: no bound on them).
    The default is twice the most a run of docs/optimizers.md's command took to CartPole-v1's 475
    (135k; one run of four missed within 150k, the budget before)."""
    max_time_s: float | None = None
    """Stop once the run's wall time (a resumed run's earlier time included) reaches this many
    seconds, checked between the runners' answers (None: no bound)."""
    target_return: float | str | None = "auto"
    """Stop once the mean return of the last ``stop_window`` finished episodes reaches this; ``"auto"``:
    the env spec's ``reward_threshold`` (475 for CartPole-v1); None, or ``"auto"`` for an env without
    one: no target, the run uses its budget."""
    stop_window: int = 100
    """Finished episodes in the stop rule's mean (stricter than RLlib 2.60's ``episode_return_mean``,
    which averages the episodes that finished in its last iteration: bench/RESULTS.md)."""
    replay_restart_timeout_s: float = 60.0
    """Longest a dead replay actor's replacement may take to restore its checkpoint and start."""
    num_replay_shards: int = 1
    """Replay actors sharing the buffer (replay.shards): runner i sends its chunks to shard
    ``(i - 1) % K``, the learners draw each batch from a shard in proportion to its size or
    priority sum, and each shard checkpoints, restores and counts its loss on its own. ``replay``
    describes the whole buffer (each shard holds 1/K of it). At most ``num_env_runners``."""
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    """Evaluation runners, with RLlib's names: off by default; greedy episodes (epsilon unused) on runners
    of their own every ``evaluation_interval`` progress reports, as ``evaluation/`` columns."""
    stop_on: StopOn | str = StopOn.TRAINING
    """Which return ``target_return`` applies to: ``"training"`` or ``"evaluation"`` (needs evaluation on)."""

    def __post_init__(self) -> None:
        check_training_components(self.env_runner, self.env_runner_group)
        check_callable("env_runner.module_class", self.env_runner.module_class, "a Q-network module class")
        replace_field(self, "framework", check_enum("framework", Framework, self.framework))
        replace_field(self, "env_runner", with_framework(self.framework, self.env_runner))
        check_type("dqn", self.dqn, DQNConfig)
        replace_field(self, "gradient_sync", check_enum("gradient_sync", GradientSync, self.gradient_sync))
        check_type("replay", self.replay, ReplayConfig)
        for name in ("batch_size", "n_step", "epsilon_steps"):
            check_int(name, getattr(self, name), minimum=1)
        check_budgets(self)
        check_int("num_learners", self.num_learners, minimum=0)
        check_number("num_cpus_per_learner", self.num_cpus_per_learner, minimum=0)
        check_probability("epsilon_final", self.epsilon_final)
        check_number("updates_per_env_step", self.updates_per_env_step, minimum=0, exclusive_minimum=True)
        check_stop_rule(self.target_return, self.stop_window)
        check_evaluation(self)
        check_number("replay_restart_timeout_s", self.replay_restart_timeout_s, minimum=0, exclusive_minimum=True)
        check_num_replay_shards(self.num_replay_shards, self.env_runner_group.num_env_runners)
        if self.batch_size < self.num_learners:
            raise ConfigError(
                f"'batch_size' ({self.batch_size}) must be >= 'num_learners' ({self.num_learners}): "
                "every learner takes a share of each batch"
            )


def epsilon_at(cfg: DQNTrainingConfig, env_steps: int) -> float:
    """The exploration rate after ``env_steps``: linear from 1 to ``epsilon_final``, then flat."""
    return max(cfg.epsilon_final, 1.0 - (1.0 - cfg.epsilon_final) * env_steps / cfg.epsilon_steps)
