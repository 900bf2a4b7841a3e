"""Typed results: what a learner update and a training loop report.

Update metrics are frozen dataclasses read by attribute (``metrics.policy_loss``), so a typo is a
mypy error, not a silent ``KeyError`` at the end of a long run. They are also read-only
``Mapping``\\s over their fields (``metrics["policy_loss"]``, ``"vf_loss" in metrics``,
``dict(metrics)`` for logging): code and pinned tests written against the former dicts keep
working unchanged. Loss terms without a value (no minibatch had rows) are NaN.

>>> m = PPOUpdateMetrics(policy_loss=0.5, grad_norm_mean=1.0, batch_size=8, num_gradient_steps=2)
>>> m.policy_loss, m["batch_size"], "kl" in m, m.num_learners
(0.5, 8, False, 0)
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

__all__ = [
    "DQNStepMetrics",
    "DQNTrainResult",
    "DQNUpdateMetrics",
    "IterationRecord",
    "PPOTrainResult",
    "PPOUpdateMetrics",
    "StopReason",
    "TrainResult",
    "async_figures",
    "format_against",
    "format_outcomes",
]

_NAN = math.nan


class _FieldMapping(Mapping[str, Any]):
    """A read-only mapping view of a dataclass's fields (name -> value)."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._field_names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._field_names())

    def __len__(self) -> int:
        return len(self._field_names())

    def _field_names(self) -> tuple[str, ...]:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]  # subclasses are dataclasses
        return tuple(f.name for f in fields if f.metadata.get("mapping", True))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOUpdateMetrics(_FieldMapping):
    """One PPO update (``num_epochs`` passes over a train batch), locally or over a LearnerGroup.

    Loss terms are those of the update's last gradient step (averaged over the learners with a group)."""

    policy_loss: float = _NAN
    """Clipped surrogate loss."""
    vf_loss: float = _NAN
    """Mean squared value error."""
    entropy: float = _NAN
    """Mean entropy of the action distribution."""
    mean_kl_approx: float = _NAN
    """Mean of ``logp_old - logp_new``."""
    clip_fraction: float = _NAN
    """Share of steps whose ratio left ``[1 - clip, 1 + clip]``."""
    total_loss: float = _NAN
    """``policy_loss + vf_coeff * vf_loss - entropy_coeff * entropy``."""
    grad_norm_mean: float
    """Mean global gradient norm (before clipping) over the update's steps."""
    batch_size: int
    """Rows of the train batch (over all learners)."""
    num_gradient_steps: int
    """Optimizer steps taken."""
    weights_version: int | None = None
    """The learner's weights version after the update (a local learner; None from learner actors)."""
    num_learners: int = 0
    """Learner actors that took part (0: one local learner)."""
    learner_connector_s: float = _NAN
    """Wall time of the learner connector pipeline (a local learner's ``update_from_episodes``; else NaN)."""
    module_metrics: dict[str, PPOUpdateMetrics] = dataclasses.field(default_factory=dict, compare=False)
    """Multi-agent: each trained module's own metrics of this update (the fields above are their
    batch-weighted means and sums); empty for a single-agent update."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNStepMetrics(_FieldMapping):
    """One DQN gradient step on one replay batch (``DQNLearner.update_from_batch``)."""

    loss: float = _NAN
    """Importance-weighted Huber loss of the TD errors."""
    q_mean: float = _NAN
    """Mean Q value of the actions taken."""
    td_abs_mean: float = _NAN
    """Mean |TD error|."""
    td_errors: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0), compare=False)
    """TD error of every row (for prioritized replay's ``update_priorities``)."""
    grad_norm: float
    """Global gradient norm (before clipping)."""
    num_updates: int
    """Gradient steps this learner has taken in all."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNUpdateMetrics(_FieldMapping):
    """``num_gradient_steps`` DQN steps on replay batches (``LearnerGroup.update_from_replay``);
    loss terms averaged over the steps and learners."""

    loss: float = _NAN
    """Importance-weighted Huber loss of the TD errors."""
    q_mean: float = _NAN
    """Mean Q value of the actions taken."""
    td_abs_mean: float = _NAN
    """Mean |TD error|."""
    grad_norm_mean: float
    """Mean global gradient norm (before clipping)."""
    num_gradient_steps: int
    """Optimizer steps taken."""
    batch_size: int
    """Transitions per step (over all learners)."""
    num_learners: int
    """Learner actors that took part (0: one local learner)."""
    module_metrics: dict[str, DQNUpdateMetrics] = dataclasses.field(default_factory=dict, compare=False)
    """Multi-agent: each trained module's own metrics of these steps; empty for a single-agent run."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class IterationRecord(_FieldMapping):
    """One iteration of a training loop, as its ``on_iteration`` callback gets it: the row of the run
    directory's ``metrics.csv``, a TensorBoard step and a progress update. Counters are totals since
    the run began (a resumed run's included); returns are over the stop rule's window."""

    iteration: int
    """Iterations done (1 after the first)."""
    env_steps: int
    """Env steps trained on in all."""
    episodes: int
    """Episodes finished in all."""
    return_mean: float
    """Mean return of the last ``window`` finished episodes (NaN before the first finishes)."""
    return_min: float
    """Lowest return in that window (NaN if empty)."""
    return_max: float
    """Highest return in that window (NaN if empty)."""
    window: int
    """Finished episodes in the window so far (at most the stop rule's ``stop_window``)."""
    best_return_mean: float
    """Highest ``return_mean`` so far over a full window (NaN until a window is full)."""
    env_steps_per_s: float
    """Env steps per second of this iteration's wall time."""
    elapsed_s: float
    """Wall time since the run began (a resumed run's earlier time included)."""
    num_env_runner_restarts: int = 0
    """Runner actors replaced in all."""
    num_env_steps_lost: int = 0
    """Env steps lost with failed actors in all (see GroupMetrics and the replay's recovery)."""
    losses: dict[str, float] = dataclasses.field(default_factory=dict)
    """This iteration's loss terms by name (PPO: policy_loss, vf_loss, entropy, ...; DQN: loss, q_mean, ...)."""
    returns_by: dict[str, float] = dataclasses.field(default_factory=dict)
    """Multi-agent: the mean return over the window (the last ``window`` episodes where each acted)
    per module (``module/<id>``: its agents' returns summed) and per agent (``agent/<id>``); empty
    for a single-agent run. ``return_mean`` is the sum over every agent."""
    outcomes: dict[str, float] = dataclasses.field(default_factory=dict)
    """A run of exactly two agents: per agent the share of its window's episodes it won (return > 0),
    drew (0, within 1e-9) and lost (< 0), as ``win/<agent>``, ``draw/<agent>``, ``loss/<agent>`` (NaN
    while its window is empty); empty for any other run."""
    is_zero_sum: bool = False
    """A two-agent run whose every episode in the window sums to 0 (within 1e-6): a zero-sum game,
    whose ``return_mean`` is 0 by construction, so the progress line shows ``outcomes`` instead."""
    asynchronous: dict[str, float] = dataclasses.field(default_factory=dict)
    """The asynchronous optimizers (APPO, IMPALA, A3C): ``async_figures``' keys, totals since the run
    began (the policy lag over every fragment or gradient that arrived); empty for the others."""
    evaluation: dict[str, float] = dataclasses.field(default_factory=dict)
    """With evaluation on: this iteration's evaluation (``episode_return_mean``, ``_std``, ``_min``,
    ``_max``, ``episode_len_mean``, ``num_episodes``, ``duration_s``, and ``module/<id>/episode_return_mean`` and
    ``agent/<id>/...`` in a multi-agent run), every value NaN in an iteration that did not evaluate;
    empty with evaluation off."""


class StopReason(str, enum.Enum):
    """What ended a training loop: its target, or the first of its budgets it reached."""

    TARGET_RETURN = "target_return"
    MAX_ITERATIONS = "max_iterations"
    MAX_ENV_STEPS = "max_env_steps"
    MAX_TIME_S = "max_time_s"


def async_figures(lags: Mapping[int, int], *, dropped: int, unused: int) -> dict[str, float]:
    """An asynchronous run's figures (``IterationRecord.asynchronous``): the mean and largest policy
    lag of the histogram ``lags`` (lag -> fragments or gradients; NaN while empty), and the env steps
    dropped for their lag and collected unused.

    >>> async_figures({0: 1, 2: 3}, dropped=0, unused=256)
    {'policy_lag_mean': 1.5, 'policy_lag_max': 2.0, 'num_env_steps_dropped': 0.0, 'num_env_steps_unused': 256.0}
    """
    count = sum(lags.values())
    return {
        "policy_lag_mean": sum(lag * n for lag, n in lags.items()) / count if count else _NAN,
        "policy_lag_max": float(max((lag for lag, n in lags.items() if n), default=_NAN)),
        "num_env_steps_dropped": float(dropped),
        "num_env_steps_unused": float(unused),
    }


def format_outcomes(outcomes: Mapping[str, float]) -> str:
    """``IterationRecord.outcomes`` in words, agent by agent in their order (``-`` for NaN).

    >>> format_outcomes({"win/x": 0.5, "draw/x": 0.1, "loss/x": 0.4, "win/o": 0.4, "draw/o": 0.1, "loss/o": 0.5})
    'x won 50% drew 10% lost 40%, o won 40% drew 10% lost 50%'
    """
    agents = [key.removeprefix("win/") for key in outcomes if key.startswith("win/")]
    return ", ".join(
        f"{agent} " + " ".join(f"{word} {_percent(outcomes[f'{kind}/{agent}'])}" for kind, word in _OUTCOME_WORDS)
        for agent in agents
    )


_OUTCOME_WORDS = (("win", "won"), ("draw", "drew"), ("loss", "lost"))


def format_against(evaluation: Mapping[str, float]) -> str:
    """An evaluation against the random opponent in words (``evaluation_opponent``); empty for any
    other evaluation, or an iteration that did not evaluate.

    >>> format_against({"episode_return_mean": 0.5, "win": 0.7, "draw": 0.1, "loss": 0.2})
    'against random won 70% drew 10% lost 20%'
    """
    if math.isnan(evaluation.get("win", math.nan)):
        return ""
    return "against random " + " ".join(f"{word} {_percent(evaluation[kind])}" for kind, word in _OUTCOME_WORDS)


def _percent(share: float) -> str:
    return "-" if math.isnan(share) else f"{share:.0%}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainResult(_FieldMapping):
    """What a training loop reached."""

    reached: bool
    """Whether the mean return of the last finished episodes reached the target (False without one)."""
    target_return: float | None = None
    """The target the run had (None: none, it used its budget)."""
    mean_return: float
    """Mean return of the last ``stop_window`` finished episodes (NaN if none finished)."""
    env_steps: int
    """Env steps the loop trained on."""
    seconds: float
    """Wall time of the loop."""
    returns_by: dict[str, float] = dataclasses.field(default_factory=dict)
    """Multi-agent: the last record's mean returns per module and per agent (``IterationRecord.returns_by``)."""
    stopped_by: StopReason | None = None
    """What ended the loop: its target, or the first budget it reached (None: not recorded)."""
    asynchronous: dict[str, float] = dataclasses.field(default_factory=dict)
    """The asynchronous optimizers: ``async_figures`` at the end (the unused env steps include the
    fragments or gradients collected after the last update); empty for the others."""
    policy: Any = dataclasses.field(default=None, metadata={"mapping": False})
    """The final policy (``ray_sampler.policy.Policy``, or ``MultiAgentPolicy``): the weights and connector
    states the runners last acted with, ready to ``compute_actions`` or ``save``; None if it could not be
    built (logged). Not in the result's mapping view (its figures only)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOTrainResult(TrainResult):
    """What ``train_ppo`` reached, and where its time went."""

    iterations: int
    """Iterations run."""
    sample_s: float
    """Time spent sampling."""
    update_s: float
    """Time spent updating (the learner pipeline included)."""
    learner_connector_s: float
    """Time in the learner connector pipeline (NaN with learner actors)."""
    agent_steps: int = 0
    """Agent steps trained on in this process (a resumed run counts from its resume; a single-agent
    run: its env steps)."""
    runner_utilization: float = float("nan")
    """The runners' sampling time over ``num_runners x`` the loop's wall clock (the share of the loop
    they spent stepping envs)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNTrainResult(TrainResult):
    """What ``train_dqn`` reached, and what the replay received."""

    num_updates: int
    """Gradient steps taken."""
    runner_env_steps_sent: int
    """Env steps the runners reported sending to the replay (in-flight samples included)."""
    replay_num_env_steps_received: int
    """Env steps the replay actor reports it received: the above less ``num_env_steps_lost``."""
    num_replay_restarts: int = 0
    """Dead replay actors restored from the checkpoint (learner/replay_recovery.py)."""
    num_env_steps_lost: int = 0
    """Acknowledged env steps that died with a replay actor (added after its last checkpoint)."""
    num_env_steps_lost_by_shard: tuple[int, ...] = ()
    """With replay shards (``num_replay_shards`` > 1): ``num_env_steps_lost`` of each shard."""
