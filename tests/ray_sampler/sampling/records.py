"""Hand-made vector steps for the vectorized engine's tests: scalar observations, exact values."""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.cursors import CursorBatch
from ray_sampler.sampling.recorder import StepRecord
from ray_sampler.sampling.vector import VectorStep


def record(
    obs: list[int],
    *,
    done: tuple[int, ...] = (),
    valid: list[bool] | None = None,
    resets: dict[int, int] | None = None,
    final_obs: dict[int, int] | None = None,
    infos: dict[int, dict] | None = None,
) -> StepRecord:
    """One vector step of len(obs) sub-envs: obs row i is ``[obs[i]]``, reward = obs, action = 10 * obs;
    ``done`` sub-envs terminate; ``resets`` maps a sub-env to its reset observation (info ``{"r": obs}``)."""
    n = len(obs)
    obs_b = np.array(obs, np.int64)[:, None]
    terminated = np.zeros(n, bool)
    terminated[list(done)] = True
    step = VectorStep(
        obs=obs_b,
        final_obs={i: np.array([o]) for i, o in (final_obs or {}).items()},
        rewards=obs_b[:, 0].astype(np.float64),
        terminated=terminated,
        truncated=np.zeros(n, bool),
        infos=infos or {},
        valid=np.array(valid if valid is not None else [True] * n),
        resets={i: (np.array([o]), {"r": o}) for i, o in (resets or {}).items()},
        current_obs=obs_b,
    )
    return StepRecord(step, obs_b[:, 0] * 10, {"vf": obs_b[:, 0].astype(np.float32)}, step.valid)


def cursors(*first_obs: int, ids: str = "ab") -> CursorBatch:
    """Zero-step cursors with the given first observations (ids from ``ids``), no lookback."""
    return CursorBatch.from_episodes(
        [SingleAgentEpisode(ids[i], observations=[np.array([o])]) for i, o in enumerate(first_obs)]
    )


def counter() -> Any:
    """A ``new_id`` giving "n1", "n2", ..."""
    count = iter(range(1, 10**6))
    return lambda: f"n{next(count)}"
