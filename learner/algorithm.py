"""Algorithm: one training run that its user steps, with RLlib's method names.

``Algorithm(config)`` starts the run's actors (runners, learners, DQN's replay, evaluation runners);
``train()`` runs one iteration and returns its record (an ``IterationRecord``: what a metrics.csv row
holds), ``evaluate()`` runs one evaluation now, ``save(dir)`` writes a run checkpoint into ``dir``
(the files and checks of every run checkpoint: ``learner.checkpoint``), ``restore(path)`` and
``Algorithm.from_checkpoint(path, config)`` carry on from one, ``get_policy()`` gives the policy the
runners act with now, and ``stop()`` (or leaving a ``with`` block) frees every actor.

There is one loop per optimizer, not two: ``train_ppo`` and ``train_dqn`` (and so ``ray-sampler
train`` and the Ray Tune trials) run the same generator of iterations to its end that ``train()``
steps one at a time (``learner.train.ppo_iterations``, ``learner.train_dqn.dqn_iterations``). The
config's budget and target hold here too: ``is_done`` says when they are met, and ``train()`` then
refuses to go on (raise ``max_env_steps``, ``max_iterations`` or ``max_time_s`` for a longer run). A DQN iteration
is one progress report (``log_every_s`` of training).

A checkpoint holds no config (it would need pickle for an env creator or a module class), so
``from_checkpoint`` takes the config the run was built with; a run directory's ``config.toml`` gives
it back on the command line (``ray-sampler train --resume RUN_DIR``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Generator
from pathlib import Path
from types import TracebackType
from typing import Any

from learner.checkpoint import Checkpointer, TrainingState, load_checkpoint
from learner.metrics import IterationRecord, TrainResult
from learner.train import LoopHandle, PPOTrainingConfig, ppo_iterations, run_observation_space
from learner.train_dqn import DQNTrainingConfig, dqn_iterations
from ray_sampler.errors import ConfigError
from ray_sampler.policy import runner_state
from ray_sampler.sampling.env_creator import env_name
from ray_sampler.sampling.evaluation import EvaluationResult, Evaluator

__all__ = ["Algorithm"]

logger = logging.getLogger(__name__)


class Algorithm:
    """A training run of ``config`` (PPO, APPO, IMPALA, A3C or DQN, single- or multi-agent), step by step.

    ``log`` gets the loop's own lines (a runner replaced, an evaluation runner lost); ``policy_dir``
    receives the final policy when the run ends by itself; ``resume`` is a loaded checkpoint to carry on
    from (``from_checkpoint`` loads one)."""

    def __init__(
        self,
        config: PPOTrainingConfig | DQNTrainingConfig,
        *,
        log: Callable[[str], None] = logger.info,
        policy_dir: Path | None = None,
        resume: TrainingState | None = None,
        log_every_s: float = 1.0,
    ) -> None:
        if not isinstance(config, PPOTrainingConfig | DQNTrainingConfig):
            raise ConfigError(
                f"'config' must be a PPOTrainingConfig or a DQNTrainingConfig (got {type(config).__name__})"
            )
        self.config = config
        self._log, self._policy_dir, self._log_every_s = log, policy_dir, log_every_s
        self._evaluator: Evaluator | None = None
        self._result: TrainResult | None = None
        self._steps, self._handle = self._start(resume)

    @property
    def algo(self) -> str:
        """``ppo`` or ``dqn``: what its checkpoints say they are of."""
        return "dqn" if isinstance(self.config, DQNTrainingConfig) else "ppo"

    def _start(self, resume: TrainingState | None) -> tuple[Generator[IterationRecord | None, None, Any], LoopHandle]:
        handle = LoopHandle()
        quiet: Callable[[IterationRecord], None] = lambda record: None  # noqa: E731  (records are train()'s)
        steps: Generator[IterationRecord | None, None, Any]
        if isinstance(self.config, DQNTrainingConfig):
            steps = dqn_iterations(
                self.config, log=self._log, log_every_s=self._log_every_s, on_iteration=quiet, resume=resume,
                policy_dir=self._policy_dir, handle=handle,
            )  # fmt: skip
        else:
            steps = ppo_iterations(
                self.config,
                log=self._log,
                on_iteration=quiet,
                resume=resume,
                policy_dir=self._policy_dir,
                handle=handle,
            )
        next(steps)  # the actors start (or the config is refused, before any starts)
        return steps, handle

    # ------------------------------------------------------------------ stepping
    @property
    def iteration(self) -> int:
        """Iterations done (a resumed run's included)."""
        return self._handle.iteration()

    @property
    def is_done(self) -> bool:
        """Whether the run used its budget or reached its target: the next ``train()`` ends it."""
        return self._result is not None or self._handle.is_done()

    def train(self) -> IterationRecord:
        """Runs one iteration; returns its record. Once ``is_done``, the next call ends the run: its
        last queued updates' records if any (an asynchronous loop drains its learner), then the final
        policy to ``policy_dir`` and ConfigError, the actors stopped."""
        if self._result is not None:
            stopped = getattr(self._result, "stopped_by", None)
            why = f"stopped by its {stopped.value!r}" if stopped is not None else "its target reached or a budget used"
            raise ConfigError(
                f"Algorithm.train: the run is done at iteration {self.iteration} ({why}): raise the budget "
                "(max_env_steps, max_iterations, max_time_s) in a new Algorithm, from_checkpoint to carry on"
            )
        self._check_running("train")
        while True:
            try:
                record = next(self._steps)
            except StopIteration as end:  # the loop's end ran: its final policy is kept, its actors stopped
                self._result = end.value
                return self.train()  # raises, naming the iteration it ended at
            if record is not None:
                return record

    def evaluate(self) -> EvaluationResult:
        """One evaluation now, of the weights and connector states the runners act with, on the
        evaluation runners (the config's ``evaluation`` settings, whether or not ``evaluation_interval``
        is on: evaluation runners of their own start at the first call)."""
        self._check_running("evaluate")
        evaluation = self._handle.evaluation
        evaluator = getattr(evaluation, "evaluator", None)
        if evaluator is None or evaluator.is_running:
            if self._evaluator is None:
                self._evaluator = Evaluator(self._runner_config(), self.config.evaluation)
            evaluator = self._evaluator
        policy = self.get_policy()
        return evaluator.evaluate(*runner_state(policy))

    def _runner_config(self) -> Any:
        """The runner config the loop's runners were built with (a multi-agent env's, with its mapping)."""
        runners = self._handle.runners
        config = getattr(runners, "config", None)
        return config if config is not None else self.config.env_runner

    def get_policy(self) -> Any:
        """The policy the runners act with now (``ray_sampler.policy.Policy`` or ``MultiAgentPolicy``)."""
        self._check_running("get_policy")
        assert self._handle.make_policy is not None, "set by every loop once its actors are up"
        return self._handle.make_policy()

    # ------------------------------------------------------------------ checkpoints
    def save(self, checkpoint_dir: Path | str) -> Path:
        """Writes a run checkpoint (``ckpt-<iteration>``, its policy included) into ``checkpoint_dir``;
        returns its path. An asynchronous loop's queued updates are waited for first; what its runners
        have in flight is counted lost by a run resumed from it."""
        self._check_running("save")
        assert self._handle.save_to is not None, "set by every loop once its actors are up"
        return self._handle.save_to(Checkpointer(Path(checkpoint_dir), every=0, keep=1_000_000))

    def restore(self, path: Path | str) -> None:
        """Carries on from the checkpoint at ``path`` (of this config's algorithm, env and observation
        space): the running actors stop and the run starts again from it."""
        state = self._load(Path(path))
        self.stop()
        self._result = None
        self._steps, self._handle = self._start(state)

    def _load(self, path: Path) -> TrainingState:
        return load_checkpoint(
            path,
            algo=self.algo,
            env=env_name(self.config.env_runner.env),
            observation_space=run_observation_space(self.config.env_runner),
        )

    @classmethod
    def from_checkpoint(
        cls, path: Path | str, config: PPOTrainingConfig | DQNTrainingConfig, **kwargs: Any
    ) -> Algorithm:
        """An Algorithm of ``config`` carrying on from the checkpoint at ``path`` (verified: of the same
        algorithm, env and observation space)."""
        algo = "dqn" if isinstance(config, DQNTrainingConfig) else "ppo"
        state = load_checkpoint(
            Path(path),
            algo=algo,
            env=env_name(config.env_runner.env),
            observation_space=run_observation_space(config.env_runner),
        )
        return cls(config, resume=state, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    def _check_running(self, what: str) -> None:
        if self._result is not None or self._is_closed:
            raise ConfigError(f"Algorithm.{what}: the run is stopped (its actors are freed)")

    def stop(self) -> None:
        """Frees every actor of the run (runners, learners, replay, evaluation runners). A run that is
        done ends as ``train_ppo`` ends it first (its final policy to ``policy_dir``)."""
        if self._evaluator is not None:
            self._evaluator.stop()
            self._evaluator = None
        if self._result is None and self._handle.is_done() and not self._is_closed:
            try:
                while True:
                    next(self._steps)  # an asynchronous loop's last queued updates, then its end
            except StopIteration as end:
                self._result = end.value
        self._steps.close()  # the loop's finally blocks stop what it started

    @property
    def _is_closed(self) -> bool:
        return inspect.getgeneratorstate(self._steps) == inspect.GEN_CLOSED

    def __enter__(self) -> Algorithm:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
