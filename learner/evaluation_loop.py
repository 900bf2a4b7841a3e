"""TrainingEvaluation: a training loop's evaluation runners, when they run, and what each iteration reports.

Every loop calls ``begin(iteration)`` before it samples and ``end(iteration)`` once it updated; both
do nothing unless ``EvaluationConfig.is_due(iteration)``. In sequence (the default) ``end`` evaluates
the weights the iteration made; with ``evaluation_parallel_to_training``, ``begin`` starts the
evaluation of the weights the iteration starts from on the remote evaluation runners, and ``end``
waits for it (RLlib's order: its results belong to the iteration they ran beside).

``end`` gives the iteration record's ``evaluation`` fields: ``episode_return_mean`` and the rest of
``EvaluationResult.summary()`` (``duration_s``: its wall time, start to result; per module and
agent in a multi-agent run), every key NaN in an iteration that did not evaluate, so
``metrics.csv`` has the same columns in every row. An evaluation whose return beats every earlier
one writes that policy to ``best_dir``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray_sampler.errors import ConfigError
from ray_sampler.policy.policy import read_policy_file
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.evaluation import EvaluationConfig, Evaluator

__all__ = ["EVALUATION_KEYS", "TrainingEvaluation"]

EVALUATION_KEYS = (
    "episode_return_mean",
    "episode_return_std",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "num_episodes",
    "duration_s",
)
"""The ``evaluation`` fields of every record of a run that evaluates (``evaluation/<key>`` columns)."""


def _kept_best(best_dir: Path | None) -> float:
    """The evaluation return of the best policy a run kept already (-inf: none, or none readable)."""
    if best_dir is None or not (best_dir / "policy.json").is_file():
        return -math.inf
    try:
        meta, _ = read_policy_file(best_dir)
    except ConfigError:
        return -math.inf
    value = meta["info"].get("evaluation_return_mean")
    return float(value) if isinstance(value, int | float) else -math.inf


class TrainingEvaluation:
    """A loop's evaluation: ``weights()`` and ``connector_states()`` give what the runners act with now;
    ``make_policy(weights, connector_states)`` builds a policy of them (for ``best_dir``)."""

    def __init__(
        self,
        config: EvaluationConfig,
        runner: EnvRunnerConfig,
        *,
        weights: Callable[[], Any],
        connector_states: Callable[[], Any],
        make_policy: Callable[[Any, Any], Any] | None = None,
        best_dir: Path | None = None,
        return_keys: tuple[str, ...] = (),
        group: EnvRunnerGroupConfig | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.config = config
        self._weights, self._states = weights, connector_states
        self._make_policy, self.best_dir, self._log = make_policy, best_dir, log
        self.keys = [*EVALUATION_KEYS, *(f"{k}/episode_return_mean" for k in return_keys)] if config.is_on else []
        self.best = _kept_best(best_dir) if config.is_on else -math.inf
        """The best evaluation return so far (-inf: none yet; a resumed run's: its ``best_policy/``'s)."""
        self.last: dict[str, float] = {}
        """The last evaluation's summary (empty: none yet)."""
        self.num_episodes_lost = 0
        self._snapshot: tuple[Any, Any] | None = None
        self.evaluator = Evaluator(runner, config, group=group) if config.is_on else None
        if self.evaluator is not None:  # against an opponent: its win, draw and loss rates too
            self.keys += self.evaluator.opponent_keys

    def begin(self, iteration: int) -> None:
        """Before iteration ``iteration`` samples: starts a parallel evaluation that is due."""
        if self.evaluator is None or not self.config.evaluation_parallel_to_training:
            return
        if self.config.is_due(iteration):
            self._snapshot = (self._weights(), self._states())
            self.evaluator.start(*self._snapshot)

    def end(self, iteration: int) -> dict[str, float]:
        """Once iteration ``iteration`` updated: its record's evaluation fields (NaN if none was due)."""
        if self.evaluator is None:
            return {}
        if not self.config.is_due(iteration):
            return dict.fromkeys(self.keys, math.nan)
        if self.config.evaluation_parallel_to_training and self._snapshot is not None:
            weights, states = self._snapshot
            result = self.evaluator.wait()
            self._snapshot = None
        else:
            weights, states = self._weights(), self._states()
            result = self.evaluator.evaluate(weights, states)
        if result.num_episodes_lost:
            self.num_episodes_lost += result.num_episodes_lost
            self._log(
                f"evaluation at iteration {iteration}: {result.num_episodes_lost} episodes lost with a failed "
                f"evaluation runner ({result.num_env_runner_restarts} restarted); reported over the "
                f"{result.num_episodes} that finished"
            )
        summary = result.summary()
        self.last = summary
        mean = summary.get("episode_return_mean", math.nan)
        if mean > self.best:
            self.best = mean
            parallel = self.config.evaluation_parallel_to_training
            self._keep_best(weights, states, iteration - 1 if parallel else iteration, mean)
        return {k: summary.get(k, math.nan) for k in self.keys}

    def _keep_best(self, weights: Any, states: Any, iteration: int, mean: float) -> None:
        """Writes the evaluated policy to ``best_dir``; its info names the iteration whose weights it holds."""
        if self._make_policy is None or self.best_dir is None:
            return
        try:
            policy = self._make_policy(weights, states)
            if policy.info.get("iteration") != iteration:  # an earlier iteration's weights (in parallel)
                policy.info.pop("env_steps", None)
            policy.info.update(iteration=iteration, evaluation_return_mean=mean)
            policy.save(self.best_dir)
        except (
            ValueError,
            TypeError,
            KeyError,
            OSError,
        ) as e:  # a policy that cannot be kept: a line, not a failed run
            self._log(f"the best policy was not written to {self.best_dir}: {type(e).__name__}: {e}")

    def reached(self, target: float | None) -> bool:
        """Whether the last evaluation's mean return reached ``target`` (None: never)."""
        mean = self.last.get("episode_return_mean", math.nan)
        return target is not None and mean >= target

    def stop(self) -> None:
        if self.evaluator is not None:
            self.evaluator.stop()
