"""EpisodeReplayBuffer: episode storage plus a sampler, sampled as (n-step) transitions.

The buffer is composed: an :class:`~replay.storage.EpisodeStorage` holds the episodes, a sampler
(:class:`~replay.uniform.UniformSampler` here, the prioritized one in
:mod:`replay.prioritized`) draws stored steps with the buffer's seeded RNG, and
:func:`~replay.n_step.n_step_transitions` gathers the transitions there. ``add`` takes what a
runner ships (a ColumnarEpisodes, one episode or a list of them). ``sample(batch_size_B, n_step,
gamma)`` returns a flat batch: ``obs``, ``actions``, ``rewards``, ``next_obs``, ``terminateds``,
``truncateds``, ``n_step``, ``t``, ``keys``, and on request the first steps' model outputs and the
infos at ``next_obs`` (see :mod:`replay.n_step`); RLlib's argument forms work too (``capacity``,
``num_items``, ``n_step=(low, high)``, ``sample_episodes=True``; see :mod:`replay.compat`), as do
RLlib's counters (``get_num_timesteps`` ...). Sampling is deterministic given the buffer's seed.
Parquet persistence is :func:`replay.persistence.save_buffer` / :func:`replay.persistence.restore_buffer`.

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
from typing import Any, Literal, overload

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from ray_sampler.validate import check_bool, check_int, check_optional, check_probability
from replay.compat import NStep, as_columnar, draw_n_step, n_step_range, resolve_alias
from replay.metrics import BufferMetrics
from replay.n_step import n_step_transitions
from replay.sampler import Draw, Sampler
from replay.state import ReplayState
from replay.storage import EpisodeRows, EpisodeStorage
from replay.transition_episodes import transition_episodes
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
        self,
        capacity: int | None = None,
        *,
        capacity_env_steps: int | None = None,
        capacity_bytes: int | None = None,
        batch_size_B: int = 16,
        batch_length_T: int = 64,
        seed: int | None = None,
    ) -> None:
        self._compose(
            UniformSampler(),
            capacity=capacity,
            capacity_env_steps=capacity_env_steps,
            capacity_bytes=capacity_bytes,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            seed=seed,
        )

    def _compose(
        self,
        sampler: Sampler,
        *,
        capacity: int | None,
        capacity_env_steps: int | None,
        capacity_bytes: int | None,
        batch_size_B: int,
        batch_length_T: int,
        seed: int | None,
    ) -> None:
        """storage + sampler; ``sample_episodes`` always draws uniformly. ``capacity`` is RLlib's
        name of ``capacity_env_steps``."""
        capacity_env_steps = resolve_alias(
            "capacity_env_steps", capacity_env_steps, "capacity", capacity, default=10**6
        )
        self._storage = EpisodeStorage(
            capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes, listener=sampler
        )
        self.sampler = sampler
        self._episode_sampler = sampler if isinstance(sampler, UniformSampler) else UniformSampler()
        self.batch_size_B = check_int("batch_size_B", batch_size_B, minimum=1, error=ReplayError)
        """Default of ``sample``'s, ``sample_batches``' and ``sample_episodes``' ``batch_size_B``."""
        self.batch_length_T = check_int("batch_length_T", batch_length_T, minimum=1, error=ReplayError)
        """Default of ``sample_episodes``' ``batch_length_T`` (``sample`` draws single transitions
        unless given one, as RLlib's ``sample_episodes=True`` path)."""
        self.rng = np.random.default_rng(check_optional(check_int, "seed", seed, minimum=0, error=ReplayError))
        self._num_env_steps_sampled = 0

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

    # ---------------------------------------------------------------- RLlib's counters
    def get_num_episodes(self) -> int:
        """Stored episodes (a restored episode split by a gap counts as two pieces)."""
        return self._storage.num_episodes

    def get_num_episodes_evicted(self) -> int:
        """Episodes evicted over the buffer's lifetime."""
        return self._storage.num_evicted_episodes

    def get_num_timesteps(self) -> int:
        """Stored env steps (lookback excluded), as ``len``."""
        return self._storage.num_steps

    def get_added_timesteps(self) -> int:
        """Env steps added over the buffer's lifetime: the stored ones plus the evicted ones (re-sent
        steps skipped as duplicates never count)."""
        return self._storage.num_steps + self._storage.num_evicted_steps

    def get_sampled_timesteps(self) -> int:
        """Items sampled over the buffer's lifetime: one per transition (whatever its n-step, as
        RLlib), and the env steps of each chunk ``sample_episodes`` returned (lookback excluded)."""
        return self._num_env_steps_sampled

    def add(self, data: ColumnarEpisodes | SingleAgentEpisode | Sequence[SingleAgentEpisode] | None) -> int:
        """Stores episode chunks (all or none; see EpisodeStorage): one episode, a list of them or a
        ColumnarEpisodes; returns the env steps still stored after eviction."""
        col = as_columnar(data)
        if col is None:
            return 0
        return self._storage.add(col)

    # ---------------------------------------------------------------- sampling
    def _batch_size(self, batch_size_B: int | None, num_items: int | None = None) -> int:
        """``batch_size_B`` or RLlib's ``num_items``, else the buffer's default."""
        b = resolve_alias("batch_size_B", batch_size_B, "num_items", num_items, default=self.batch_size_B)
        return check_int("batch_size_B", b, minimum=1, error=ReplayError)

    def _draw(self, batch_size_B: int, beta: float | None) -> Draw:
        """The sampler's draw; ``beta`` is for prioritized buffers only."""
        if beta is not None:
            raise ReplayError(
                f"'beta' (got {beta!r}) applies to a PrioritizedEpisodeReplayBuffer; this buffer draws uniformly"
            )
        return self.sampler.draw(self._storage, batch_size_B, self.rng)

    def _remember_keys(self, keys: np.ndarray | None) -> None:
        """Told the keys of every batch sampled (None: episode chunks, no transitions); the
        prioritized buffer keeps them for ``update_priorities(priorities)``."""

    @overload
    def sample(
        self,
        batch_size_B: int | None = None,
        *,
        num_items: int | None = None,
        batch_length_T: int | None = None,
        n_step: NStep | None = 1,
        gamma: float = 0.99,
        beta: float | None = None,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        sample_episodes: Literal[False] = False,
        lookback: int = 0,
        frame_stack: int | None = None,
    ) -> dict[str, Any]: ...

    @overload
    def sample(
        self,
        batch_size_B: int | None = None,
        *,
        num_items: int | None = None,
        batch_length_T: int | None = None,
        n_step: NStep | None = 1,
        gamma: float = 0.99,
        beta: float | None = None,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        sample_episodes: Literal[True],
        lookback: int = 0,
        frame_stack: None = None,
    ) -> list[SingleAgentEpisode]: ...

    def sample(
        self,
        batch_size_B: int | None = None,
        *,
        num_items: int | None = None,
        batch_length_T: int | None = None,
        n_step: NStep | None = 1,
        gamma: float = 0.99,
        beta: float | None = None,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        sample_episodes: bool = False,
        lookback: int = 0,
        frame_stack: int | None = None,
    ) -> dict[str, Any] | list[SingleAgentEpisode]:
        """``batch_size_B`` (or RLlib's ``num_items``; default: the buffer's) transitions drawn by
        the sampler, ``n_step`` an int or an inclusive ``(low, high)`` range drawn per transition:
        a flat batch (see the module docstring), or with ``sample_episodes`` RLlib's 1-step
        transition episodes (see :mod:`replay.transition_episodes`), or with ``sample_episodes``
        and a ``batch_length_T`` the episode chunks of :meth:`sample_episodes` (``n_step`` 1).
        ``include_extra_model_outputs`` adds the stored model outputs of each first step,
        ``include_infos`` the infos at ``next_obs`` (both off by default, as RLlib). ``frame_stack`` k
        makes ``obs`` and ``next_obs`` each the last k observations, [B, k, ...], oldest first, built
        from the stored frames (each stored once) and the stored lookback, filled with zeros before
        the episode's start: what the learner's ``FrameStacking(num_frames=k)`` builds (flat batches only)."""
        batch_size_B = self._batch_size(batch_size_B, num_items)
        n = n_step_range(n_step)
        check_probability("gamma", gamma, error=ReplayError)
        for name, flag in (
            ("include_infos", include_infos),
            ("include_extra_model_outputs", include_extra_model_outputs),
        ):
            check_bool(name, flag, error=ReplayError)
        if batch_length_T:  # None or 0: single transitions, as RLlib
            if not sample_episodes:
                raise ReplayError(
                    f"'batch_length_T' (got {batch_length_T!r}) needs sample_episodes=True: the flat batch holds "
                    "single (n-step) transitions"
                )
            if n != 1:
                raise ReplayError(f"'n_step' must be 1 when sampling sequences (batch_length_T) (got {n_step!r})")
            return self.sample_episodes(batch_size_B, batch_length_T, lookback=lookback)
        if frame_stack is not None:
            check_int("frame_stack", frame_stack, minimum=1, error=ReplayError)
            if sample_episodes:
                raise ReplayError("'frame_stack' stacks the flat batch's obs and next_obs; it takes no sample_episodes")
        draw = self._draw(batch_size_B, beta)
        out = n_step_transitions(
            self._storage,
            draw.segments,
            draw.offsets,
            n_step=draw_n_step(n, batch_size_B, self.rng),
            gamma=gamma,
            include_extra_model_outputs=include_extra_model_outputs,
            include_infos=include_infos,
            frame_stack=frame_stack,
        )
        if draw.weights is not None:
            out["weights"] = draw.weights
        self._remember_keys(out["keys"])
        self._num_env_steps_sampled += batch_size_B
        if not sample_episodes:
            return out
        s = self._storage
        ids = [s.segment_episode(seg) for seg in draw.segments.tolist()]
        view = s.segment_view()
        infos_t = s.gather_infos(view.obs_start[draw.segments] + draw.offsets) if include_infos else None
        return transition_episodes(out, ids, infos_t=infos_t)

    def sample_batches(
        self,
        batch_size_B: int | None,
        num_batches: int,
        *,
        n_step: NStep | None = 1,
        gamma: float = 0.99,
        beta: float | None = None,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        frame_stack: int | None = None,
    ) -> BatchList:
        """``num_batches`` batches of ``batch_size_B``: one draw of all their transitions, split
        (far cheaper than ``num_batches`` calls of ``sample`` for small batches)."""
        check_int("num_batches", num_batches, minimum=1, error=ReplayError)
        batch_size_B = self._batch_size(batch_size_B)
        whole = self.sample(
            batch_size_B * num_batches,
            n_step=n_step,
            gamma=gamma,
            beta=beta,
            include_infos=include_infos,
            include_extra_model_outputs=include_extra_model_outputs,
            frame_stack=frame_stack,
        )
        return BatchList(whole, batch_size_B)

    def sample_episodes(
        self, batch_size_B: int | None = None, batch_length_T: int | None = None, *, lookback: int = 1
    ) -> list[SingleAgentEpisode]:
        """``batch_size_B`` numpy'd episode chunks for learner connectors (defaults: the buffer's
        sizes): each starts at a stored step drawn uniformly and holds up to ``batch_length_T``
        steps of that episode (fewer at its last stored step), with up to ``lookback`` earlier
        steps as its lookback (from the stored steps, then the stored episode's own lookback).
        Flags are kept where a chunk reaches the end of a done episode. Chunks always carry their
        infos and model outputs, as RLlib's sliced episodes."""
        batch_size_B = self._batch_size(batch_size_B)
        batch_length_T = self.batch_length_T if batch_length_T is None else batch_length_T
        check_int("batch_length_T", batch_length_T, minimum=1, error=ReplayError)
        check_int("lookback", lookback, minimum=0, error=ReplayError)
        s = self._storage
        draw = self._episode_sampler.draw(s, batch_size_B, self.rng)
        self._remember_keys(None)
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
            self._num_env_steps_sampled += stop - start
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
            num_env_steps_sampled=self._num_env_steps_sampled,
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
        self._num_env_steps_sampled = state.num_env_steps_sampled
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
