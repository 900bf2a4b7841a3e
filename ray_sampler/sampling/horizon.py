"""EpisodeEnds: ``soft_horizon`` cuts and ``no_done_at_end``, applied to each VectorStep at the vector boundary.

Both options change only what a runner *records* at an episode's end; ``VectorStepper`` applies
them to every ``VectorStep`` it returns, so both engines, every batch mode and every autoreset
mode see the same steps and need no change of their own.

- ``max_episode_steps`` alone: the env gets gymnasium's ``TimeLimit`` (a native vector env its
  ``max_episode_steps``), so the episode ends with ``truncated=True`` and the env is reset.
- ``soft_horizon``: the env gets no limit of ours (``env_time_limit``); the runner counts each
  sub-env's steps since its episode began (a reset, an autoreset, a rebuilt sub-env, or a soft
  cut) and at ``max_episode_steps`` cuts the episode without resetting the env: the step is
  recorded with ``truncated=True`` (the learner bootstraps from its last observation), and a new
  episode (new id, ``t_started`` 0) begins from that same observation, with a copy of that
  step's infos. A stateful module starts the new episode from its initial state, as at any
  episode start. The env's own ends (its ``terminated``, its own ``TimeLimit``) still end the
  episode and reset the env as usual; a step that ends the episode anyway is not cut.
- ``no_done_at_end``: an env's ``terminated=True`` is recorded as ``truncated=True`` (the env still
  ends and resets as usual), so GAE and n-step targets bootstrap through every end. The env's
  own flag is not kept (not in the infos either: they stay the env's); a learner that needs it
  is run without the option.

The stepper holds no ``EpisodeEnds`` when both options are off: no work per step then.

>>> import numpy as np
>>> from ray_sampler.sampling.vector import VectorStep
>>> def step(obs: list[int]) -> VectorStep:
...     flags, valid = np.zeros(len(obs), bool), np.ones(len(obs), bool)
...     rows = np.array(obs)[:, None]
...     return VectorStep(rows, {}, np.zeros(len(obs)), flags, flags.copy(), {}, valid, {}, rows)
>>> ends = EpisodeEnds(2, soft_horizon=2)
>>> ends.apply(step([1, 1])).truncated.tolist()
[False, False]
>>> cut = ends.apply(step([2, 2]))
>>> cut.truncated.tolist(), {i: o.tolist() for i, (o, _) in cut.resets.items()}
([True, True], {0: [2], 1: [2]})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ray_sampler.data import tree

if TYPE_CHECKING:
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.vector import VectorStep

__all__ = ["EpisodeEnds", "env_time_limit"]


def env_time_limit(config: EnvRunnerConfig) -> int | None:
    """The step limit the env itself gets (gymnasium's ``TimeLimit``, or a native vector env's
    ``max_episode_steps``): ``max_episode_steps``, or None with ``soft_horizon`` (the runner cuts
    there, and the env must not reset)."""
    return None if config.soft_horizon else config.max_episode_steps


class EpisodeEnds:
    """Rewrites the ends of a runner's VectorSteps (see the module docstring)."""

    def __init__(self, num_envs: int, *, soft_horizon: int | None = None, no_done_at_end: bool = False) -> None:
        self.soft_horizon = soft_horizon
        """Steps after which an episode is cut without a reset (None: no soft horizon)."""
        self.no_done_at_end = no_done_at_end
        """Record ``terminated=True`` as ``truncated=True``."""
        self._num_steps = np.zeros(num_envs, np.int64)
        """Each sub-env's steps since its episode began."""

    @classmethod
    def from_config(cls, config: EnvRunnerConfig, num_envs: int) -> EpisodeEnds | None:
        """The runner's EpisodeEnds; None when neither option is on."""
        if not (config.soft_horizon or config.no_done_at_end):
            return None
        horizon = config.max_episode_steps if config.soft_horizon else None
        return cls(num_envs, soft_horizon=horizon, no_done_at_end=config.no_done_at_end)

    def restart(self) -> None:
        """Every sub-env was reset: each begins a new episode."""
        self._num_steps[:] = 0

    def apply(self, step: VectorStep) -> VectorStep:
        """``step`` with its ends rewritten (its arrays and dicts are replaced, never written into:
        a vector env may own them)."""
        if self.no_done_at_end and step.terminated.any():
            step.truncated = step.truncated | step.terminated
            step.terminated = np.zeros_like(step.terminated)
        if self.soft_horizon is not None:
            self._cut(step, self.soft_horizon)
        return step

    def _cut(self, step: VectorStep, horizon: int) -> None:
        num_steps = self._num_steps
        num_steps += step.valid
        restarted = [*step.resets, *step.failed]
        if restarted:
            num_steps[restarted] = 0
        at_horizon = num_steps >= horizon
        if not at_horizon.any():
            return
        # A step that ends the episode anyway (NEXT_STEP: its reset comes with the next step) is not cut.
        cut = np.flatnonzero(at_horizon & ~(step.terminated | step.truncated)).tolist()
        if not cut:
            return
        num_steps[cut] = 0
        step.truncated = step.truncated.copy()
        step.truncated[cut] = True
        step.resets = dict(step.resets)
        for i in cut:  # the new episode begins where the cut one ended: same observation, its infos
            step.resets[i] = (_row_copy(step.obs, i), dict(step.infos.get(i) or {}))


def _row_copy(batch: Any, i: int) -> Any:
    """Sub-env ``i``'s item of a batched (possibly nested) observation, copied."""
    if isinstance(batch, np.ndarray):
        return batch[i].copy()
    return tree.map_structure(lambda a: np.array(a[i]), batch)
