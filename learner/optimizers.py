"""The policy optimizers (seed 002's name for how the runners meet the learner) and their knobs.

``PPOTrainingConfig.optimizer`` picks one; ``learner.train.train_ppo`` runs the synchronous one,
``learner.train_async.train_async`` the asynchronous-samples one and
``learner.train_async_gradients.train_async_gradients`` the asynchronous-gradients one
(``train_ppo`` hands a config that names either over). The loss is ``PPOConfig.policy_loss``'s:
with asynchronous samples the clipped surrogate on V-trace's advantages is APPO, the plain
policy gradient on them IMPALA.
"""

from __future__ import annotations

import dataclasses
from enum import Enum

from ray_sampler.validate import check_int, check_optional

__all__ = ["AsyncGradientsConfig", "AsyncSamplesConfig", "Optimizer", "algorithm_name"]


class Optimizer(str, Enum):
    """How samples reach the learner."""

    SYNC_SAMPLES = "sync_samples"
    """Every iteration, one batch from every runner, then an update while the runners wait (PPO)."""
    ASYNC_SAMPLES = "async_samples"
    """Runners never wait: an update on each fragment as it arrives, V-trace for the weights' age
    (APPO, IMPALA)."""
    ASYNC_GRADIENTS = "async_gradients"
    """Runners compute the gradients of their own fragments and ship only those; the driver applies
    them in arrival order and sends that runner the new weights (A3C)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncSamplesConfig:
    """The asynchronous loop's own knobs."""

    broadcast_interval: int = 1
    """The weights go out every this many updates (without waiting for the runners)."""
    max_policy_lag: int | None = None
    """A fragment whose policy lag (updates) exceeds this is dropped and counted; None: none is."""
    max_requests_in_flight_per_env_runner: int = 2
    """Requests each runner holds (the runner group's field of that name): with 2, its next request
    waits in its actor behind the one it samples, so it never waits for the driver; 1: it gets
    its next when the driver collects its fragment, between updates."""

    learner_queue_size: int = 2
    """With a learner actor (``num_learners=1``): updates queued in it, the running one included.
    The driver waits while it is full (backpressure); a learner that dies loses its queue, counted."""

    def __post_init__(self) -> None:
        check_int("broadcast_interval", self.broadcast_interval, minimum=1)
        check_int("learner_queue_size", self.learner_queue_size, minimum=1)
        check_int("max_requests_in_flight_per_env_runner", self.max_requests_in_flight_per_env_runner, minimum=1)
        check_optional(check_int, "max_policy_lag", self.max_policy_lag, minimum=0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncGradientsConfig:
    """The asynchronous-gradients loop's own knob."""

    max_staleness: int = 4
    """A gradient computed with weights more than this many updates old is dropped and counted."""

    def __post_init__(self) -> None:
        check_int("max_staleness", self.max_staleness, minimum=0)


def algorithm_name(optimizer: Optimizer, policy_loss: str) -> str:
    """The algorithm an optimizer and a policy loss make, by its usual name: PPO or A2C (synchronous),
    APPO or IMPALA (asynchronous samples), A3C (asynchronous gradients: one gradient on fresh data,
    where the clipped surrogate's gradient is the plain policy gradient's)."""
    if optimizer is Optimizer.ASYNC_GRADIENTS:
        return "A3C"
    clipped = policy_loss == "clipped"
    if optimizer is Optimizer.SYNC_SAMPLES:
        return "PPO" if clipped else "A2C"
    return "APPO" if clipped else "IMPALA"
