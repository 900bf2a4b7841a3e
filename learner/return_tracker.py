"""ReturnTracker: a training loop's window of finished episodes' returns, its stop rule and its records."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from learner.checkpoint import TrainingState
from learner.metrics import IterationRecord, TrainResult, format_outcomes

__all__ = ["ReturnTracker"]

_AGENT = "agent/"
_DRAW_TOLERANCE = 1e-9
"""An agent's return within this of 0 is a draw."""
_ZERO_SUM_TOLERANCE = 1e-6
"""An episode whose agents' returns sum to within this of 0 is zero-sum."""


class ReturnTracker:
    """The mean return of the last ``window`` finished episodes, and the stop rule on it (no target:
    never reached; the loop uses its budget). A run of exactly two agents also gets each one's win,
    draw and loss shares (``outcomes``), and whether its game is zero-sum (``is_zero_sum``), from the
    agent windows: a checkpoint's ``returns_by`` restores them.

    >>> tracker = ReturnTracker(10.0, window=2)
    >>> tracker.add([4.0, 12.0]); tracker.reached
    False
    >>> tracker.add([9.0]); tracker.reached, tracker.mean
    (True, 10.5)
    """

    def __init__(self, target_return: float | None, window: int = 100) -> None:
        self.target_return = target_return
        self.window = window
        self.returns: deque[float] = deque(maxlen=window)
        self.start = time.perf_counter()
        self.episodes = 0
        self.best = float("nan")
        self._last_record = (self.start, 0)
        self.returns_by: dict[str, deque[float]] = {}
        """Multi-agent: a window per module (``module/<id>``) and per agent (``agent/<id>``)."""
        self.stop_on_evaluation = False
        """Whether the target applies to ``evaluation_mean`` (the last evaluation's mean return)."""
        self.evaluation_mean = float("nan")

    def expect(self, keys: list[str]) -> None:
        """Windows for these ``returns_by`` keys from the start (a record then has every key, NaN
        until it has a return; a run's metrics.csv columns are those of its first record)."""
        for key in keys:
            self.returns_by.setdefault(key, deque(maxlen=self.window))

    def add(self, returns: list[float], *, by: Mapping[str, list[float]] | None = None) -> None:
        """Adds finished episodes' returns, and with ``by`` their per-module/per-agent returns."""
        self.returns.extend(returns)
        self.episodes += len(returns)
        for key, values in (by or {}).items():
            self.returns_by.setdefault(key, deque(maxlen=self.window)).extend(values)
        if self.count == self.window and not self.mean <= self.best:  # NaN best: the first full window
            self.best = self.mean

    def record(
        self,
        iteration: int,
        env_steps: int,
        *,
        losses: Mapping[str, Any],
        restarts: int = 0,
        lost: int = 0,
        evaluation: Mapping[str, float] | None = None,
    ) -> IterationRecord:
        """This iteration's record for ``on_iteration`` (throughput since the previous record)."""
        now = time.perf_counter()
        then, steps_then = self._last_record
        self._last_record = (now, env_steps)
        returns = np.asarray(self.returns) if self.returns else np.full(1, np.nan)
        return IterationRecord(
            iteration=iteration,
            env_steps=env_steps,
            episodes=self.episodes,
            return_mean=self.mean,
            return_min=float(returns.min()),
            return_max=float(returns.max()),
            window=self.count,
            best_return_mean=self.best,
            env_steps_per_s=(env_steps - steps_then) / max(now - then, 1e-9),
            elapsed_s=now - self.start,
            num_env_runner_restarts=restarts,
            num_env_steps_lost=lost,
            losses={k: float(v) for k, v in losses.items() if isinstance(v, float | int) and not isinstance(v, bool)},
            returns_by={k: float(np.mean(v)) if v else float("nan") for k, v in self.returns_by.items()},
            outcomes=self.outcomes,
            is_zero_sum=self.is_zero_sum,
            evaluation=dict(evaluation or {}),
        )

    @property
    def count(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns)) if self.returns else float("nan")

    @property
    def outcomes(self) -> dict[str, float]:
        """A run of exactly two agents: ``win/<agent>``, ``draw/<agent>`` and ``loss/<agent>``, the
        shares of each agent's window it won, drew and lost (NaN while empty); else empty.

        >>> tracker = ReturnTracker(None, window=3)
        >>> tracker.expect(["agent/x", "agent/o"])
        >>> tracker.add([0.0, 0.0, 0.0], by={"agent/x": [1.0, -1.0, 0.0], "agent/o": [-1.0, 1.0, 0.0]})
        >>> tracker.outcomes["win/x"], tracker.outcomes["draw/o"], tracker.is_zero_sum
        (0.3333333333333333, 0.3333333333333333, True)
        """
        agents = {k.removeprefix(_AGENT): v for k, v in self.returns_by.items() if k.startswith(_AGENT)}
        if len(agents) != 2:
            return {}
        shares: dict[str, float] = {}
        for agent, window in agents.items():
            returns = np.asarray(window, dtype=np.float64)
            won, lost = returns > _DRAW_TOLERANCE, returns < -_DRAW_TOLERANCE
            for kind, hits in (("win", won), ("draw", ~(won | lost)), ("loss", lost)):
                shares[f"{kind}/{agent}"] = float(hits.mean()) if len(returns) else float("nan")
        return shares

    @property
    def is_zero_sum(self) -> bool:
        """Whether the run has exactly two agents and every finished episode in the window sums to 0
        (within 1e-6) over them: a zero-sum game, whose summed return says nothing (False before an
        episode finishes)."""
        agents = [k for k in self.returns_by if k.startswith(_AGENT)]
        return len(agents) == 2 and bool(self.returns) and all(abs(r) <= _ZERO_SUM_TOLERANCE for r in self.returns)

    @property
    def reached(self) -> bool:
        if self.target_return is None:
            return False
        if self.stop_on_evaluation:
            return self.evaluation_mean >= self.target_return
        return self.count == self.window and self.mean >= self.target_return

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def restore(self, state: TrainingState) -> None:
        """Carries on from a checkpoint: its window of returns, episode count, best and wall time."""
        self.returns.clear()
        self.returns.extend(state.returns[-self.window :])
        self.episodes, self.best = state.episodes, state.best_return_mean
        self.returns_by = {k: deque(v[-self.window :], maxlen=self.window) for k, v in state.returns_by.items()}
        self.start = time.perf_counter() - state.elapsed_s
        self._last_record = (time.perf_counter(), state.env_steps)

    def checkpoint_fields(self) -> dict[str, Any]:
        """The tracker's part of a TrainingState."""
        return {
            "episodes": self.episodes,
            "elapsed_s": self.elapsed,
            "best_return_mean": self.best,
            "returns": list(self.returns),
            "returns_by": {k: list(v) for k, v in self.returns_by.items()},
        }

    def describe(self) -> str:
        """The stop rule in words, for the run's first lines."""
        rule = f"mean return of the last {self.window} finished episodes"
        if self.stop_on_evaluation and self.target_return is not None:
            return f"stop once an evaluation's mean return reaches {self.target_return:g}; the {rule} is reported"
        if self.target_return is None:
            return f"no target return: the run uses its budget; the {rule} is reported"
        return f"stop once the {rule} reaches {self.target_return:g}"

    def finish(self, env_steps: int, log: Callable[[str], None]) -> TrainResult:
        """Logs the verdict; what was reached."""
        window = f"(last {self.count} episodes) after {env_steps} env steps in {self.elapsed:.1f} s"
        tail = f"{self.mean:.1f} {window}"
        word = "summed" if self.returns_by else "mean"  # a multi-agent run: the sum over every agent
        if self.target_return is None and self.is_zero_sum:  # its summed return is 0 by construction
            log(f"budget used (no target): {format_outcomes(self.outcomes)} {window}")
        elif self.target_return is None:
            log(f"budget used (no target): {word} return {tail}")
        elif self.stop_on_evaluation:
            verdict = "reached" if self.reached else "did not reach"
            last = f"(last {self.evaluation_mean:.3g})"
            training = f"{format_outcomes(self.outcomes)} {window}" if self.is_zero_sum else tail
            log(f"{verdict} evaluation return {self.target_return:g} {last}; training: {training}")
        else:
            log(f"{'reached' if self.reached else 'did not reach'} {word} return {self.target_return:g}: {tail}")
        return TrainResult(
            reached=self.reached,
            target_return=self.target_return,
            mean_return=self.mean,
            env_steps=env_steps,
            seconds=self.elapsed,
            returns_by={k: float(np.mean(v)) if v else float("nan") for k, v in self.returns_by.items()},
        )
