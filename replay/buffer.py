"""EpisodeReplayBuffer: episode storage plus uniform sampling of (n-step) transitions.

``add`` takes what a runner ships (a ColumnarEpisodes, or a list of episodes) and stores it
through :class:`replay.storage.EpisodeStorage`. ``sample(batch_size_B, n_step, gamma)`` draws
stored steps uniformly (lookback never counts) and returns a flat batch: ``obs``, ``actions``,
``rewards`` (the discounted sum over up to ``n_step`` steps), ``next_obs`` (the observation
after the last step used), ``terminateds``, ``truncateds``, ``n_step`` (the steps really used:
fewer at an episode's last stored step, and never through ``terminated=True``), ``t`` and the
stored model outputs of the first step. A transition never spans two episodes. Sampling is
deterministic given the buffer's seed.

>>> from ray_sampler import SingleAgentEpisode
>>> buf = EpisodeReplayBuffer(capacity_env_steps=100, seed=0)
>>> ep = SingleAgentEpisode(observations=[0, 1, 2, 3], actions=[0, 0, 0], rewards=[1.0, 2.0, 4.0],
...                         terminated=True)
>>> buf.add([ep])
3
>>> batch = buf.sample(50, n_step=3, gamma=0.5)
>>> sorted(set(zip(batch["obs"].tolist(), batch["rewards"].tolist(), batch["n_step"].tolist())))
[(0, 3.0, 3), (1, 4.0, 2), (2, 4.0, 1)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay.storage import EpisodeStorage

__all__ = ["EpisodeReplayBuffer"]


class EpisodeReplayBuffer:
    """A capacity-bounded store of episode chunks, sampled as transitions."""

    def __init__(self, *, capacity_env_steps: int = 1_000_000, capacity_bytes: int | None = None,
                 seed: int | None = None) -> None:
        self.storage = EpisodeStorage(capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes)
        self.rng = np.random.default_rng(seed)
        self._tables: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        """Stored env steps (lookback excluded)."""
        return self.storage.num_steps

    @property
    def num_episodes(self) -> int:
        return len(self.storage.episodes)

    def add(self, data: ColumnarEpisodes | list[SingleAgentEpisode]) -> int:
        """Stores episode chunks (all or none; see EpisodeStorage); returns the env steps stored."""
        col = data if isinstance(data, ColumnarEpisodes) else episodes_to_columnar(data) if data else None
        if col is None:
            return 0
        added = self.storage.add(col)
        self._tables = None
        return added

    def _sampling_tables(self) -> dict[str, np.ndarray]:
        """Per live segment: cumulative steps for drawing, and which segment ends a done episode."""
        if self._tables is None:
            s = self.storage
            live = np.flatnonzero(s.seg_alive & (s.seg_len > 0))
            terminated = np.zeros(len(s.seg_len), bool)
            truncated = np.zeros(len(s.seg_len), bool)
            for ep in s.episodes.values():
                terminated[ep.last_segment] = ep.terminated
                truncated[ep.last_segment] = ep.truncated
            self._tables = {"live": live, "cum": np.cumsum(s.seg_len[live]), "terminated": terminated,
                            "truncated": truncated}
        return self._tables

    def sample(self, batch_size_B: int, *, n_step: int = 1, gamma: float = 0.99) -> dict[str, Any]:
        """``batch_size_B`` transitions drawn uniformly over stored steps (see the module docstring)."""
        if not isinstance(batch_size_B, int) or batch_size_B < 1:
            raise ReplayError(f"'batch_size_B' must be an int >= 1 (got {batch_size_B!r})")
        if not isinstance(n_step, int) or n_step < 1:
            raise ReplayError(f"'n_step' must be an int >= 1 (got {n_step!r})")
        if not 0.0 <= gamma <= 1.0:
            raise ReplayError(f"'gamma' must be in [0, 1] (got {gamma!r})")
        if not len(self):
            raise ReplayError("the buffer holds no steps to sample")
        s, tables = self.storage, self._sampling_tables()
        live, cum = tables["live"], tables["cum"]
        draw = self.rng.integers(0, int(cum[-1]), batch_size_B)
        k = np.searchsorted(cum, draw, side="right")
        seg = live[k]
        off = draw - (cum[k] - s.seg_len[seg])
        first_step = s.seg_step[seg] + off
        out: dict[str, Any] = {
            "obs": s.obs.gather(s.seg_obs[seg] + off),
            "actions": s.actions.gather(first_step),
            "t": s.seg_t[seg] + off,
        }
        rewards_all = s.rewards.leaves[0]
        rewards = np.zeros(batch_size_B, np.float64)
        discount = np.ones(batch_size_B, np.float64)
        used = np.zeros(batch_size_B, np.int64)
        terminated = np.zeros(batch_size_B, bool)
        truncated = np.zeros(batch_size_B, bool)
        next_row = s.seg_obs[seg] + off + 1
        active = np.ones(batch_size_B, bool)
        for j in range(n_step):
            rewards += np.where(active, discount * rewards_all[s.seg_step[seg] + off], 0.0)
            discount = np.where(active, discount * gamma, discount)
            used += active
            next_row = np.where(active, s.seg_obs[seg] + off + 1, next_row)
            last_in_seg = off == s.seg_len[seg] - 1
            ends = last_in_seg & (s.seg_next[seg] < 0)  # the episode's last stored step
            terminated |= active & ends & tables["terminated"][seg]
            truncated |= active & ends & tables["truncated"][seg]
            active &= ~ends
            if j == n_step - 1 or not active.any():
                break
            seg, off = np.where(active & last_in_seg, s.seg_next[seg], seg), np.where(
                active & last_in_seg, 0, np.where(active, off + 1, off))
        out.update(rewards=rewards, next_obs=s.obs.gather(next_row), terminateds=terminated, truncateds=truncated,
                   n_step=used)
        for key, rows in (s.extras or {}).items():
            out[key] = rows.gather(first_step)
        return out

    def get_metrics(self) -> dict[str, Any]:
        s = self.storage
        return {
            "num_env_steps": s.num_steps,
            "num_episodes": len(s.episodes),
            "num_evicted_episodes": s.num_evicted_episodes,
            "num_evicted_env_steps": s.num_evicted_steps,
            "nbytes": s.nbytes(),
            "step_nbytes": s.step_nbytes(),
        }
