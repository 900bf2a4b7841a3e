"""The n-step gather: transitions starting at given stored steps, summed over up to n steps.

A transition starting at step ``off`` of segment ``seg`` has ``obs`` (that step's observation),
``actions``, ``rewards``, ``next_obs``, ``terminateds``/``truncateds``, ``n_step``, ``t``, ``keys``
(``order << 32 | t``: stable ids of the sampled steps, for ``update_priorities``), the stored model
outputs of the first step (``include_extra_model_outputs``) and the infos at ``next_obs``
(``include_infos``, an object array of dicts). The walk follows the episode's segments, so a
transition never spans two episodes; ``n_step`` may differ per transition (an array).

The n-step rule. With ``m = min(n, e - t)``, where ``e`` is the timestep after the episode's last
*stored* step: ``rewards = sum_{i<m} gamma**i * r_{t+i}``, ``next_obs = o_{t+m}``, ``n_step = m``
(the steps really used, so a learner's bootstrap discount ``gamma ** n_step`` matches the sum),
``terminateds``/``truncateds`` are the episode's flags where ``t + m == e`` and the episode is done,
else False. So at a terminal the walk stops there (``terminateds``: no bootstrap), at a truncation
it stops there (``truncateds``; bootstrap from the final observation with ``gamma ** m``), and at
the end of a stored chunk of a running episode it stops with both flags False (bootstrap from the
last stored observation with ``gamma ** m``; a later chunk of the episode extends later walks).

>>> from ray_sampler.data.columnar import episodes_to_columnar
>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> from replay.storage import EpisodeStorage
>>> storage = EpisodeStorage(capacity_env_steps=10)
>>> storage.add(episodes_to_columnar([SingleAgentEpisode("a", observations=[0, 1, 2, 3], actions=[0, 0, 0],
...                                                      rewards=[1.0, 2.0, 4.0], terminated=True)]))
3
>>> out = n_step_transitions(storage, np.array([0, 0]), np.array([0, 2]), n_step=2, gamma=0.5)
>>> out["rewards"].tolist(), out["next_obs"].tolist(), out["n_step"].tolist(), out["terminateds"].tolist()
([2.0, 4.0], [2, 3], [2, 1], [False, True])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replay.frame_stacks import stacked_observations, stacked_transition_observations
from replay.storage import EpisodeStorage

__all__ = ["n_step_transitions"]


def n_step_transitions(
    storage: EpisodeStorage,
    seg: np.ndarray,
    off: np.ndarray,
    *,
    n_step: int | np.ndarray,
    gamma: float,
    include_extra_model_outputs: bool = True,
    include_infos: bool = False,
    frame_stack: int | None = None,
) -> dict[str, Any]:
    """The n-step transitions starting at step ``off`` of segments ``seg``, ``n_step`` one int or
    one per transition (see the module docstring). With ``frame_stack`` k, ``obs`` and ``next_obs``
    are each the last k observations, [B, k, ...] (``replay.frame_stacks``)."""
    max_n = int(n_step.max()) if isinstance(n_step, np.ndarray) else n_step
    view = storage.segment_view()
    first_seg, first_off = seg, off
    first_step = view.step_start[seg] + off
    t = view.t_started[seg] + off
    # The first step: every transition takes it.
    rewards = np.zeros(len(seg), np.float64)
    rewards += storage.rewards_at(first_step)
    used = np.ones(len(seg), np.int64)
    last_in_seg = off == view.num_steps[seg] - 1
    ends = last_in_seg & (view.next[seg] < 0)  # the episode's last stored step
    terminated = ends & view.ends_terminated[seg]
    truncated = ends & view.ends_truncated[seg]
    next_seg, next_pos = seg, off + 1
    if max_n > 1:  # the walk on, while any transition has steps left
        active = ~ends
        if isinstance(n_step, np.ndarray):
            active &= n_step > 1
        discount = np.full(len(seg), gamma, np.float64)
        for j in range(1, max_n):
            if not active.any():
                break
            seg, off = (
                np.where(active & last_in_seg, view.next[seg], seg),
                np.where(active & last_in_seg, 0, np.where(active, off + 1, off)),
            )
            rewards += np.where(active, discount * storage.rewards_at(view.step_start[seg] + off), 0.0)
            discount = np.where(active, discount * gamma, discount)
            used += active
            next_seg, next_pos = np.where(active, seg, next_seg), np.where(active, off + 1, next_pos)
            last_in_seg = off == view.num_steps[seg] - 1
            ends = last_in_seg & (view.next[seg] < 0)
            terminated |= active & ends & view.ends_terminated[seg]
            truncated |= active & ends & view.ends_truncated[seg]
            active &= ~ends
            if isinstance(n_step, np.ndarray):
                active &= j + 1 < n_step
    out: dict[str, Any] = {
        "obs": None,
        "actions": storage.gather_actions(first_step),
        "t": t,
        "keys": view.order[first_seg] * (1 << 32) + t,
        "rewards": rewards,
        "next_obs": None,
        "terminateds": terminated,
        "truncateds": truncated,
        "n_step": used,
    }
    if frame_stack is None:
        out["obs"] = storage.gather_observations(view.obs_start[first_seg] + first_off)
        out["next_obs"] = storage.gather_observations(view.obs_start[next_seg] + next_pos)
    elif max_n == 1:  # next_obs is the observation after obs: one row computation for both stacks
        out["obs"], out["next_obs"] = stacked_transition_observations(storage, first_seg, first_off, frame_stack)
    else:
        out["obs"] = stacked_observations(storage, first_seg, first_off, frame_stack)
        out["next_obs"] = stacked_observations(storage, next_seg, next_pos, frame_stack)
    if include_extra_model_outputs:
        out.update(storage.gather_extra_model_outputs(first_step))
    if include_infos:
        out["infos"] = storage.gather_infos(view.obs_start[next_seg] + next_pos)
    return out
