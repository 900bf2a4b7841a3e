"""EpisodeReplayBuffer: episode storage plus a sampler, sampled as (n-step) transitions.

The buffer is composed: an :class:`~replay.storage.EpisodeStorage` holds the episodes, a sampler
(:class:`~replay.uniform.UniformSampler` here, the prioritized one in
:mod:`replay.prioritized`) draws stored steps with the buffer's seeded RNG, and
:func:`~replay.n_step.n_step_transitions` gathers the transitions there. ``add`` takes what a
runner ships (a ColumnarEpisodes, or a list of episodes). ``sample(batch_size_B, n_step, gamma)``
returns a flat batch: ``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminateds``,
``truncateds``, ``n_step``, ``t``, ``keys`` and the stored model outputs (see
:mod:`replay.n_step`). Sampling is deterministic given the buffer's seed. Parquet persistence
is :func:`replay.persistence.save_buffer` / :func:`replay.persistence.restore_buffer`.

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
from ray_sampler.errors import ReplayError
from ray_sampler.validate import check_int, check_optional, check_probability
from replay.metrics import BufferMetrics
from replay.n_step import n_step_transitions
from replay.sampler import Draw, Sampler
from replay.state import ReplayState
from replay.storage import EpisodeRows, EpisodeStorage
from replay.uniform import UniformSampler

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

    def __getitem__(self, index: int) -> dict[str, Any]:  # type: ignore[override]  # one batch, never a slice
        if isinstance(index, slice):
            raise TypeError("BatchList takes one batch index, not a slice")
        index = operator.index(index)
        if not -self._len <= index < self._len:
            raise IndexError(f"batch {index} of {self._len}")
        start = (index % self._len) * self.batch_size_B
        # Observations of Dict/Tuple spaces are nested: every leaf is cut the same way.
        return {k: tree.map_structure(lambda a: a[start : start + self.batch_size_B], v) for k, v in self.whole.items()}


class EpisodeReplayBuffer:
    """A capacity-bounded store of episode chunks, sampled uniformly as transitions."""

    def __init__(
        self, *, capacity_env_steps: int = 1_000_000, capacity_bytes: int | None = None, seed: int | None = None
    ) -> None:
        self._compose(UniformSampler(), capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes, seed=seed)

    def _compose(
        self, sampler: Sampler, *, capacity_env_steps: int, capacity_bytes: int | None, seed: int | None
    ) -> None:
        """storage + sampler; ``sample_episodes`` always draws uniformly."""
        self._storage = EpisodeStorage(
            capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes, listener=sampler
        )
        self.sampler = sampler
        self._episode_sampler = sampler if isinstance(sampler, UniformSampler) else UniformSampler()
        self.rng = np.random.default_rng(check_optional(check_int, "seed", seed, minimum=0, error=ReplayError))

    @property
    def storage(self) -> EpisodeStorage:
        """The episode storage (read it through its read API)."""
        return self._storage

    def __len__(self) -> int:
        """Stored env steps (lookback excluded)."""
        return self._storage.num_steps

    @property
    def num_episodes(self) -> int:
        return self._storage.num_episodes

    def add(self, data: ColumnarEpisodes | list[SingleAgentEpisode]) -> int:
        """Stores episode chunks (all or none; see EpisodeStorage); returns the env steps stored."""
        col = data if isinstance(data, ColumnarEpisodes) else episodes_to_columnar(data) if data else None
        if col is None:
            return 0
        return self._storage.add(col)

    # ---------------------------------------------------------------- sampling
    @staticmethod
    def _check_sample_args(batch_size_B: int, n_step: int, gamma: float) -> None:
        check_int("batch_size_B", batch_size_B, minimum=1, error=ReplayError)
        check_int("n_step", n_step, minimum=1, error=ReplayError)
        check_probability("gamma", gamma, error=ReplayError)

    def _transitions(self, draw: Draw, n_step: int, gamma: float) -> dict[str, Any]:
        out = n_step_transitions(self._storage, draw.segments, draw.offsets, n_step=n_step, gamma=gamma)
        if draw.weights is not None:
            out["weights"] = draw.weights
        return out

    def sample(self, batch_size_B: int, *, n_step: int = 1, gamma: float = 0.99) -> dict[str, Any]:
        """``batch_size_B`` transitions drawn by the sampler (see the module docstring)."""
        self._check_sample_args(batch_size_B, n_step, gamma)
        return self._transitions(self.sampler.draw(self._storage, batch_size_B, self.rng), n_step, gamma)

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
        check_int("num_batches", num_batches, minimum=1, error=ReplayError)
        check_int("batch_size_B", batch_size_B, minimum=1, error=ReplayError)
        return BatchList(self.sample(batch_size_B * num_batches, n_step=n_step, gamma=gamma), batch_size_B)

    def sample_episodes(self, batch_size_B: int, batch_length_T: int, *, lookback: int = 1) -> list[SingleAgentEpisode]:
        """``batch_size_B`` numpy'd episode chunks for learner connectors: each starts at a stored
        step drawn uniformly and holds up to ``batch_length_T`` steps of that episode (fewer at its
        last stored step), with up to ``lookback`` earlier steps as its lookback (from the stored
        steps, then the stored episode's own lookback). Flags are kept where a chunk reaches the end
        of a done episode."""
        check_int("batch_size_B", batch_size_B, minimum=1, error=ReplayError)
        check_int("batch_length_T", batch_length_T, minimum=1, error=ReplayError)
        check_int("lookback", lookback, minimum=0, error=ReplayError)
        s = self._storage
        draw = self._episode_sampler.draw(s, batch_size_B, self.rng)
        t_started = s.segment_view().t_started
        rows_cache: dict[str, EpisodeRows] = {}
        out = []
        for seg, off in zip(draw.segments.tolist(), draw.offsets.tolist()):
            id_ = s.segment_episode(seg)
            if id_ not in rows_cache:
                rows_cache[id_] = s.episode_rows(id_)
            ep = s.episodes[id_]
            start = int(t_started[seg]) - ep.t_started + off  # step index within the stored episode
            stop = min(start + batch_length_T, ep.num_steps)
            out.append(s.episode_chunk(id_, start=start, stop=stop, lookback=lookback, rows=rows_cache[id_]))
        return out

    # ---------------------------------------------------------------- state
    def set_capacity(self, capacity_env_steps: int, capacity_bytes: int | None = None) -> None:
        """New capacities; the oldest episodes go now if the buffer holds more."""
        self._storage.set_capacity(capacity_env_steps, capacity_bytes)

    def get_state(self, *, with_episodes: bool = True) -> ReplayState:
        """Contents (one ColumnarEpisodes, episodes in eviction order; left out without
        ``with_episodes``), capacities, counters, RNG state."""
        s = self._storage
        return ReplayState(
            capacity_env_steps=s.capacity_env_steps,
            capacity_bytes=s.capacity_bytes,
            num_evicted_episodes=s.num_evicted_episodes,
            num_evicted_env_steps=s.num_evicted_steps,
            first_order=s.first_order(),
            rng_state=dict(self.rng.bit_generator.state),
            episodes=s.episodes_columnar(list(s.episodes)) if with_episodes and s.num_episodes else None,
        )

    def set_state(self, state: ReplayState) -> None:
        """Replaces everything with ``get_state()`` output (the RNG state too, unless it is None)."""
        self.sampler.reset()
        self._episode_sampler.reset()
        storage = EpisodeStorage(
            capacity_env_steps=state.capacity_env_steps, capacity_bytes=state.capacity_bytes, listener=self.sampler
        )
        storage.start_order(state.first_order)
        self._storage = storage
        if state.episodes is not None:
            storage.add(state.episodes)
        storage.set_eviction_counts(
            num_evicted_episodes=state.num_evicted_episodes, num_evicted_steps=state.num_evicted_env_steps
        )
        if state.rng_state is not None:
            self.rng.bit_generator.state = state.rng_state

    def get_metrics(self) -> BufferMetrics:
        s = self._storage
        return BufferMetrics(
            num_env_steps=s.num_steps,
            num_episodes=s.num_episodes,
            num_evicted_episodes=s.num_evicted_episodes,
            num_evicted_env_steps=s.num_evicted_steps,
            nbytes=s.nbytes(),
            step_nbytes=s.step_nbytes(),
        )
