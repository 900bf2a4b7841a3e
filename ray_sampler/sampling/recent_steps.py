"""RecentSteps: the vectorized engine's batched view of every sub-env's running episode, for env-to-module pieces.

The vectorized engine builds no SingleAgentEpisodes, so env-to-module pieces that read history
(``connectors.env_to_module.EnvToModulePiece``) get a ``RunningEpisodesView`` from here instead:

- ``from_cursors``: at the start of a call, each sub-env's last ``lookback_steps`` steps from its
  cursor, i.e. the running episode's lookback (the same rows a per-step continuation holds);
- ``push``: after every vector step (the carry of the last call first), each sub-env that made a
  transition writes it into its window, a ring (one column per step, nothing shifted); a sub-env
  that began a new episode (a reset, an autoreset, a soft cut, a rebuilt sub-env) starts over
  from its reset observation.

No per-sub-env Python per step: a few array assignments over the sub-envs that stepped. The
windows equal what ``RunningEpisodesView.from_episodes`` reads from the per-step engine's
episodes (``tests/ray_sampler/sampling/test_recent_steps.py``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from connectors.env_to_module.running_view import RunningEpisodesView, empty_items
from ray_sampler.data import tree
from ray_sampler.sampling.cursors import CursorBatch
from ray_sampler.sampling.recorder import StepRecord
from ray_sampler.sampling.rows import gather_rows, set_row

__all__ = ["RecentSteps"]


class RecentSteps:
    """Every sub-env's last ``lookback_steps`` steps, kept up to date step by step (see the module docstring)."""

    def __init__(self, view: RunningEpisodesView) -> None:
        self._view = view

    @classmethod
    def from_cursors(cls, cursors: CursorBatch, *, lookback_steps: int, action_space: gym.Space | None) -> RecentSteps:
        """The windows of the running episodes the cursors stand for (their lookback, their current observation)."""
        cb, h = cursors.chunks, lookback_steps
        n = len(cb.ids)
        shifts = np.arange(-h, 0)
        lb_len = np.minimum(cb.lookback_lens, h)
        exists = shifts[None, :] >= -lb_len[:, None]  # [N, h]
        rows = (cb.lookback_offsets[:n] + cb.lookback_lens)[:, None] + shifts[None, :]
        current = cb.data.observations
        observations = tree.map_structure(lambda a: np.zeros((n, h + 1, *a.shape[1:]), a.dtype), current)
        tree.map_structure(
            lambda out, a: out[:, -1].__setitem__(slice(None), a[cb.obs_offsets[:n]]), observations, current
        )
        actions = empty_items(action_space, n, h)
        rewards = np.zeros((n, h), np.float64)
        if exists.any():
            src = rows[exists]
            tree.map_structure(
                lambda out, a: out[:, :-1].__setitem__(exists, gather_rows(a, src)),
                observations,
                cb.lookback.observations,
            )
            tree.map_structure(
                lambda out, a: out.__setitem__(exists, gather_rows(a, src)), actions, cb.lookback.actions
            )
            rewards[exists] = np.asarray(cb.lookback.rewards)[src]
        # Right-aligned rows are a ring whose newest observation sits in column h and newest step in
        # column h - 1: a position that is -1 modulo both h + 1 and h.
        position = np.full(n, h * (h + 1) - 1 if h else 0, np.int64)
        return cls(RunningEpisodesView(observations, actions, rewards, lb_len + 1, lb_len.copy(), position))

    def view(self) -> RunningEpisodesView:
        """The windows now (the arrays are the tracker's own: pieces read them, never write)."""
        return self._view

    def push(self, record: StepRecord) -> None:
        """Moves the windows past ``record``'s transitions and restarts them at its resets."""
        v = self._view
        assert v.position is not None, "from_cursors builds a ring"
        h = v.lookback_steps
        step = record.step
        moved = np.flatnonzero(record.valid)
        if len(moved):
            next_obs = tree.map_structure(lambda a: a[moved], step.obs)
            if step.final_obs:
                at = {int(i): j for j, i in enumerate(moved.tolist())}
                for i, obs in step.final_obs.items():
                    if i in at:
                        set_row(next_obs, at[i], obs)
            v.position[moved] += 1
            obs_col = v.position[moved] % (h + 1)
            tree.map_structure(lambda buf, new: buf.__setitem__((moved, obs_col), new), v.observations, next_obs)
            if h:
                step_col = v.position[moved] % h
                tree.map_structure(
                    lambda buf, new: buf.__setitem__((moved, step_col), np.asarray(new)[moved]),
                    v.actions,
                    record.actions,
                )
                v.rewards[moved, step_col] = np.asarray(step.rewards)[moved]
            v.num_observations[moved] = np.minimum(v.num_observations[moved] + 1, h + 1)
            v.num_steps[moved] = np.minimum(v.num_steps[moved] + 1, h)
        for i, (obs, _) in [*step.resets.items(), *step.failed.items()]:
            col = int(v.position[i]) % (h + 1)
            tree.map_structure(lambda buf, new, i=i, col=col: buf.__setitem__((i, col), new), v.observations, obs)
            v.num_observations[i], v.num_steps[i] = 1, 0
