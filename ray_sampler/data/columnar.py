"""ColumnarEpisodes: many episode chunks as one object of contiguous arrays, the transfer format.

Layout (E chunks; chunk ``i`` has ``lens[i]`` steps and ``lookback_lens[i]`` lookback steps):

- per chunk: ``ids``, ``t_started``, ``lens``, ``lookback_lens``, ``terminated``, ``truncated``;
- ``data``, a :class:`StepRows` of the chunks' own rows one chunk after another, lookback never
  included (so it is never counted as data): ``observations`` (``lens[i] + 1`` rows per chunk),
  ``actions``, ``rewards`` and each ``extra_model_outputs[key]`` (``lens[i]`` rows per chunk),
  as (nested) arrays with a leading row axis;
- ``lookback``, a :class:`StepRows` of the same columns kept apart (``lookback_lens[i]`` rows per
  chunk for every column, observations included);
- infos, sparse on each side: only non-empty info dicts are kept, with their row numbers among
  that side's observations (``info_rows``/``info_values``);
- ``custom_data``, sparse too: chunk index -> that chunk's non-empty ``custom_data`` dict.

``episodes_to_columnar`` packs (list-form or numpy'd chunks alike); ``columnar_to_episodes``
unpacks into numpy'd episodes equal to ``[e.to_numpy() for e in episodes]``.

>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[0.5, 1.5])
>>> col = episodes_to_columnar([ep, ep.cut()])
>>> col.num_env_steps, col.lens.tolist(), col.lookback_lens.tolist(), col.data.observations.tolist()
(2, [2, 0], [0, 1], [0, 1, 2, 2])
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.lookback import LookbackBuffer
from ray_sampler.errors import DataFormatError

__all__ = [
    "ColumnarEpisodes",
    "StepRows",
    "columnar_to_episodes",
    "concat_columnar",
    "episodes_to_columnar",
    "row_offsets",
]


@dataclasses.dataclass(frozen=True, eq=False)
class StepRows:
    """One side of a ColumnarEpisodes, its data or its lookback: every per-step column, chunk after chunk."""

    observations: Any
    actions: Any
    rewards: np.ndarray
    extra_model_outputs: dict[str, Any]
    info_rows: np.ndarray
    """Rows (among this side's observations) whose info dict is not empty, increasing."""
    info_values: list[dict]
    """The info dicts of ``info_rows``, in the same order."""

    def columns(self) -> dict[str, Any]:
        """The array columns by name (``extra_model_outputs.<key>`` for model outputs)."""
        out = {"observations": self.observations, "actions": self.actions, "rewards": self.rewards}
        out.update({f"extra_model_outputs.{k}": v for k, v in self.extra_model_outputs.items()})
        return out

    def validate(self, side: str, num_obs_rows: int, num_step_rows: int) -> None:
        """Raises DataFormatError if a column's row count or the sparse infos do not fit."""
        prefix = "" if side == "data" else "lookback "
        if not isinstance(self.rewards, np.ndarray) or self.rewards.ndim != 1:
            raise DataFormatError(
                f"{prefix}'rewards' must be a 1-D array (got {getattr(self.rewards, 'shape', self.rewards)!r})"
            )
        for name, column in self.columns().items():
            rows = num_obs_rows if name == "observations" else num_step_rows
            _check_rows(f"{prefix}{name}", column, rows)
        _check_sparse(f"{prefix}info", self.info_rows, self.info_values, num_obs_rows)


@dataclasses.dataclass(frozen=True, eq=False)
class ColumnarEpisodes:
    """Episode chunks as contiguous arrays (see the module docstring for the layout)."""

    ids: list[str]
    t_started: np.ndarray
    lens: np.ndarray
    lookback_lens: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    data: StepRows
    """The chunks' own rows."""
    lookback: StepRows
    """The rows of the chunks' lookback buffers."""
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    custom_data: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Each chunk's ``SingleAgentEpisode.custom_data``, by chunk index, where not empty."""

    @property
    def num_episodes(self) -> int:
        return len(self.ids)

    @property
    def num_env_steps(self) -> int:
        """Data steps held (lookback excluded)."""
        return int(self.lens.sum())

    @property
    def obs_offsets(self) -> np.ndarray:
        """Row where each chunk's data observations start in ``data.observations`` (E + 1 entries)."""
        return row_offsets(self.lens + 1)

    @property
    def step_offsets(self) -> np.ndarray:
        """Row where each chunk's steps start in ``data.actions``/``data.rewards`` (E + 1 entries)."""
        return row_offsets(self.lens)

    @property
    def lookback_offsets(self) -> np.ndarray:
        """Row where each chunk's lookback starts in every ``lookback`` column (E + 1 entries)."""
        return row_offsets(self.lookback_lens)

    def serialized_nbytes(self) -> int:
        """Bytes this object takes as a pickle-5 payload, which is what ``ray.put`` ships."""
        return len(pickle.dumps(self, protocol=5))

    def raw_step_nbytes(self) -> int:
        """Raw bytes of one step: observation + action + reward + the two done flags."""
        leaves = tree.flatten(self.data.observations) + tree.flatten(self.data.actions) + [self.data.rewards]
        return sum(leaf.itemsize * math.prod(leaf.shape[1:]) for leaf in leaves) + 2

    def validate(self) -> None:
        """Raises DataFormatError if the fields do not agree with each other."""
        e = len(self.ids)
        for name in ("t_started", "lens", "lookback_lens", "terminated", "truncated"):
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray) or arr.shape != (e,):
                raise DataFormatError(f"'{name}' must be an array of shape ({e},) (got {getattr(arr, 'shape', arr)!r})")
        if (self.lens < 0).any() or (self.lookback_lens < 0).any():
            raise DataFormatError("'lens' and 'lookback_lens' must be >= 0")
        if (self.t_started < self.lookback_lens).any():
            raise DataFormatError("'t_started' must be >= the chunk's lookback length (>= 0)")
        if self.data.extra_model_outputs.keys() != self.lookback.extra_model_outputs.keys():
            raise DataFormatError("data and lookback 'extra_model_outputs' must have the same keys")
        custom = self.custom_data.items()
        if any(not isinstance(i, int) or not 0 <= i < e or not isinstance(d, dict) for i, d in custom):
            raise DataFormatError(f"'custom_data' must map chunk indices in [0, {e}) to dicts")
        steps, lb = int(self.lens.sum()), int(self.lookback_lens.sum())
        self.data.validate("data", steps + e, steps)
        self.lookback.validate("lookback", lb, lb)


def row_offsets(sizes: np.ndarray) -> np.ndarray:
    """Where each of consecutive blocks of ``sizes`` rows starts, and the total (len(sizes) + 1 entries).

    >>> row_offsets(np.array([2, 0, 3])).tolist()
    [0, 2, 2, 5]
    """
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _check_rows(name: str, struct: Any, rows: int) -> None:
    leaves = tree.flatten(struct)
    if not leaves:
        raise DataFormatError(f"'{name}' must hold at least one array (got an empty structure)")
    for leaf in leaves:
        if not isinstance(leaf, np.ndarray) or leaf.ndim == 0 or len(leaf) != rows:
            raise DataFormatError(f"'{name}' must hold {rows} rows (got {getattr(leaf, 'shape', type(leaf))!r})")


def _check_sparse(name: str, rows: np.ndarray, values: list, num_rows: int) -> None:
    if len(rows) != len(values):
        raise DataFormatError(f"'{name}_rows' and '{name}_values' must be equally long ({len(rows)} vs {len(values)})")
    if len(rows) and (rows.min() < 0 or rows.max() >= num_rows or (np.diff(rows) <= 0).any()):
        raise DataFormatError(f"'{name}_rows' must be increasing row numbers in [0, {num_rows})")


class _FieldPacker:
    """Collects one field's items from many chunks: list-form runs are stacked in one call."""

    def __init__(self, space: gym.Space | None) -> None:
        self.space = space
        self.pieces: list[Any] = []
        self.pending: list[Any] = []
        self.owned: list[bool] = []  # False: a view of an episode's arrays

    def add(self, part: Any) -> None:
        if isinstance(part, list):
            self.pending.extend(part)
        elif len(tree.first_leaf(part)):
            self.flush()
            self.pieces.append(part)
            self.owned.append(False)

    def flush(self) -> None:
        if self.pending:
            self.pieces.append(tree.stack(self.pending))
            self.owned.append(True)
            self.pending = []

    def result(self, other: _FieldPacker | None = None) -> Any:
        """The packed field; with no rows it takes the structure and dtypes of ``other``'s rows
        (the same field's lookback or data side), else those of the space."""
        self.flush()
        if len(self.pieces) == 1 and not self.owned[0]:
            return tree.map_structure(np.copy, self.pieces[0])  # never alias the episode's own arrays
        if self.pieces:
            return tree.concat(self.pieces)
        if other is not None:
            other.flush()
            if other.pieces:
                return tree.map_structure(lambda a: a[:0].copy(), other.pieces[0])
        buf = LookbackBuffer([], space=self.space)
        buf.to_numpy()
        return buf.data


class _SidePacker:
    """The packers of one side (data or lookback) of every column, and its infos."""

    def __init__(self, obs_space: gym.Space | None, act_space: gym.Space | None, keys: Any) -> None:
        self.obs, self.act, self.rew = _FieldPacker(obs_space), _FieldPacker(act_space), _FieldPacker(None)
        self.emo = {k: _FieldPacker(None) for k in keys}
        self.infos: list[dict] = []

    def add(self, ep: SingleAgentEpisode, start: int, obs_stop: int, step_stop: int, with_emo: bool) -> None:
        """Positions ``[start, obs_stop)`` of the observations (and infos), ``[start, step_stop)`` of the rest."""
        self.obs.add(ep.observations.view(start, obs_stop))
        self.act.add(ep.actions.view(start, step_stop))
        self.rew.add(ep.rewards.view(start, step_stop))
        if with_emo:
            for k, buf in ep.extra_model_outputs.items():
                self.emo[k].add(buf.view(start, step_stop))
        self.infos.extend(ep.infos.data[start:obs_stop])

    def result(self, other: _SidePacker) -> StepRows:
        info_rows = np.fromiter(itertools.compress(itertools.count(), self.infos), np.int64)
        return StepRows(
            observations=self.obs.result(other.obs),
            actions=self.act.result(other.act),
            rewards=self.rew.result(other.rew),
            extra_model_outputs={k: p.result(other.emo[k]) for k, p in self.emo.items()},
            info_rows=info_rows,
            info_values=[self.infos[r] for r in info_rows.tolist()],
        )


def _shape_mismatch(episodes: list[SingleAgentEpisode]) -> str | None:
    """Which item of which chunk cannot be stacked beside the others (an item of another shape
    within a chunk, or chunks whose items differ), for the error of a failed pack."""
    firsts: dict[str, tuple[int, Any]] = {}
    for i, ep in enumerate(episodes):
        fields = {"observations": ep.observations, "actions": ep.actions, "rewards": ep.rewards}
        fields.update({f"extra_model_outputs[{k!r}]": b for k, b in ep.extra_model_outputs.items()})
        for name, buf in fields.items():
            items = buf.data if isinstance(buf.data, list) else tree.unstack(buf.data)
            if not items:
                continue
            found = tree.first_mismatch(items)
            if found is not None:
                return f"'episodes[{i}]' {name} item {found[0]} (lookback counted first) has {found[1]}"
            j, first = firsts.setdefault(name, (i, items[0]))
            found = tree.first_mismatch([first, items[0]])
            if found is not None:
                return f"'episodes[{i}]' {name} have {found[1].replace('the first', f'episodes[{j}]')}"
    return None


def episodes_to_columnar(episodes: list[SingleAgentEpisode]) -> ColumnarEpisodes:
    """Packs episode chunks (list-form or numpy'd, with lookback) into one ColumnarEpisodes."""
    if not isinstance(episodes, list | tuple):
        raise DataFormatError(f"'episodes' must be a list of SingleAgentEpisode (got {type(episodes).__name__})")
    if not episodes:
        raise DataFormatError("'episodes' must hold at least one episode (got none)")
    for i, ep in enumerate(episodes):
        if not isinstance(ep, SingleAgentEpisode):
            raise DataFormatError(f"'episodes[{i}]' must be a SingleAgentEpisode (got {type(ep).__name__}: {ep!r:.60})")
    first = episodes[0]
    # A chunk without any action (not even in its lookback) has no model outputs yet; any key set fits it.
    keyed = next((ep for ep in episodes if ep.actions.num_total()), first)
    keys = keyed.extra_model_outputs.keys()
    obs_space, act_space = first.observation_space, first.action_space
    data, look = _SidePacker(obs_space, act_space, keys), _SidePacker(obs_space, act_space, keys)
    num = len(episodes)
    lens = np.empty(num, np.int64)
    lookback_lens = np.empty(num, np.int64)
    for i, ep in enumerate(episodes):
        if not ep.is_reset:
            raise DataFormatError(f"'episodes[{i}]' (id_ {ep.id_!r}) has no observations; call add_env_reset first")
        has_steps = bool(ep.actions.num_total())
        if ep.extra_model_outputs.keys() != keys and has_steps:
            raise DataFormatError(
                f"'episodes[{i}]' has extra_model_outputs keys {sorted(ep.extra_model_outputs)}, "
                f"episodes[0] has {sorted(keys)}; all chunks must agree"
            )
        h = ep.len_lookback_buffer
        lookback_lens[i] = h
        lens[i] = len(ep)
        look.add(ep, 0, h, h, has_steps)
        data.add(ep, h, ep.observations.num_total(), ep.actions.num_total(), has_steps)
    try:
        data_rows, look_rows = data.result(look), look.result(data)
    except (ValueError, TypeError) as e:  # numpy's "inhomogeneous shape": say which item
        why = _shape_mismatch(list(episodes))
        if why is None:
            raise
        raise DataFormatError(f"episodes_to_columnar: {why}; every item of a field must have its space's shape") from e
    return ColumnarEpisodes(
        ids=[ep.id_ for ep in episodes],
        t_started=np.fromiter((ep.t_started for ep in episodes), np.int64, num),
        lens=lens,
        lookback_lens=lookback_lens,
        terminated=np.fromiter((ep.is_terminated for ep in episodes), bool, num),
        truncated=np.fromiter((ep.is_truncated for ep in episodes), bool, num),
        data=data_rows,
        lookback=look_rows,
        observation_space=obs_space,
        action_space=act_space,
        custom_data={i: ep.custom_data for i, ep in enumerate(episodes) if ep.custom_data},
    )


def columnar_to_episodes(col: ColumnarEpisodes) -> list[SingleAgentEpisode]:
    """Unpacks into numpy'd episodes (lookback rows joined in front of each chunk's data)."""
    col.validate()
    obs_off, step_off, lb_off = col.obs_offsets, col.step_offsets, col.lookback_offsets
    infos = _dense_infos(col.data.info_rows, col.data.info_values, int(obs_off[-1]))
    lookback_infos = _dense_infos(col.lookback.info_rows, col.lookback.info_values, int(lb_off[-1]))
    data, look = col.data, col.lookback
    out = []
    for i, id_ in enumerate(col.ids):
        o0, o1, s0, s1, l0, l1 = obs_off[i], obs_off[i + 1], step_off[i], step_off[i + 1], lb_off[i], lb_off[i + 1]
        h = int(l1 - l0)

        def joined(lookback: Any, rows: Any, a: int, b: int, l0: int = l0, l1: int = l1) -> Any:
            return tree.map_structure(lambda lb, d: np.concatenate([lb[l0:l1], d[a:b]]), lookback, rows)

        out.append(
            SingleAgentEpisode.from_buffers(
                id_,
                observations=LookbackBuffer(
                    joined(look.observations, data.observations, o0, o1), lookback=h, space=col.observation_space
                ),
                actions=LookbackBuffer(joined(look.actions, data.actions, s0, s1), lookback=h, space=col.action_space),
                rewards=LookbackBuffer(joined(look.rewards, data.rewards, s0, s1), lookback=h),
                infos=LookbackBuffer(lookback_infos[l0:l1] + infos[o0:o1], lookback=h),
                extra_model_outputs={
                    k: LookbackBuffer(joined(look.extra_model_outputs[k], v, s0, s1), lookback=h)
                    for k, v in data.extra_model_outputs.items()
                },
                t_started=int(col.t_started[i]),
                terminated=bool(col.terminated[i]),
                truncated=bool(col.truncated[i]),
                observation_space=col.observation_space,
                action_space=col.action_space,
                custom_data=dict(col.custom_data[i]) if i in col.custom_data else None,
            )
        )
    return out


def _dense_infos(rows: np.ndarray, values: list[dict], num_rows: int) -> list[dict]:
    dense: list[dict] = [{} for _ in range(num_rows)]
    for r, v in zip(rows.tolist(), values):
        dense[r] = v
    return dense


def _concat_sides(sides: list[StepRows], obs_rows: list[int], keys: Any) -> StepRows:
    """One StepRows of ``sides`` in order; ``obs_rows`` is each side's observation row count."""
    base = np.cumsum([0, *obs_rows[:-1]])
    return StepRows(
        observations=tree.concat([s.observations for s in sides]),
        actions=tree.concat([s.actions for s in sides]),
        rewards=tree.concat([s.rewards for s in sides]),
        extra_model_outputs={
            k: tree.concat([s.extra_model_outputs[k] for s in sides if k in s.extra_model_outputs]) for k in keys
        },
        info_rows=np.concatenate([s.info_rows + b for s, b in zip(sides, base)]),
        info_values=[v for s in sides for v in s.info_values],
    )


def concat_columnar(parts: list[ColumnarEpisodes]) -> ColumnarEpisodes:
    """One ColumnarEpisodes holding the chunks of ``parts`` in order."""
    if len(parts) == 1:
        return parts[0]
    keyed = [p for p in parts if p.num_env_steps or int(p.lookback_lens.sum())]
    keys = (keyed or parts)[0].data.extra_model_outputs.keys()
    if any(p.data.extra_model_outputs.keys() != keys for p in keyed):
        raise DataFormatError("concat_columnar: parts hold different extra_model_outputs keys")

    def cat(get: Any) -> Any:
        return tree.concat([get(p) for p in parts])

    return ColumnarEpisodes(
        ids=[i for p in parts for i in p.ids],
        t_started=cat(lambda p: p.t_started),
        lens=cat(lambda p: p.lens),
        lookback_lens=cat(lambda p: p.lookback_lens),
        terminated=cat(lambda p: p.terminated),
        truncated=cat(lambda p: p.truncated),
        data=_concat_sides([p.data for p in parts], [p.num_env_steps + p.num_episodes for p in parts], keys),
        lookback=_concat_sides([p.lookback for p in parts], [int(p.lookback_lens.sum()) for p in parts], keys),
        observation_space=parts[0].observation_space,
        action_space=parts[0].action_space,
        custom_data={
            int(first) + i: d
            for p, first in zip(parts, np.cumsum([0] + [q.num_episodes for q in parts[:-1]]))
            for i, d in p.custom_data.items()
        },
    )
