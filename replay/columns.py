"""StoredColumns: the replay storage's step columns: data rows, lookback rows and sparse infos.

Data rows hold every stored segment's observations (``num_steps + 1`` rows) and steps (action,
reward, model outputs); lookback rows hold the lookback of chunks that began a stored episode.
Infos are sparse: only non-empty ones are kept, keyed by observation (or lookback) row. The
columns know nothing of segments or episodes: the storage passes row numbers and the rows to
reserve (see :mod:`replay.rows` for growth and in-place compaction).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, StepRows
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.lookback import LookbackBuffer
from ray_sampler.errors import ReplayError
from replay.rows import Rows, RowsMark, remap_rows

__all__ = ["ColumnsMark", "EpisodeMeta", "StoredColumns"]


@dataclasses.dataclass(frozen=True)
class ColumnsMark:
    """What ``StoredColumns.rollback`` needs to undo the appends made after ``mark``: each
    column's rows in use, spec and dtypes; no arrays and no copies of the infos."""

    rows: tuple[tuple[Rows, RowsMark], ...]
    extras: dict[str, Rows] | None
    lb_extras: dict[str, Rows]


@dataclasses.dataclass(frozen=True)
class EpisodeMeta:
    """Per-episode fields of a ColumnarEpisodes built from stored rows."""

    ids: list[str]
    t_started: np.ndarray
    lens: np.ndarray
    lookback_lens: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class StoredColumns:
    """Growing columns of stored rows (see the module docstring)."""

    def __init__(self) -> None:
        self.observations, self.actions, self.rewards = Rows(), Rows(), Rows()
        self.extras: dict[str, Rows] | None = None
        """Model output columns by key; None until the first add fixes the keys."""
        self.lb_observations, self.lb_actions, self.lb_rewards = Rows(), Rows(), Rows()
        self.lb_extras: dict[str, Rows] = {}
        self.infos: dict[int, dict] = {}
        self.lb_infos: dict[int, dict] = {}
        self._reserve_rows = 0

    def _data_rows(self) -> list[Rows]:
        return [self.observations, self.actions, self.rewards, *(self.extras or {}).values()]

    def _all_rows(self) -> list[Rows]:
        return [
            self.observations,
            self.actions,
            self.rewards,
            *(self.extras or {}).values(),
            self.lb_observations,
            self.lb_actions,
            self.lb_rewards,
            *self.lb_extras.values(),
        ]

    # ---------------------------------------------------------------- writing
    @property
    def num_obs_rows(self) -> int:
        return self.observations.rows

    @property
    def num_step_rows(self) -> int:
        return self.actions.rows

    def check_keys(self, col: ColumnarEpisodes) -> None:
        """Raises ReplayError unless ``col`` carries the stored model output keys. Changes nothing."""
        keys = set(col.data.extra_model_outputs)
        if self.extras is not None and col.num_env_steps and keys != set(self.extras):
            raise ReplayError(
                f"chunks must carry the stored extra_model_outputs keys {sorted(self.extras)} (got {sorted(keys)})"
            )

    def check_rows(self, col: ColumnarEpisodes, *, with_lookback: bool) -> None:
        """Raises ReplayError unless every column's structure, shape and dtype (and the lookback's, if
        it will be stored) fits the stored ones. Changes nothing."""
        self.observations.check(col.data.observations, "observations")
        self.actions.check(col.data.actions, "actions")
        self.rewards.check(col.data.rewards, "rewards")
        for k, rows in (self.extras or {}).items():
            rows.check(col.data.extra_model_outputs[k], f"extra_model_outputs[{k!r}]")
        if with_lookback:
            for rows, data, stored, name in (
                (self.lb_observations, col.lookback.observations, self.observations, "lookback observations"),
                (self.lb_actions, col.lookback.actions, self.actions, "lookback actions"),
                (self.lb_rewards, col.lookback.rewards, self.rewards, "lookback rewards"),
            ):
                rows.check(data, name)
                stored.check(data, name)  # lookback rows sit beside data rows in sampled chunks
            for k, rows in self.lb_extras.items():
                rows.check(col.lookback.extra_model_outputs[k], f"lookback extra_model_outputs[{k!r}]")

    def mark(self) -> ColumnsMark:
        """The columns as they are. Appends write only past the used rows, so each column's row
        count, spec and dtypes are enough to undo them (see ``Rows.rollback``)."""
        return ColumnsMark(
            rows=tuple((r, r.mark()) for r in self._all_rows()),
            extras=self.extras,
            lb_extras=dict(self.lb_extras),
        )

    def rollback(self, mark: ColumnsMark) -> None:
        """Undoes every append made after ``mark``: the rows before it are untouched, the infos of
        the rows after it dropped."""
        for r, rows_mark in mark.rows:
            r.rollback(rows_mark)
        self.extras, self.lb_extras = mark.extras, dict(mark.lb_extras)
        for infos, rows in ((self.infos, self.observations.rows), (self.lb_infos, self.lb_observations.rows)):
            for key in [k for k in infos if k >= rows]:
                del infos[key]

    def reserve(self, rows: int) -> None:
        """Rows the data columns allocate at once when they must grow (the storage's capacity)."""
        self._reserve_rows = rows
        for r in self._data_rows():
            r.reserve_rows = rows

    def fit(self, rows: int) -> None:
        """Reallocates the data columns to ``rows`` rows (at least the rows in use) if they hold more."""
        for r in self._data_rows():
            r.fit(rows)

    @staticmethod
    def step_nbytes_of(col: ColumnarEpisodes) -> int:
        """Bytes of one step of ``col`` as stored: its observation, action, reward and model outputs."""
        data = col.data
        columns = [data.observations, data.actions, data.rewards, *data.extra_model_outputs.values()]
        return sum(a.itemsize * int(np.prod(a.shape[1:])) for c in columns for a in tree.flatten(c))

    def room(self) -> tuple[int, int]:
        """Observation and step rows that can be appended without growing the columns."""
        return (
            self.observations.allocated_rows - self.observations.rows,
            self.actions.allocated_rows - self.actions.rows,
        )

    def append(self, col: ColumnarEpisodes) -> tuple[int, int]:
        """Appends ``col``'s data rows and infos; returns the first new observation and step rows."""
        base_obs = self.observations.append(col.data.observations, "observations")
        base_step = self.actions.append(col.data.actions, "actions")
        self.rewards.append(col.data.rewards, "rewards")
        if self.extras is None:
            self.extras = {k: Rows() for k in col.data.extra_model_outputs}
            self.lb_extras = {k: Rows() for k in col.data.extra_model_outputs}
            for rows in self.extras.values():
                rows.reserve_rows = self._reserve_rows
        for k, rows in self.extras.items():
            rows.append(col.data.extra_model_outputs[k], f"extra_model_outputs[{k!r}]")
        for r, info in zip(col.data.info_rows.tolist(), col.data.info_values):
            self.infos[base_obs + r] = info
        return base_obs, base_step

    def append_lookback(self, col: ColumnarEpisodes, index: np.ndarray) -> int:
        """Appends ``col``'s lookback rows ``index`` and their infos; returns the first new row."""
        base = self.lb_observations.append(
            tree.map_structure(lambda a: a[index], col.lookback.observations), "lookback"
        )
        self.lb_actions.append(tree.map_structure(lambda a: a[index], col.lookback.actions), "lookback")
        self.lb_rewards.append(col.lookback.rewards[index], "lookback")
        for k, rows in self.lb_extras.items():
            rows.append(tree.map_structure(lambda a: a[index], col.lookback.extra_model_outputs[k]), "lookback")
        row_of = {int(old): base + j for j, old in enumerate(index.tolist())}
        for r, info in zip(col.lookback.info_rows.tolist(), col.lookback.info_values):
            if r in row_of:
                self.lb_infos[row_of[r]] = info
        return base

    def keep(self, obs_rows: np.ndarray, step_rows: np.ndarray, lb_rows: np.ndarray) -> None:
        """Keeps only the given rows (ascending), renumbered from 0, in place: compaction."""
        self.infos = remap_rows(self.infos, obs_rows)
        self.lb_infos = remap_rows(self.lb_infos, lb_rows)
        for rows, index in (
            (self.observations, obs_rows),
            (self.actions, step_rows),
            (self.rewards, step_rows),
            *((r, step_rows) for r in (self.extras or {}).values()),
            (self.lb_observations, lb_rows),
            (self.lb_actions, lb_rows),
            (self.lb_rewards, lb_rows),
            *((r, lb_rows) for r in self.lb_extras.values()),
        ):
            if rows.is_set:
                rows.keep(index)

    # ---------------------------------------------------------------- reading
    def gather_observations(self, rows: np.ndarray) -> Any:
        return self.observations.gather(rows)

    def gather_actions(self, rows: np.ndarray) -> Any:
        return self.actions.gather(rows)

    def observation_leaves(self) -> tuple[Any, list[np.ndarray], list[np.ndarray]]:
        lookback = self.lb_observations.leaves if self.lb_observations.is_set else []
        return self.observations.spec, self.observations.leaves, lookback

    def rewards_at(self, rows: np.ndarray) -> np.ndarray:
        """Rewards of step ``rows`` (rewards are one flat column)."""
        return self.rewards.leaves[0][rows]

    def gather_extra_model_outputs(self, rows: np.ndarray) -> dict[str, Any]:
        return {key: r.gather(rows) for key, r in (self.extras or {}).items()}

    def gather_infos(self, obs_rows: np.ndarray) -> np.ndarray:
        """Infos of observation ``obs_rows`` (``{}`` where none was kept), as an object array."""
        out = np.empty(len(obs_rows), object)
        out[:] = [self.infos.get(r) or {} for r in obs_rows.tolist()]
        return out

    def to_columnar(
        self, meta: EpisodeMeta, obs_rows: np.ndarray, step_rows: np.ndarray, lb_rows: np.ndarray
    ) -> ColumnarEpisodes:
        """A ColumnarEpisodes of the given rows (each episode's rows consecutive, in ``meta`` order)."""

        def sparse(store: dict[int, dict], rows: np.ndarray) -> tuple[np.ndarray, list[dict]]:
            keys = np.fromiter(store, np.int64, len(store))
            hits = np.flatnonzero(np.isin(rows, keys))
            return hits.astype(np.int64), [store[int(r)] for r in rows[hits].tolist()]

        def lookback(rows: Rows, data: Rows) -> Any:
            return rows.gather(lb_rows) if rows.is_set else data.gather(lb_rows[:0])

        info_rows, info_values = sparse(self.infos, obs_rows)
        lb_info_rows, lb_info_values = sparse(self.lb_infos, lb_rows)
        extras = self.extras or {}
        return ColumnarEpisodes(
            ids=list(meta.ids),
            t_started=meta.t_started,
            lens=meta.lens,
            lookback_lens=meta.lookback_lens,
            terminated=meta.terminated,
            truncated=meta.truncated,
            data=StepRows(
                observations=self.observations.gather(obs_rows),
                actions=self.actions.gather(step_rows),
                rewards=self.rewards.gather(step_rows),
                extra_model_outputs={k: rows.gather(step_rows) for k, rows in extras.items()},
                info_rows=info_rows,
                info_values=info_values,
            ),
            lookback=StepRows(
                observations=lookback(self.lb_observations, self.observations),
                actions=lookback(self.lb_actions, self.actions),
                rewards=lookback(self.lb_rewards, self.rewards),
                extra_model_outputs={k: lookback(self.lb_extras[k], rows) for k, rows in extras.items()},
                info_rows=lb_info_rows,
                info_values=lb_info_values,
            ),
        )

    def chunk(
        self,
        id_: str,
        *,
        t_started: int,
        lb_rows: np.ndarray,
        obs_rows: np.ndarray,
        step_rows: np.ndarray,
        lookback: int,
        terminated: bool,
        truncated: bool,
    ) -> SingleAgentEpisode:
        """A numpy'd episode chunk: ``lb_rows`` from the stored lookback, then ``obs_rows`` and
        ``step_rows`` of stored data, the first ``lookback`` steps of all that as its lookback."""
        joined = lambda lb_store, store, rows: tree.map_structure(  # noqa: E731
            lambda a, b: np.concatenate([a, b]),
            (lb_store if lb_store.is_set else store).gather(lb_rows),
            store.gather(rows),
        )
        infos = [self.lb_infos.get(int(r)) or {} for r in lb_rows.tolist()] + [
            self.infos.get(int(r)) or {} for r in obs_rows.tolist()
        ]
        extras = self.extras or {}
        h = lookback
        return SingleAgentEpisode.from_buffers(
            id_,
            observations=LookbackBuffer(joined(self.lb_observations, self.observations, obs_rows), lookback=h),
            actions=LookbackBuffer(joined(self.lb_actions, self.actions, step_rows), lookback=h),
            rewards=LookbackBuffer(joined(self.lb_rewards, self.rewards, step_rows), lookback=h),
            infos=LookbackBuffer(infos, lookback=h),
            extra_model_outputs={
                k: LookbackBuffer(joined(self.lb_extras[k], rows, step_rows), lookback=h) for k, rows in extras.items()
            },
            t_started=t_started,
            terminated=terminated,
            truncated=truncated,
            observation_space=None,
            action_space=None,
        )

    # ---------------------------------------------------------------- sizes
    def step_nbytes(self) -> int:
        """Bytes of one stored step: its observation, action, reward and model outputs."""
        if not self.observations.is_set:
            return 0
        return (
            self.observations.row_nbytes()
            + self.actions.row_nbytes()
            + self.rewards.row_nbytes()
            + sum(r.row_nbytes() for r in (self.extras or {}).values())
        )

    def nbytes(self) -> int:
        """Bytes the arrays hold (allocated, room to grow included)."""
        return sum(r.nbytes() for r in self._all_rows() if r.is_set)
