"""Typed reports of the replay: a buffer's metrics, the ReplayActor's add acknowledgement and metrics."""

from __future__ import annotations

import dataclasses

__all__ = ["AddAck", "BufferMetrics", "ReplayCounters", "ReplayMetrics"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BufferMetrics:
    """What a replay buffer holds and has evicted."""

    num_env_steps: int
    """Stored env steps (lookback excluded)."""
    num_episodes: int
    """Stored episodes."""
    num_evicted_episodes: int
    """Episodes evicted so far."""
    num_evicted_env_steps: int
    """Env steps evicted so far."""
    nbytes: int
    """Bytes the storage's arrays hold (room to grow included)."""
    step_nbytes: int
    """Bytes of one stored step (observation, action, reward, model outputs)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class AddAck:
    """The ReplayActor's answer to an ``add``."""

    num_env_steps: int
    """Env steps of this add still stored after eviction: only those count as delivered."""
    num_env_steps_received: int
    """Env steps this add brought."""
    waited_s: float
    """Seconds the add waited under backpressure."""
    num_env_steps_stored: int
    """Env steps the replay stores now."""


@dataclasses.dataclass(kw_only=True)
class ReplayCounters:
    """The ReplayActor's running counts (changed in place under its lock)."""

    num_adds: int = 0
    """Adds stored."""
    num_env_steps_received: int = 0
    """Env steps received by adds."""
    num_env_steps_added: int = 0
    """Env steps of adds still stored right after their add."""
    num_env_steps_duplicate_skipped: int = 0
    """Env steps of re-sent chunks skipped: stored already (their ack was lost), not received again."""
    num_samples: int = 0
    """Batches sampled."""
    num_transitions_sampled: int = 0
    """Transitions sampled."""
    backpressure_s: float = 0.0
    """Seconds adds waited under backpressure."""
    num_add_timeouts: int = 0
    """Adds that stored anyway after waiting ``add_timeout_s``."""
    sample_wait_s: float = 0.0
    """Seconds samples waited for data or the ratio."""
    num_checkpoints: int = 0
    """Checkpoints written."""
    num_checkpoint_errors: int = 0
    """Checkpoints that failed."""
    last_checkpoint_error: str | None = None
    """The last failed checkpoint's error."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayMetrics(BufferMetrics):
    """The ReplayActor's metrics: its buffer's, its counters, rates and where it restored from."""

    num_adds: int
    """Adds stored."""
    num_env_steps_received: int
    """Env steps received by adds."""
    num_env_steps_added: int
    """Env steps of adds still stored right after their add."""
    num_env_steps_duplicate_skipped: int
    """Env steps of re-sent chunks skipped: stored already (their ack was lost), not received again."""
    num_samples: int
    """Batches sampled."""
    num_transitions_sampled: int
    """Transitions sampled."""
    backpressure_s: float
    """Seconds adds waited under backpressure."""
    num_add_timeouts: int
    """Adds that stored anyway after waiting ``add_timeout_s``."""
    sample_wait_s: float
    """Seconds samples waited for data or the ratio."""
    num_checkpoints: int
    """Checkpoints written."""
    num_checkpoint_errors: int
    """Checkpoints that failed."""
    last_checkpoint_error: str | None
    """The last failed checkpoint's error."""
    inserts_per_s: float
    """Env steps added per second since the actor started."""
    samples_per_s: float
    """Transitions sampled per second since the actor started."""
    samples_per_insert_lead: float
    """The rate limiter's lead (``SPI * inserted - sampled``)."""
    restored_from: str | None
    """The checkpoint the actor restored from at start, if any."""
