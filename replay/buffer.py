"""EpisodeReplayBuffer: episode storage plus uniform sampling of (n-step) transitions.

``add`` takes what a runner ships (a ColumnarEpisodes, or a list of episodes) and stores it
through :class:`replay.storage.EpisodeStorage`. ``sample(batch_size_B, n_step, gamma)`` draws
stored steps uniformly (lookback never counts) and returns a flat batch: ``obs``, ``actions``,
``rewards`` (the discounted sum over up to ``n_step`` steps), ``next_obs`` (the observation
after the last step used), ``terminateds``, ``truncateds``, ``n_step`` (the steps really used:
fewer at an episode's last stored step, and never through ``terminated=True``), ``t``, ``keys``
(stable ids of the sampled steps, for ``update_priorities``) and the stored model outputs of the
first step. A transition never spans two episodes. Sampling is
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

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.lookback import LookbackBuffer
from ray_sampler.errors import ReplayError
from replay.storage import EpisodeStorage

__all__ = ["BatchList", "EpisodeReplayBuffer"]


class BatchList(Sequence):
    """Equal batches held as one batch of all their rows: a sequence of batch dicts (views) that
    ships through Ray as a few arrays rather than a dict of arrays per batch.

    >>> batches = BatchList({"obs": np.arange(6)}, 2)
    >>> len(batches), batches[1]["obs"].tolist(), [b["obs"].tolist() for b in batches][-1]
    (3, [2, 3], [4, 5])
    """

    def __init__(self, whole: dict[str, Any], batch_size_B: int) -> None:
        self.whole, self.batch_size_B = whole, batch_size_B
        self._len = len(tree.first_leaf(next(iter(whole.values())))) // batch_size_B if whole else 0

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict[str, Any]:  # type: ignore[override]
        if isinstance(index, slice):
            raise TypeError("BatchList takes one batch index, not a slice")
        index = operator.index(index)
        if not -self._len <= index < self._len:
            raise IndexError(f"batch {index} of {self._len}")
        start = (index % self._len) * self.batch_size_B
        # Observations of Dict/Tuple spaces are nested: every leaf is cut the same way.
        return {k: tree.map_structure(lambda a: a[start : start + self.batch_size_B], v) for k, v in self.whole.items()}


class EpisodeReplayBuffer:
    """A capacity-bounded store of episode chunks, sampled as transitions."""

    def __init__(
        self, *, capacity_env_steps: int = 1_000_000, capacity_bytes: int | None = None, seed: int | None = None
    ) -> None:
        self.storage = EpisodeStorage(capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes)
        self.rng = np.random.default_rng(seed)
        self._tables: dict[str, np.ndarray] | None = None
        self._tables_version = -1

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
        return self.storage.add(col)

    def _sampling_tables(self) -> dict[str, np.ndarray]:
        """Live segments in (episode insertion order, time) order with their cumulative steps, so a
        draw picks the same step whatever the physical layout (a restored buffer samples alike);
        and which segment ends a done episode."""
        s = self.storage
        if self._tables is None or self._tables_version != s.version:
            live = np.flatnonzero(s.seg_alive & (s.seg_len > 0))
            live = live[np.lexsort((s.seg_t[live], s.seg_order[live]))]
            terminated = np.zeros(len(s.seg_len), bool)
            truncated = np.zeros(len(s.seg_len), bool)
            for ep in s.episodes.values():
                terminated[ep.last_segment] = ep.terminated
                truncated[ep.last_segment] = ep.truncated
            self._tables = {
                "live": live,
                "cum": np.cumsum(s.seg_len[live]),
                "terminated": terminated,
                "truncated": truncated,
            }
            self._tables_version = s.version
        return self._tables

    def sample(self, batch_size_B: int, *, n_step: int = 1, gamma: float = 0.99) -> dict[str, Any]:
        """``batch_size_B`` transitions drawn uniformly over stored steps (see the module docstring)."""
        if not isinstance(batch_size_B, int) or batch_size_B < 1:
            raise ReplayError(f"'batch_size_B' must be an int >= 1 (got {batch_size_B!r})")
        if not isinstance(n_step, int) or n_step < 1:
            raise ReplayError(f"'n_step' must be an int >= 1 (got {n_step!r})")
        if not 0.0 <= gamma <= 1.0:
            raise ReplayError(f"'gamma' must be in [0, 1] (got {gamma!r})")
        return self._transitions(*self._draw(batch_size_B), n_step, gamma)

    def sample_batches(
        self,
        batch_size_B: int,
        num_batches: int,
        *,
        n_step: int = 1,
        gamma: float = 0.99,
    ) -> BatchList:
        """``num_batches`` batches of ``batch_size_B``: one draw of all their transitions, split
        (far cheaper than ``num_batches`` calls of ``sample`` for small batches)."""
        if not isinstance(num_batches, int) or isinstance(num_batches, bool) or num_batches < 1:
            raise ReplayError(f"'num_batches' must be an int >= 1 (got {num_batches!r})")
        if not isinstance(batch_size_B, int) or isinstance(batch_size_B, bool) or batch_size_B < 1:
            raise ReplayError(f"'batch_size_B' must be an int >= 1 (got {batch_size_B!r})")
        return BatchList(self.sample(batch_size_B * num_batches, n_step=n_step, gamma=gamma), batch_size_B)

    def _draw(self, batch_size_B: int) -> tuple[np.ndarray, np.ndarray]:
        """Uniformly drawn stored steps, as (segment, step within it)."""
        if not len(self):
            raise ReplayError("the buffer holds no steps to sample")
        tables = self._sampling_tables()
        live, cum = tables["live"], tables["cum"]
        draw = self.rng.integers(0, int(cum[-1]), batch_size_B)
        k = np.searchsorted(cum, draw, side="right")
        seg = live[k]
        return seg, draw - (cum[k] - self.storage.seg_len[seg])

    def _transitions(self, seg: np.ndarray, off: np.ndarray, n_step: int, gamma: float) -> dict[str, Any]:
        """The n-step transitions starting at step ``off`` of segments ``seg``."""
        s, tables = self.storage, self._sampling_tables()
        batch_size_B = len(seg)
        first_step = s.seg_step[seg] + off
        out: dict[str, Any] = {
            "obs": s.obs.gather(s.seg_obs[seg] + off),
            "actions": s.actions.gather(first_step),
            "t": s.seg_t[seg] + off,
            "keys": s.seg_order[seg] * (1 << 32) + s.seg_t[seg] + off,
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
            seg, off = (
                np.where(active & last_in_seg, s.seg_next[seg], seg),
                np.where(active & last_in_seg, 0, np.where(active, off + 1, off)),
            )
        out.update(
            rewards=rewards, next_obs=s.obs.gather(next_row), terminateds=terminated, truncateds=truncated, n_step=used
        )
        for key, rows in (s.extras or {}).items():
            out[key] = rows.gather(first_step)
        return out

    def save(self, path: str, *, row_group_env_steps: int = 65536, drop_infos: bool = False) -> int:
        """Writes the buffer to a Parquet file (see replay.persistence); returns the row groups written."""
        from replay.persistence import save_buffer

        return save_buffer(self, path, row_group_env_steps=row_group_env_steps, drop_infos=drop_infos)

    @classmethod
    def restore(cls, path: str, *, seed: int | None = None, **kwargs: Any) -> EpisodeReplayBuffer:
        """The buffer saved at ``path``: same contents, eviction order and sampling RNG state
        (``seed`` overrides the RNG state); ``kwargs`` go to the constructor (e.g. ``alpha``)."""
        from replay.persistence import restore_buffer

        return restore_buffer(path, seed=seed, buffer_class=cls, **kwargs)

    def set_capacity(self, capacity_env_steps: int, capacity_bytes: int | None = None) -> None:
        """New capacities; the oldest episodes go now if the buffer holds more."""
        fresh = EpisodeStorage(capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes)  # checks them
        self.storage.capacity_env_steps, self.storage.capacity_bytes = fresh.capacity_env_steps, fresh.capacity_bytes
        self.storage._evict()
        self.storage.version += 1

    def get_state(self) -> dict[str, Any]:
        """Contents (one ColumnarEpisodes, episodes in eviction order), capacities, counters, RNG state."""
        s = self.storage
        return {
            "episodes": s.episodes_columnar(list(s.episodes)) if s.episodes else None,
            "capacity_env_steps": s.capacity_env_steps,
            "capacity_bytes": s.capacity_bytes,
            "num_evicted_episodes": s.num_evicted_episodes,
            "num_evicted_env_steps": s.num_evicted_steps,
            "first_order": s.first_order(),
            "rng_state": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Replaces everything with ``get_state()`` output."""
        self.storage = EpisodeStorage(
            capacity_env_steps=state["capacity_env_steps"], capacity_bytes=state["capacity_bytes"]
        )
        self.storage.start_order(state["first_order"])
        if state["episodes"] is not None:
            self.storage.add(state["episodes"])
        self.storage.num_evicted_episodes = state["num_evicted_episodes"]
        self.storage.num_evicted_steps = state["num_evicted_env_steps"]
        self.rng.bit_generator.state = state["rng_state"]
        self._tables = None

    def sample_episodes(self, batch_size_B: int, batch_length_T: int, *, lookback: int = 1) -> list[SingleAgentEpisode]:
        """``batch_size_B`` numpy'd episode chunks for learner connectors: each starts at a stored
        step drawn uniformly and holds up to ``batch_length_T`` steps of that episode (fewer at its
        last stored step), with up to ``lookback`` earlier steps as its lookback (from the stored
        steps, then the stored episode's own lookback). Flags are kept where a chunk reaches the end
        of a done episode."""
        for name, value, low in (
            ("batch_size_B", batch_size_B, 1),
            ("batch_length_T", batch_length_T, 1),
            ("lookback", lookback, 0),
        ):
            if not isinstance(value, int) or value < low:
                raise ReplayError(f"'{name}' must be an int >= {low} (got {value!r})")
        segs, offs = self._draw(batch_size_B)
        s = self.storage
        rows_cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        out = []
        for seg, off in zip(segs.tolist(), offs.tolist()):
            id_ = s.seg_episode[seg]
            if id_ not in rows_cache:
                rows_cache[id_] = self._episode_rows(id_)
            obs_rows, step_rows, lb_rows = rows_cache[id_]
            ep = s.episodes[id_]
            start = int(s.seg_t[seg]) - ep.t_started + off  # step index within the stored episode
            stop = min(start + batch_length_T, ep.num_steps)
            from_data = min(lookback, start)
            from_lb = min(lookback - from_data, len(lb_rows))
            h = from_data + from_lb
            lb_sel = lb_rows[len(lb_rows) - from_lb :]
            ends = stop == ep.num_steps
            out.append(
                self._chunk(
                    id_,
                    ep.t_started + start,
                    h,
                    lb_sel,
                    obs_rows[start - from_data : stop + 1],
                    step_rows[start - from_data : stop],
                    ends and ep.terminated,
                    ends and ep.truncated,
                )
            )
        return out

    def _episode_rows(self, id_: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stored rows of an episode: observations (steps + 1), steps, and its stored lookback."""
        s = self.storage
        segs = s.segments_of(id_)
        first = segs[0]
        obs = [np.arange(s.seg_obs[first], s.seg_obs[first] + s.seg_len[first] + 1)]
        obs += [np.arange(s.seg_obs[g] + 1, s.seg_obs[g] + s.seg_len[g] + 1) for g in segs[1:]]
        steps = [np.arange(s.seg_step[g], s.seg_step[g] + s.seg_len[g]) for g in segs]
        lb = np.arange(s.seg_lb[first], s.seg_lb[first] + s.seg_lb_len[first])
        return np.concatenate(obs), np.concatenate(steps), lb

    def _chunk(
        self,
        id_: str,
        t_started: int,
        h: int,
        lb_rows: np.ndarray,
        obs_rows: np.ndarray,
        step_rows: np.ndarray,
        terminated: bool,
        truncated: bool,
    ) -> SingleAgentEpisode:
        """A numpy'd chunk: ``len(lb_rows)`` steps from the stored lookback, then stored rows."""
        s = self.storage
        joined = lambda lb_store, store, rows: tree.map_structure(  # noqa: E731
            lambda a, b: np.concatenate([a, b]),
            (lb_store if lb_store.is_set else store).gather(lb_rows),
            store.gather(rows),
        )
        infos = [s.lb_infos.get(int(r)) or {} for r in lb_rows.tolist()] + [
            s.infos.get(int(r)) or {} for r in obs_rows.tolist()
        ]
        extras = s.extras or {}
        return SingleAgentEpisode.from_buffers(
            id_,
            observations=LookbackBuffer(joined(s.lb_obs, s.obs, obs_rows), lookback=h),
            actions=LookbackBuffer(joined(s.lb_actions, s.actions, step_rows), lookback=h),
            rewards=LookbackBuffer(joined(s.lb_rewards, s.rewards, step_rows), lookback=h),
            infos=LookbackBuffer(infos, lookback=h),
            extra_model_outputs={
                k: LookbackBuffer(joined(s.lb_extras[k], rows, step_rows), lookback=h) for k, rows in extras.items()
            },
            t_started=t_started,
            terminated=terminated,
            truncated=truncated,
            observation_space=None,
            action_space=None,
        )

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
