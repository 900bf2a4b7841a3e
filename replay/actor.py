"""ReplayActor: the replay buffer as a Ray actor, with rate limiting, metrics and checkpoints.

A plain class (the actor is ``ray.remote(ReplayActor)``, threaded: ``create_replay_actor``
starts it with ``max_concurrency`` so an ``add`` waiting under backpressure never blocks the
``sample`` that releases it). Runners send their columnar chunks straight to it
(``EnvRunnerGroup.sample_to_replay``); it copies them into its own storage, so what it stored
outlives the runner that sent it, and answers with a small acknowledgement.

- ``add`` waits while inserts run ahead of the samples-per-insert ratio, up to
  ``add_timeout_s``; then it stores anyway (data is never dropped) and counts the timeout.
  Every wait is reported in the acknowledgement and the metrics.
- ``sample`` waits up to ``sample_timeout_s`` for ``min_size_to_sample`` steps and the ratio,
  then raises ReplayError. ``sample_batches`` draws several batches in one call (one round trip
  for a learner's next gradient steps).
- With ``prioritized`` the buffer is a PrioritizedEpisodeReplayBuffer: batches carry ``weights``
  and ``keys``, and learners send |TD errors| back with ``update_priorities``.
- With ``checkpoint_path`` and ``checkpoint_every_s`` and/or ``checkpoint_every_env_steps`` a
  background thread saves the buffer (atomically, checksummed, see replay.persistence). An actor
  started with ``checkpoint_path`` first removes the temporary files a killed save left there,
  then restores from the file if it exists (a corrupted one raises DataFormatError). The file
  records the env steps acknowledged up to it, so after a restore ``num_env_steps_lost(acked)``
  tells a driver how many of the steps it saw acknowledged (by every incarnation of the actor)
  died with the old actor; the restored episodes accept their runners' next chunks despite the
  gap (see replay.add_plan).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import threading
import time
from typing import Any

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError, ReplayError
from ray_sampler.validate import check_bool, check_int, check_number, check_optional, replace_field
from replay.buffer import BatchList, EpisodeReplayBuffer
from replay.compat import NStep, as_columnar
from replay.metrics import AddAck, ReplayCounters, ReplayMetrics
from replay.persistence import Checkpoint, remove_stale_temp_files, restore_checkpoint, save_buffer
from replay.prioritized import PrioritizedEpisodeReplayBuffer
from replay.rate_limiter import RateLimiter
from replay.state import ReplayState

__all__ = ["MALLOC_ARENA_MAX", "ReplayActor", "ReplayConfig", "create_replay_actor"]

_log = logging.getLogger("replay.actor")

MALLOC_ARENA_MAX = "2"
"""glibc malloc arenas of the replay actor's process (see ``create_replay_actor``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayConfig:
    """The replay actor's buffer, rate limits and checkpoints."""

    capacity_env_steps: int = 1_000_000
    """Env steps kept (lookback never counts); the oldest whole episodes go first."""
    capacity_bytes: int | None = None
    """Optional second bound on the stored steps' bytes."""
    min_size_to_sample: int = 1
    """Sampling waits until this many env steps are stored."""
    samples_per_insert: float | None = None
    """Target sampled transitions per inserted env step; None: no ratio."""
    samples_per_insert_tolerance: float = 1000.0
    """How far (in transitions) sampling may lead or trail the ratio before one side waits."""
    add_timeout_s: float = 30.0
    """Longest an add waits under backpressure before it stores anyway (and counts a timeout)."""
    sample_timeout_s: float = 30.0
    """Longest a sample waits for data or for the ratio before it raises."""
    checkpoint_path: str | None = None
    """Parquet file to checkpoint to and restore from (a str or os.PathLike; its directory must exist
    and be writable where the actor runs, which the actor checks when it starts)."""
    checkpoint_every_s: float | None = None
    """Seconds between checkpoints (needs checkpoint_path); None: not by time."""
    checkpoint_every_env_steps: int | None = None
    """Also checkpoint once this many env steps were received since the last one (needs
    checkpoint_path); None: not by steps. Neither set: only on request (``save``)."""
    checkpoint_drop_infos: bool = False
    """Leave infos out of checkpoints (for infos that are not JSON-representable)."""
    seed: int | None = None
    """Seed of the sampling RNG."""
    prioritized: bool = False
    """Proportional prioritized replay instead of uniform."""
    alpha: float = 0.6
    """Prioritized replay: how much priorities count (0: uniform)."""
    beta: float = 0.4
    """Prioritized replay: importance-weight correction (1: full)."""

    def __post_init__(self) -> None:
        if self.checkpoint_path is not None:
            if not isinstance(self.checkpoint_path, str | os.PathLike) or not os.fspath(self.checkpoint_path):
                raise ConfigError(
                    f"'checkpoint_path' must be a file path (a non-empty str or os.PathLike) or None "
                    f"(got {self.checkpoint_path!r})"
                )
            replace_field(self, "checkpoint_path", os.fspath(self.checkpoint_path))
        for name in ("add_timeout_s", "sample_timeout_s"):
            check_number(name, getattr(self, name), minimum=0, exclusive_minimum=True)
        check_optional(check_number, "checkpoint_every_s", self.checkpoint_every_s, minimum=0, exclusive_minimum=True)
        check_optional(check_int, "checkpoint_every_env_steps", self.checkpoint_every_env_steps, minimum=1)
        for name in ("checkpoint_every_s", "checkpoint_every_env_steps"):
            if getattr(self, name) is not None and self.checkpoint_path is None:
                raise ConfigError(f"'{name}' needs 'checkpoint_path'")
        check_bool("checkpoint_drop_infos", self.checkpoint_drop_infos)
        check_bool("prioritized", self.prioritized)
        check_optional(check_int, "seed", self.seed, minimum=0)
        # The buffer and the limiter check their own fields (through ray_sampler.validate as well).
        try:
            self.make_buffer()
        except ReplayError as e:
            raise ConfigError(str(e)) from None
        RateLimiter(
            min_size_to_sample=self.min_size_to_sample,
            samples_per_insert=self.samples_per_insert,
            samples_per_insert_tolerance=self.samples_per_insert_tolerance,
        )
        if self.capacity_env_steps < self.min_size_to_sample:
            raise ConfigError(
                f"'capacity_env_steps' ({self.capacity_env_steps}) must be >= 'min_size_to_sample' "
                f"({self.min_size_to_sample}), or no sample could ever go"
            )

    def _buffer_class_and_kwargs(self) -> tuple[type[EpisodeReplayBuffer], dict[str, Any]]:
        if self.prioritized:
            return PrioritizedEpisodeReplayBuffer, {"alpha": self.alpha, "beta": self.beta}
        return EpisodeReplayBuffer, {}

    def make_buffer(self) -> EpisodeReplayBuffer:
        """An empty buffer of this config."""
        cls, kwargs = self._buffer_class_and_kwargs()
        return cls(
            capacity_env_steps=self.capacity_env_steps, capacity_bytes=self.capacity_bytes, seed=self.seed, **kwargs
        )

    def restore_buffer(self, path: str) -> EpisodeReplayBuffer:
        """The buffer saved at ``path``, of this config's kind and capacities."""
        return self.restore_checkpoint(path).buffer

    def restore_checkpoint(self, path: str) -> Checkpoint:
        """The buffer saved at ``path`` (of this config's kind and capacities) and the file's state record."""
        cls, kwargs = self._buffer_class_and_kwargs()
        checkpoint = restore_checkpoint(path, seed=self.seed, buffer_class=cls, **kwargs)
        checkpoint.buffer.set_capacity(self.capacity_env_steps, self.capacity_bytes)  # the config's, not the file's
        return checkpoint


def _check_checkpoint_directory(path: str) -> None:
    """ConfigError unless the directory of ``path`` exists and takes a file here (the actor's node):
    otherwise every checkpoint would fail, counted but unseen."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(
            f"'checkpoint_path' {path!r}: its directory {directory} does not exist on the replay actor's node"
        )
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise ConfigError(
            f"'checkpoint_path' {path!r}: the replay actor cannot write into {directory} ({e.strerror or e})"
        ) from None


def _check_checkpoint_directory_here(path: str | None) -> None:
    """The actor's directory check (``_check_checkpoint_directory``), run in this process where it
    sees what the actor will: an absolute path, on a one-node cluster this process runs on (not a
    Ray Client). A relative path is the actor's working directory's, and on several nodes the
    actor's node is not known yet: the actor checks those when it starts."""
    if path is None or not os.path.isabs(path):
        return
    import ray

    if ray.util.client.ray.is_connected() or sum(1 for n in ray.nodes() if n.get("Alive")) != 1:
        return
    _check_checkpoint_directory(path)


class ReplayActor:
    """A rate-limited, checkpointed replay buffer (see the module docstring)."""

    def __init__(self, config: ReplayConfig) -> None:
        self.config = config
        path = config.checkpoint_path
        self.restored_from: str | None = None
        self.num_stale_temp_files_removed = 0
        """Temporary files of a killed save found (and removed) next to ``checkpoint_path`` at start."""
        self.restored_num_env_steps_received = 0
        """Env steps acknowledged up to the checkpoint this actor restored (0: not restored)."""
        self._counts = ReplayCounters()
        if path is not None:
            _check_checkpoint_directory(path)
            self.num_stale_temp_files_removed = len(remove_stale_temp_files(path))
        if path is not None and os.path.exists(path):
            checkpoint = config.restore_checkpoint(path)
            self.buffer = checkpoint.buffer
            self.restored_from = path
            self.restored_num_env_steps_received = checkpoint.state.num_env_steps_received
            self._counts.num_env_steps_received = self.restored_num_env_steps_received  # counts go on from there
        else:
            self.buffer = config.make_buffer()
        self.limiter = RateLimiter(
            min_size_to_sample=config.min_size_to_sample,
            samples_per_insert=config.samples_per_insert,
            samples_per_insert_tolerance=config.samples_per_insert_tolerance,
        )
        self._count_restored_steps()
        self._cond = threading.Condition()
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by add once checkpoint_every_env_steps were received
        self._steps_since_checkpoint = 0
        self._checkpointer: threading.Thread | None = None
        if config.checkpoint_every_s is not None or config.checkpoint_every_env_steps is not None:
            self._checkpointer = threading.Thread(target=self._checkpoint_loop, daemon=True)
            self._checkpointer.start()

    def add(self, data: ColumnarEpisodes | SingleAgentEpisode | list[SingleAgentEpisode] | None) -> AddAck:
        """Stores a runner's chunks (all or none; what EpisodeReplayBuffer.add takes), after waiting
        out backpressure; a small ack."""
        data = as_columnar(data)
        if data is None:
            return AddAck(
                num_env_steps=0, num_env_steps_received=0, waited_s=0.0, num_env_steps_stored=len(self.buffer)
            )
        n = data.num_env_steps
        t0 = time.monotonic()
        deadline = t0 + self.config.add_timeout_s
        with self._cond:
            while not self.limiter.can_insert(num_env_steps=n, stored=len(self.buffer)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._counts.num_add_timeouts += 1  # stored anyway: data is never dropped
                    break
                self._cond.wait(remaining)
            waited = time.monotonic() - t0
            before = len(self.buffer)
            skipped_before = self.buffer.storage.num_duplicate_steps_skipped
            kept = self.buffer.add(data)  # steps still stored after eviction: only those count as delivered
            # A re-sent chunk this replay stored already (its ack was lost) is no new step: acked as 0.
            skipped = self.buffer.storage.num_duplicate_steps_skipped - skipped_before
            n -= skipped
            self._counts.num_env_steps_duplicate_skipped += skipped
            self.limiter.inserted(kept, stored_before=before)
            self._counts.num_adds += 1
            self._counts.num_env_steps_received += n
            self._steps_since_checkpoint += n
            every = self.config.checkpoint_every_env_steps
            if every is not None and self._steps_since_checkpoint >= every:
                self._wake.set()
            self._counts.num_env_steps_added += kept
            self._counts.backpressure_s += waited
            self._cond.notify_all()
            return AddAck(
                num_env_steps=kept, num_env_steps_received=n, waited_s=waited, num_env_steps_stored=len(self.buffer)
            )

    def sample(
        self,
        batch_size_B: int,
        *,
        n_step: NStep = 1,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        timeout_s: float | None = None,
        frame_stack: int | None = None,
    ) -> dict[str, Any]:
        """A flat batch (see EpisodeReplayBuffer.sample), once the limits allow it."""
        return self.sample_batches(
            batch_size_B,
            1,
            n_step=n_step,
            gamma=gamma,
            include_infos=include_infos,
            include_extra_model_outputs=include_extra_model_outputs,
            timeout_s=timeout_s,
            frame_stack=frame_stack,
        )[0]

    def sample_batches(
        self,
        batch_size_B: int,
        num_batches: int,
        *,
        n_step: NStep = 1,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        timeout_s: float | None = None,
        frame_stack: int | None = None,
    ) -> BatchList:
        """``num_batches`` flat batches in one call (one draw, shipped as one BatchList), once the
        limits allow all of them. Priorities go back by the batches' ``keys`` (several learners
        share the actor, so there is no "last batch")."""
        check_int("batch_size_B", batch_size_B, minimum=1, error=ReplayError)
        check_int("num_batches", num_batches, minimum=1, error=ReplayError)
        check_optional(check_number, "timeout_s", timeout_s, minimum=0, error=ReplayError)
        total = batch_size_B * num_batches
        t0 = time.monotonic()
        deadline = t0 + (self.config.sample_timeout_s if timeout_s is None else timeout_s)
        with self._cond:
            while not self.limiter.can_sample(batch_size=total, stored=len(self.buffer)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ReplayError(
                        f"sample waited {time.monotonic() - t0:.1f} s: {len(self.buffer)} env steps stored "
                        f"(min_size_to_sample {self.limiter.min_size_to_sample}), samples-per-insert lead "
                        f"{self.limiter.lead():.0f} (tolerance {self.limiter.tolerance:.0f})"
                    )
                self._cond.wait(remaining)
            batches = self.buffer.sample_batches(
                batch_size_B,
                num_batches,
                n_step=n_step,
                gamma=gamma,
                include_infos=include_infos,
                include_extra_model_outputs=include_extra_model_outputs,
                frame_stack=frame_stack,
            )
            self.limiter.sampled(total)
            self._counts.num_samples += num_batches
            self._counts.num_transitions_sampled += total
            self._counts.sample_wait_s += time.monotonic() - t0
            self._cond.notify_all()
            return batches

    def update_priorities(self, keys: Any, priorities: Any) -> None:
        """New priorities (e.g. |TD errors|) for sampled steps, by the batches' ``keys``."""
        if not isinstance(self.buffer, PrioritizedEpisodeReplayBuffer):
            raise ReplayError("update_priorities needs a prioritized replay (ReplayConfig(prioritized=True))")
        with self._cond:
            self.buffer.update_priorities(keys, priorities)

    def sampling_mass(self) -> tuple[float, float, float | None]:
        """(mass, smallest priority, beta) for sampling across replay shards (replay.shards): the mass
        is the stored env steps (uniform) or the priority sum (prioritized), 0 while fewer than
        ``min_size_to_sample`` steps are stored; uniform replay's smallest priority is 1.0 and its beta None."""
        with self._cond:
            prioritized = isinstance(self.buffer, PrioritizedEpisodeReplayBuffer)
            beta = self.config.beta if prioritized else None
            if len(self.buffer) < self.config.min_size_to_sample:
                return 0.0, 0.0, beta
            if isinstance(self.buffer, PrioritizedEpisodeReplayBuffer):
                return (*self.buffer.priority_mass(), beta)
            return float(len(self.buffer)), 1.0, beta

    def sample_episodes(self, batch_size_B: int, batch_length_T: int, *, lookback: int = 1) -> list[SingleAgentEpisode]:
        """Episode chunks with lookback (see EpisodeReplayBuffer.sample_episodes); counts as B samples."""
        with self._cond:
            if not self.limiter.can_sample(batch_size=batch_size_B, stored=len(self.buffer)):
                raise ReplayError(
                    f"sample_episodes: the limits do not allow {batch_size_B} samples now "
                    f"({len(self.buffer)} env steps stored, lead {self.limiter.lead():.0f})"
                )
            out = self.buffer.sample_episodes(batch_size_B, batch_length_T, lookback=lookback)
            self.limiter.sampled(batch_size_B)
            self._cond.notify_all()
            return out

    def set_state(self, state: ReplayState) -> None:
        with self._cond:
            self.buffer.set_state(state)
            self._count_restored_steps()
            self._cond.notify_all()

    def _count_restored_steps(self) -> None:
        """Steps a restored buffer received before count toward the warm-up (evicted ones too), so
        a replay that was sampling samples again at once."""
        evicted = self.buffer.storage.num_evicted_steps
        self.limiter.num_received = max(self.limiter.num_received, len(self.buffer) + evicted)

    def get_metrics(self) -> ReplayMetrics:
        with self._cond:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            return ReplayMetrics(
                **dataclasses.asdict(self.buffer.get_metrics()),
                **dataclasses.asdict(self._counts),
                inserts_per_s=self._counts.num_env_steps_added / elapsed,
                samples_per_s=self._counts.num_transitions_sampled / elapsed,
                samples_per_insert_lead=self.limiter.lead(),
                restored_from=self.restored_from,
            )

    def get_state(self) -> ReplayState:
        with self._cond:
            return self.buffer.get_state()

    def save(self, path: str | None = None) -> str:
        """Saves the buffer (to ``checkpoint_path`` by default); returns the path written."""
        path = path or self.config.checkpoint_path
        if path is None:
            raise ReplayError("save: give a path or configure 'checkpoint_path'")
        with self._cond:
            save_buffer(
                self.buffer,
                path,
                drop_infos=self.config.checkpoint_drop_infos,
                num_env_steps_received=self._counts.num_env_steps_received,
            )
            self._counts.num_checkpoints += 1
            self._steps_since_checkpoint = 0
        return path

    def num_env_steps_lost(self, num_env_steps_acknowledged: int) -> int:
        """Of ``num_env_steps_acknowledged`` (every env step a driver saw acknowledged by this replay
        and the incarnations before it, ``AddAck.num_env_steps_received`` summed), those not in the
        checkpoint this actor restored nor added since: they died with the previous actor."""
        check_int("num_env_steps_acknowledged", num_env_steps_acknowledged, minimum=0, error=ReplayError)
        with self._cond:
            return max(0, num_env_steps_acknowledged - self._counts.num_env_steps_received)

    def _checkpoint_loop(self) -> None:
        while True:
            self._wake.wait(self.config.checkpoint_every_s)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                if len(self.buffer):
                    self.save()
            except Exception as e:  # a failed checkpoint is counted and reported; the next one still runs
                with self._cond:
                    self._counts.num_checkpoint_errors += 1
                    self._counts.last_checkpoint_error = repr(e)
                    if self._counts.num_checkpoint_errors == 1:  # loudly once; the count tells the rest
                        _log.error(
                            "replay checkpoint to %s failed (later failures are only counted): %s",
                            self.config.checkpoint_path,
                            e,
                        )

    def stop(self) -> None:
        """Stops the checkpoint thread."""
        self._stop.set()
        self._wake.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=5)


def create_replay_actor(
    config: ReplayConfig,
    *,
    num_cpus: float = 1.0,
    name: str | None = None,
    max_concurrency: int = 16,
    scheduling_strategy: Any = None,
) -> Any:
    """Starts a ReplayActor as a threaded Ray actor (Ray must be running); ``scheduling_strategy``
    is Ray's (e.g. a placement group bundle beside the learners). A ``checkpoint_path`` whose
    directory is missing raises ConfigError here, before the actor starts, where this process can
    tell (see ``_check_checkpoint_directory_here``); elsewhere the actor refuses to start."""
    import ray

    _check_checkpoint_directory_here(config.checkpoint_path)
    # No task events: the replay gets calls every few ms for hours, and the GCS keeps their events.
    # Few malloc arenas: Ray runs the calls on up to max_concurrency threads, glibc gives each its own
    # arena, and each arena keeps the free memory of its largest call (sum tree, priorities, a batch
    # of transitions): RSS grew ~1 MiB/min for 30 min (no Python object leaked). The calls take the
    # actor's lock anyway, so fewer arenas cost no contention. Ray merges these env_vars with the job's.
    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "max_concurrency": max_concurrency,
        "enable_task_events": False,
        "runtime_env": {"env_vars": {"MALLOC_ARENA_MAX": MALLOC_ARENA_MAX}},
    }
    if name is not None:
        options["name"] = name
    if scheduling_strategy is not None:
        options["scheduling_strategy"] = scheduling_strategy
    return ray.remote(ReplayActor).options(**options).remote(config)
