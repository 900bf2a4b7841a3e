"""The two sampling engines behind one protocol: per-step (SingleAgentEpisodes) and vectorized (arrays).

Both take steps from a ``StepRecorder`` and keep what runs on between calls in the runner's
``OngoingEpisodes``; ``EnvRunner`` picks one per call:

- ``PerStepEngine`` appends each vector step to the sub-envs' SingleAgentEpisodes (what the
  connectors see); it serves every batch mode and ``num_episodes`` calls.
- ``VectorizedEngine`` records whole vector steps and cuts them into chunks in bulk
  (``harvest``), no per-sub-env Python per step; truncate mode only, with the default
  connectors and env-to-module pieces that keep the ``EnvToModulePiece`` contract (they read
  the running episodes' recent past from a ``RecentSteps`` view instead of episode objects).

A step in which sub-envs failed (``VectorStep.failed``) ends their running episodes before the
step's other transitions are added (``OngoingEpisodes.end_failed``): the per-step engine drops
the episode objects' steps; the vectorized engine first harvests the records so far and drops
the failed episodes' chunks made in this call. Either way the dropped steps leave the call's
count, so truncate mode still returns exactly its steps. Only the failure path does extra work.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, concat_columnar, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.harvest import harvest
from ray_sampler.sampling.ongoing import OngoingEpisodes
from ray_sampler.sampling.recent_steps import RecentSteps
from ray_sampler.sampling.recorder import StepRecord, StepRecorder
from ray_sampler.sampling.request import SampleRequest

__all__ = ["Collected", "PerStepEngine", "SamplingEngine", "VectorizedEngine"]

Collected = list[SingleAgentEpisode] | ColumnarEpisodes | None
"""What an engine returns: chunks as episodes, as one columnar object, or nothing."""


class SamplingEngine(Protocol):
    """Collects the chunks one ``sample()`` call returns."""

    def collect(self, request: SampleRequest, num_steps: int) -> Collected:
        """Chunks holding ``num_steps`` env steps (or ``request.num_episodes`` whole episodes, or, in
        complete mode, at least ``num_steps`` steps of finished episodes)."""
        ...


class PerStepEngine:
    """Steps SingleAgentEpisodes one vector step at a time (see the module docstring)."""

    def __init__(self, recorder: StepRecorder, ongoing: OngoingEpisodes, *, truncate: bool) -> None:
        self.recorder = recorder
        self.ongoing = ongoing
        self.truncate = truncate
        """Truncate mode (cut running episodes) rather than complete mode (whole episodes only)."""

    def collect(self, request: SampleRequest, num_steps: int) -> list[SingleAgentEpisode]:
        self.ongoing.as_episodes()
        if request.num_episodes is not None:
            return self._whole_episodes(request, request.num_episodes)
        if self.truncate:
            return self._truncate(request, num_steps)
        return self._complete(request, num_steps)

    def _record(self, request: SampleRequest) -> tuple[StepRecord, int]:
        """One vector step, the failed sub-envs' episodes already ended (see the module docstring):
        (record, steps dropped from the running episodes)."""
        ongoing = self.ongoing
        episodes = ongoing.as_episodes()
        record = self.recorder.record(episodes, explore=request.explore, random_actions=request.random_actions)
        if not record.step.failed:
            return record, 0
        return record, ongoing.end_failed(record.step.failed, num_steps_elsewhere=record.step.num_unrecorded)

    def _truncate(self, request: SampleRequest, num_steps: int) -> list[SingleAgentEpisode]:
        ongoing = self.ongoing
        running = ongoing.num_running_steps()
        if ongoing.num_pending_steps() + running >= num_steps:
            # Earlier calls left at least this call's worth (num_episodes calls can): no env step.
            return ongoing.take(num_steps)[0]
        out = ongoing.pop_pending()
        steps = sum(len(ep) for ep in out) + running
        while steps < num_steps:
            record, dropped = self._record(request)
            steps -= dropped
            made = int(np.count_nonzero(record.valid))
            if steps + made > num_steps:
                record = ongoing.hold_back(record, steps + made - num_steps)
                made = num_steps - steps
            out += ongoing.add_step(record)
            steps += made
        return out + ongoing.cut_running()

    def _complete(self, request: SampleRequest, num_steps: int) -> list[SingleAgentEpisode]:
        out = self.ongoing.pop_pending()
        steps = sum(len(ep) for ep in out)
        while steps < num_steps:
            finished = self.ongoing.add_step(self._record(request)[0])
            out += finished
            steps += sum(len(ep) for ep in finished)
        return out

    def _whole_episodes(self, request: SampleRequest, num_episodes: int) -> list[SingleAgentEpisode]:
        """Exactly ``num_episodes`` whole episodes (reset to end). In truncate mode an episode whose
        first steps earlier calls returned finishes as a chunk: it goes out with the next call."""

        def is_whole(ep: SingleAgentEpisode) -> bool:
            return ep.is_done and ep.t_started == 0 and not ep.len_lookback_buffer

        pending = self.ongoing.pop_pending()
        out = [ep for ep in pending if is_whole(ep)]
        later = [ep for ep in pending if not is_whole(ep)]
        while len(out) < num_episodes:
            for ep in self.ongoing.add_step(self._record(request)[0]):
                (out if is_whole(ep) else later).append(ep)
        self.ongoing.defer(later + out[num_episodes:])
        return out[:num_episodes]


class VectorizedEngine:
    """Records whole vector steps and harvests them into chunks (see the module docstring)."""

    def __init__(
        self, recorder: StepRecorder, ongoing: OngoingEpisodes, *, view_lookback_steps: int | None = None
    ) -> None:
        self.recorder = recorder
        self.ongoing = ongoing
        self.view_lookback_steps = view_lookback_steps
        """Steps of history the env-to-module pieces read (None: no piece reads any, no view is kept)."""

    def _recent_steps(self, carry: StepRecord | None) -> RecentSteps | None:
        """The running episodes' recent past for the pieces, from the cursors and the carry (None: not needed)."""
        if self.view_lookback_steps is None:
            return None
        recent = RecentSteps.from_cursors(
            self.ongoing.as_cursors(), lookback_steps=self.view_lookback_steps, action_space=self.ongoing.action_space
        )
        if carry is not None:
            recent.push(carry)
        return recent

    def collect(self, request: SampleRequest, num_steps: int) -> ColumnarEpisodes | None:
        ongoing = self.ongoing
        flushed: list[SingleAgentEpisode] = []
        steps = 0
        if not ongoing.is_columnar or ongoing.has_pending:  # the per-step engine (or an early return) left steps
            if not ongoing.is_columnar:
                ongoing.as_episodes()  # adds a carry the per-step engine held back
            flushed, steps = ongoing.take(num_steps)
            ongoing.as_cursors()
            if steps == num_steps:
                return episodes_to_columnar(flushed) if flushed else None
        carry = ongoing.take_carry()
        records = [carry] if carry is not None else []
        steps += sum(int(np.count_nonzero(r.valid)) for r in records)
        segments: list[ColumnarEpisodes] = []
        recent = self._recent_steps(carry) if steps < num_steps else None
        while steps < num_steps:
            record = self.recorder.record(
                [],
                explore=request.explore,
                random_actions=request.random_actions,
                view=recent.view() if recent is not None else None,
            )
            if recent is not None:
                recent.push(record)
            if record.step.failed:
                segments, dropped = self._end_failed(records, segments, record)
                records, steps = [], steps - dropped
            records.append(record)
            steps += int(np.count_nonzero(record.valid))
        if steps > num_steps:
            records[-1] = ongoing.hold_back(records[-1], steps - num_steps)
        parts = [episodes_to_columnar(flushed)] if flushed else []
        if records:
            segments += self._harvest(records)
        parts += segments
        return concat_columnar(parts) if parts else None

    def _harvest(self, records: list[StepRecord]) -> list[ColumnarEpisodes]:
        """Chunks of ``records``, as a list of none or one (the cursors advance past them)."""
        ongoing = self.ongoing
        col, cursors = harvest(records, ongoing.as_cursors(), lookback=ongoing.lookback, new_id=ongoing.new_id)
        ongoing.set_cursors(cursors)
        return [col] if col is not None else []

    def _end_failed(
        self, records: list[StepRecord], segments: list[ColumnarEpisodes], record: StepRecord
    ) -> tuple[list[ColumnarEpisodes], int]:
        """Sub-envs failed in ``record``: harvests the records before it, then drops the failed
        sub-envs' running episodes, with their chunks made in this call: (segments, steps dropped)."""
        ongoing = self.ongoing
        if records:
            segments = segments + self._harvest(records)
        cursors = ongoing.as_cursors()
        awaiting = cursors.awaiting.tolist()
        ids = {cursors.chunks.ids[i] for i in record.step.failed if not awaiting[i]}
        kept, dropped = [], 0
        for col in segments:
            chunks = columnar_to_episodes(col) if ids & set(col.ids) else None
            if chunks is None:
                kept.append(col)
                continue
            dropped += sum(len(c) for c in chunks if c.id_ in ids)
            rest = [c for c in chunks if c.id_ not in ids]
            if rest:
                kept.append(episodes_to_columnar(rest))
        ongoing.end_failed(record.step.failed, num_steps_elsewhere=dropped + record.step.num_unrecorded)
        return kept, dropped
