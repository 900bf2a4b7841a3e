"""OngoingEpisodes: the one owner of what a runner holds between ``sample()`` calls.

That is, per sub-env, the episode still running, in one of two forms: list-form
SingleAgentEpisodes (the per-step engine appends to them) or one CursorBatch (the vectorized
engine advances it with arrays); each engine asks for its form and the owner converts (rarely:
only when a runner switches engines, e.g. for a ``num_episodes`` call). Besides them:

- *pending* chunks: steps made but not returned yet (finished episodes a call did not need,
  the tail of a chunk split at the call's step count), returned first by the next call;
- the *carry*: when the last vector step of a call makes more steps than asked (a NEXT_STEP
  vector env spent some sub-envs' steps on resets, or leftovers were no multiple of
  ``num_envs``), the excess sub-envs' transitions of that step, held back whole (with their
  resets) as a StepRecord of their own for the next call. ``hold_back`` is the one carry
  implementation; both engines use it, so no env step is lost or returned twice.

``end_failed`` ends the running episodes of sub-envs that failed and were rebuilt: their steps
since the last cut are dropped (never shipped), counted in ``num_episodes_dropped`` /
``num_steps_dropped``, and each sub-env begins a new episode (new id) from its fresh reset.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.advance import advance_cursors
from ray_sampler.sampling.cursors import CursorBatch
from ray_sampler.sampling.recorder import StepRecord

__all__ = ["OngoingEpisodes", "split_excess", "take_steps"]


def split_excess(record: StepRecord, excess: int) -> tuple[StepRecord, StepRecord]:
    """(kept, carried): the transitions of the last ``excess`` valid sub-envs of ``record`` move
    to the carried record; a reset in the same step as a carried episode end belongs after it,
    so it moves along."""
    carried = set(np.flatnonzero(record.valid)[::-1][:excess].tolist())
    keep, carry = record.valid.copy(), np.zeros_like(record.valid)
    keep[list(carried)], carry[list(carried)] = False, True
    resets = record.step.resets
    kept = StepRecord(
        dataclasses.replace(record.step, resets={i: r for i, r in resets.items() if i not in carried}),
        record.actions,
        record.extras,
        keep,
    )
    held = StepRecord(
        dataclasses.replace(record.step, resets={i: r for i, r in resets.items() if i in carried}, failed={}),
        record.actions,
        record.extras,
        carry,
    )
    return kept, held


def take_steps(
    chunks: list[SingleAgentEpisode], num_steps: int, *, lookback: int
) -> tuple[list[SingleAgentEpisode], int, list[SingleAgentEpisode]]:
    """At most ``num_steps`` steps of ``chunks``, in order, the chunk where they run out split at
    that step (its rest keeps ``lookback`` steps of lookback): (taken, their steps, the rest)."""
    out, steps = [], 0
    for k, ep in enumerate(chunks):
        if steps + len(ep) <= num_steps:
            out.append(ep)
            steps += len(ep)
            continue
        keep = num_steps - steps
        if keep:
            out.append(ep.slice(slice(0, keep)))
            steps += keep
            ep = ep.slice(slice(keep, None), len_lookback_buffer=lookback)
        return out, steps, [ep, *chunks[k + 1 :]]
    return out, steps, []


class OngoingEpisodes:
    """Every sub-env's running episode, the pending chunks and the carry (see the module docstring)."""

    def __init__(
        self, *, lookback: int, id_prefix: str, observation_space: Any = None, action_space: Any = None
    ) -> None:
        self.lookback = lookback
        """Steps of lookback a continuation chunk keeps (``episode_lookback_horizon``)."""
        self.observation_space = observation_space
        self.action_space = action_space
        self._id_prefix = id_prefix
        self._id_counter = 0
        self._episodes: list[SingleAgentEpisode] = []
        self._cursors: CursorBatch | None = None
        self._pending: list[SingleAgentEpisode] = []
        self._carry: StepRecord | None = None
        self.is_started = False
        """Whether the sub-envs were reset and hold episodes (False at first and after ``drain``)."""
        self.num_episodes_dropped = 0
        """Running episodes ``end_failed`` ended, since the runner last took the counts."""
        self.num_steps_dropped = 0
        """Their steps since the last cut (never shipped), since the runner last took the counts."""
        self.dropped_ids: list[str] = []
        """Ids of the episodes ``end_failed`` ended (they never get another chunk)."""

    # ---------------------------------------------------------------- ids and forms
    def new_id(self) -> str:
        """A new episode id: the runner's prefix and a counter."""
        self._id_counter += 1
        return f"{self._id_prefix}{self._id_counter:012x}"

    def _new_episode(self, obs: Any, infos: dict) -> SingleAgentEpisode:
        ep = SingleAgentEpisode(self.new_id(), observation_space=self.observation_space, action_space=self.action_space)
        ep.add_env_reset(obs, infos)
        return ep

    @property
    def is_columnar(self) -> bool:
        """Whether the running episodes are a CursorBatch now (else SingleAgentEpisodes)."""
        return self._cursors is not None

    def as_episodes(self) -> list[SingleAgentEpisode]:
        """The running episodes as SingleAgentEpisodes (converting the cursors), any carried steps
        added (the episodes they finish become pending)."""
        if self._cursors is not None:
            self._episodes, self._cursors = self._cursors.to_episodes(), None
        if self._carry is not None:
            record, self._carry = self._carry, None
            self._pending += self.add_step(record)
        return self._episodes

    def as_cursors(self) -> CursorBatch:
        """The running episodes as a CursorBatch (list-form ones must have no steps: see ``take``)."""
        if self._cursors is None:
            self._cursors, self._episodes = CursorBatch.from_episodes(self._episodes), []
        return self._cursors

    def set_cursors(self, cursors: CursorBatch) -> None:
        """The cursors after the vectorized engine advanced them."""
        self._cursors = cursors

    # ---------------------------------------------------------------- steps
    def add_step(self, record: StepRecord) -> list[SingleAgentEpisode]:
        """Adds a record's valid transitions to the running SingleAgentEpisodes and begins the episodes
        its resets start; returns the episodes it finished."""
        episodes, step, out = self._episodes, record.step, record.extras
        finished = []
        # Per-sub-env values are pulled out once per step (C-level list/zip), not per access; nested
        # outputs (a stateful module's state_out) split leaf by leaf.
        extras = (
            [
                dict(zip(out, values))
                for values in zip(*(tree.unstack(v) if isinstance(v, dict) else list(v) for v in out.values()))
            ]
            if out
            else None
        )
        rows = zip(
            episodes,
            step.next_obs_rows(),
            list(record.actions),
            step.rewards.tolist(),
            step.info_rows(),
            step.terminated.tolist(),
            step.truncated.tolist(),
            record.valid.tolist(),
        )
        for i, (ep, obs, action, reward, infos, terminated, truncated, made_step) in enumerate(rows):
            if made_step:
                ep.add_env_step(
                    obs,
                    action,
                    reward,
                    infos,
                    terminated=terminated,
                    truncated=truncated,
                    extra_model_outputs=extras[i] if extras else None,
                )
                if terminated or truncated:
                    finished.append(ep)
        for i, (obs, infos) in step.resets.items():
            episodes[i] = self._new_episode(obs, infos)
        return finished

    def hold_back(self, record: StepRecord, excess: int) -> StepRecord:
        """Keeps the transitions of ``record``'s last ``excess`` valid sub-envs for the next call (the
        carry); returns the rest of the record."""
        assert self._carry is None, "a carry is taken before the next vector step"
        kept, self._carry = split_excess(record, excess)
        return kept

    def take_carry(self) -> StepRecord | None:
        """The held-back record, if any (it is then the caller's)."""
        record, self._carry = self._carry, None
        return record

    def end_failed(self, failed: dict[int, tuple[Any, dict]], *, num_steps_elsewhere: int = 0) -> int:
        """Sub-envs that failed and were rebuilt (index -> fresh reset): their running episodes end,
        their steps since the last cut are dropped, and new episodes begin from the resets.
        ``num_steps_elsewhere``: other steps of theirs dropped (harvested by the vectorized engine,
        or made in the failing step). Returns the steps dropped from the running episodes."""
        if self._cursors is not None:
            self._end_failed_cursors(self._cursors, failed)
            self.num_steps_dropped += num_steps_elsewhere
            return 0  # cursors hold no steps
        episodes = self._episodes
        dropped = 0
        for i, (obs, infos) in failed.items():
            ep = episodes[i]
            if not ep.is_done:  # a sub-env awaiting a NEXT_STEP reset has no running episode
                self.num_episodes_dropped += 1
                dropped += len(ep)
                self.dropped_ids.append(ep.id_)
            episodes[i] = self._new_episode(obs, infos)
        self.num_steps_dropped += dropped + num_steps_elsewhere
        return dropped

    def _end_failed_cursors(self, cursors: CursorBatch, failed: dict[int, tuple[Any, dict]]) -> None:
        """``end_failed`` on the cursors, with arrays: each failed sub-env's cursor becomes a fresh
        episode from its reset (``advance_cursors`` with no chunks), the others are kept as they are.
        Not a round trip of every sub-env's cursor through SingleAgentEpisodes and back, which took
        13% of a runner's time with faults in 1% of steps (cProfile)."""
        awaiting = cursors.awaiting.tolist()
        for i in failed:
            if not awaiting[i]:  # a sub-env awaiting a NEXT_STEP reset has no running episode
                self.num_episodes_dropped += 1
                self.dropped_ids.append(cursors.chunks.ids[i])
        new_ids = {i: self.new_id() for i in failed}  # in ``failed``'s order, as the list-form path
        by_sub_env = iter([new_ids[i] for i in sorted(new_ids)])  # advance_cursors asks in sub-env order
        self._cursors = advance_cursors(
            None,
            cursors,
            chunk_env=np.zeros(0, np.int64),
            resets={i: [reset] for i, reset in failed.items()},
            used={},
            h=self.lookback,
            new_id=lambda: next(by_sub_env),
        )

    def take_drops(self) -> tuple[int, int, list[str]]:
        """(episodes dropped, steps dropped, their ids) since the last call; the counts restart."""
        out = (self.num_episodes_dropped, self.num_steps_dropped, self.dropped_ids)
        self.num_episodes_dropped, self.num_steps_dropped, self.dropped_ids = 0, 0, []
        return out

    def num_held_steps(self) -> int:
        """Steps made and not returned yet: pending chunks, running list-form episodes, the carry."""
        carry = int(self._carry.valid.sum()) if self._carry is not None else 0
        return self.num_pending_steps() + self.num_running_steps() + carry

    # ---------------------------------------------------------------- chunks
    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def num_pending_steps(self) -> int:
        return sum(len(ep) for ep in self._pending)

    def num_running_steps(self) -> int:
        """Steps in the running SingleAgentEpisodes (none in cursor form: cursors hold no steps)."""
        return sum(len(ep) for ep in self._episodes if not ep.is_done)

    def pop_pending(self) -> list[SingleAgentEpisode]:
        """The pending chunks, in order (they are then the caller's)."""
        out, self._pending = self._pending, []
        return out

    def defer(self, chunks: list[SingleAgentEpisode]) -> None:
        """Chunks for a later call, after those already pending."""
        self._pending += chunks

    def cut_running(self) -> list[SingleAgentEpisode]:
        """The running SingleAgentEpisodes that hold steps, in sub-env order; each sub-env goes on
        with a zero-step continuation."""
        out = []
        for i, ep in enumerate(self._episodes):
            if not ep.is_done:
                if len(ep):
                    out.append(ep)
                self._episodes[i] = ep.cut(len_lookback_buffer=self.lookback)
        return out

    def take(self, num_steps: int) -> tuple[list[SingleAgentEpisode], int]:
        """At most ``num_steps`` steps of what was made but not returned (pending chunks, then the
        running episodes' steps, cut), a chunk split at any step if needed: (chunks, steps); the
        rest stays pending."""
        chunks = self.pop_pending()
        if self._cursors is None:
            chunks += [ep for ep in self._episodes if len(ep) and not ep.is_done]
            self._episodes = [
                ep.cut(len_lookback_buffer=self.lookback) if len(ep) and not ep.is_done else ep for ep in self._episodes
            ]
        out, steps, self._pending = take_steps(chunks, num_steps, lookback=self.lookback)
        return out, steps

    # ---------------------------------------------------------------- lifecycle
    def restart(self, obs_rows: list[Any], infos: list[dict], *, ship_running: bool) -> tuple[int, set[str]]:
        """New episodes from every sub-env's reset; the running ones end here: their steps become
        pending chunks (``ship_running``) or are dropped. Returns (episodes with steps dropped, ids
        of the episodes that never continue)."""
        episodes = self.as_episodes()
        running = [ep for ep in episodes if len(ep) and not ep.is_done]
        abandoned = {ep.id_ for ep in episodes if not ep.is_done}
        dropped = 0
        if ship_running:
            self._pending += running
        else:
            dropped = len(running)
        self._episodes = [self._new_episode(o, i) for o, i in zip(obs_rows, infos)]
        self.is_started = True
        return dropped, abandoned

    def drain(self, *, ship_running: bool) -> tuple[list[SingleAgentEpisode], int]:
        """Everything held, for a runner about to stop: (chunks with steps, running episodes dropped).
        The running episodes' steps go along (``ship_running``) or are dropped and counted."""
        episodes = self.as_episodes()
        out = [ep for ep in self._pending if len(ep)]
        running = [ep for ep in episodes if len(ep) and not ep.is_done]
        dropped = 0
        if ship_running:
            out += running
        else:
            dropped = len(running)
        self._pending, self._episodes, self.is_started = [], [], False
        return out, dropped
