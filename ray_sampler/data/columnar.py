"""ColumnarEpisodes: many episode chunks as one object of contiguous arrays, the transfer format.

Layout (E chunks; chunk ``i`` has ``lens[i]`` steps and ``lookback_lens[i]`` lookback steps):

- per chunk: ``ids``, ``t_started``, ``lens``, ``lookback_lens``, ``terminated``, ``truncated``;
- data, chunks one after another, lookback never included (so it is never counted as data):
  ``observations`` (``lens[i] + 1`` rows per chunk), ``actions``, ``rewards`` and each
  ``extra_model_outputs[key]`` (``lens[i]`` rows per chunk) — (nested) arrays, leading row axis;
- lookback, kept apart: ``lookback_observations``, ``lookback_actions``, ``lookback_rewards``,
  ``lookback_extra_model_outputs`` (``lookback_lens[i]`` rows per chunk);
- infos, sparse: only non-empty info dicts are kept, with their row numbers among the data
  observations (``info_rows``/``info_values``) or among the lookback ones.

``episodes_to_columnar`` packs (list-form or numpy'd chunks alike); ``columnar_to_episodes``
unpacks into numpy'd episodes equal to ``[e.to_numpy() for e in episodes]``.

>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[0.5, 1.5])
>>> col = episodes_to_columnar([ep, ep.cut()])
>>> col.num_env_steps, col.lens.tolist(), col.lookback_lens.tolist(), col.observations.tolist()
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

__all__ = ["ColumnarEpisodes", "columnar_to_episodes", "concat_columnar", "episodes_to_columnar"]


@dataclasses.dataclass(frozen=True, eq=False)
class ColumnarEpisodes:
    """Episode chunks as contiguous arrays (see the module docstring for the layout)."""

    ids: list[str]
    t_started: np.ndarray
    lens: np.ndarray
    lookback_lens: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    observations: Any
    actions: Any
    rewards: np.ndarray
    extra_model_outputs: dict[str, Any]
    info_rows: np.ndarray
    info_values: list[dict]
    lookback_observations: Any
    lookback_actions: Any
    lookback_rewards: np.ndarray
    lookback_extra_model_outputs: dict[str, Any]
    lookback_info_rows: np.ndarray
    lookback_info_values: list[dict]
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None

    @property
    def num_episodes(self) -> int:
        return len(self.ids)

    @property
    def num_env_steps(self) -> int:
        """Data steps held (lookback excluded)."""
        return int(self.lens.sum())

    @property
    def obs_offsets(self) -> np.ndarray:
        """Row where each chunk's data observations start in ``observations`` (E + 1 entries)."""
        return _offsets(self.lens + 1)

    @property
    def step_offsets(self) -> np.ndarray:
        """Row where each chunk's steps start in ``actions``/``rewards`` (E + 1 entries)."""
        return _offsets(self.lens)

    @property
    def lookback_offsets(self) -> np.ndarray:
        """Row where each chunk's lookback starts in the ``lookback_*`` fields (E + 1 entries)."""
        return _offsets(self.lookback_lens)

    def serialized_nbytes(self) -> int:
        """Bytes this object takes as a pickle-5 payload, which is what ``ray.put`` ships."""
        return len(pickle.dumps(self, protocol=5))

    def raw_step_nbytes(self) -> int:
        """Raw bytes of one step: observation + action + reward + the two done flags."""
        leaves = tree.flatten(self.observations) + tree.flatten(self.actions) + [self.rewards]
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
        if not isinstance(self.rewards, np.ndarray) or self.rewards.ndim != 1:
            raise DataFormatError(
                f"'rewards' must be a 1-D array (got {getattr(self.rewards, 'shape', self.rewards)!r})"
            )
        steps, lb = int(self.lens.sum()), int(self.lookback_lens.sum())
        _check_rows("observations", self.observations, steps + e)
        _check_rows("actions", self.actions, steps)
        _check_rows("rewards", self.rewards, steps)
        _check_rows("lookback_observations", self.lookback_observations, lb)
        _check_rows("lookback_actions", self.lookback_actions, lb)
        _check_rows("lookback_rewards", self.lookback_rewards, lb)
        if self.extra_model_outputs.keys() != self.lookback_extra_model_outputs.keys():
            raise DataFormatError("'extra_model_outputs' and 'lookback_extra_model_outputs' must have the same keys")
        for k in self.extra_model_outputs:
            _check_rows(f"extra_model_outputs[{k!r}]", self.extra_model_outputs[k], steps)
            _check_rows(f"lookback_extra_model_outputs[{k!r}]", self.lookback_extra_model_outputs[k], lb)
        _check_sparse("info", self.info_rows, self.info_values, steps + e)
        _check_sparse("lookback_info", self.lookback_info_rows, self.lookback_info_values, lb)


def _offsets(sizes: np.ndarray) -> np.ndarray:
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
            self._flush()
            self.pieces.append(part)
            self.owned.append(False)

    def _flush(self) -> None:
        if self.pending:
            self.pieces.append(tree.stack(self.pending))
            self.owned.append(True)
            self.pending = []

    def result(self, other: _FieldPacker | None = None) -> Any:
        """The packed field; with no rows it takes the structure and dtypes of ``other``'s rows
        (the same field's lookback or data side), else those of the space."""
        self._flush()
        if len(self.pieces) == 1 and not self.owned[0]:
            return tree.map_structure(np.copy, self.pieces[0])  # never alias the episode's own arrays
        if self.pieces:
            return tree.concat(self.pieces)
        if other is not None:
            other._flush()
            if other.pieces:
                return tree.map_structure(lambda a: a[:0].copy(), other.pieces[0])
        buf = LookbackBuffer([], space=self.space)
        buf.to_numpy()
        return buf.data


def episodes_to_columnar(episodes: list[SingleAgentEpisode]) -> ColumnarEpisodes:
    """Packs episode chunks (list-form or numpy'd, with lookback) into one ColumnarEpisodes."""
    if not episodes:
        raise DataFormatError("'episodes' must hold at least one episode (got none)")
    first = episodes[0]
    # A chunk without any action (not even in its lookback) has no model outputs yet; any key set fits it.
    keyed = next((ep for ep in episodes if ep.actions.num_total()), first)
    keys = keyed.extra_model_outputs.keys()
    obs_space, act_space = first.observation_space, first.action_space
    fields = ("obs", "act", "rew")
    data = {f: _FieldPacker(s) for f, s in zip(fields, (obs_space, act_space, None))}
    look = {f: _FieldPacker(s) for f, s in zip(fields, (obs_space, act_space, None))}
    data_emo = {k: _FieldPacker(None) for k in keys}
    look_emo = {k: _FieldPacker(None) for k in keys}
    infos: list[dict] = []
    lookback_infos: list[dict] = []
    num = len(episodes)
    lens = np.empty(num, np.int64)
    lookback_lens = np.empty(num, np.int64)
    for i, ep in enumerate(episodes):
        if not ep.is_reset:
            raise DataFormatError(f"'episodes[{i}]' (id_ {ep.id_!r}) has no observations; call add_env_reset first")
        if ep.extra_model_outputs.keys() != keys and ep.actions.num_total():
            raise DataFormatError(
                f"'episodes[{i}]' has extra_model_outputs keys {sorted(ep.extra_model_outputs)}, "
                f"episodes[0] has {sorted(keys)}; all chunks must agree"
            )
        h = ep.len_lookback_buffer
        lookback_lens[i] = h
        lens[i] = len(ep)
        for f, buf in zip(fields, (ep.observations, ep.actions, ep.rewards)):
            total = buf.num_total()
            look[f].add(buf._range(0, h))
            data[f].add(buf._range(h, total))
        for k, buf in ep.extra_model_outputs.items() if ep.actions.num_total() else ():
            look_emo[k].add(buf._range(0, h))
            data_emo[k].add(buf._range(h, buf.num_total()))
        inf = ep.infos.data
        lookback_infos.extend(inf[:h])
        infos.extend(inf[h:])
    info_rows = np.fromiter(itertools.compress(itertools.count(), infos), np.int64)
    lookback_info_rows = np.fromiter(itertools.compress(itertools.count(), lookback_infos), np.int64)
    return ColumnarEpisodes(
        ids=[ep.id_ for ep in episodes],
        t_started=np.fromiter((ep.t_started for ep in episodes), np.int64, num),
        lens=lens,
        lookback_lens=lookback_lens,
        terminated=np.fromiter((ep.is_terminated for ep in episodes), bool, num),
        truncated=np.fromiter((ep.is_truncated for ep in episodes), bool, num),
        observations=data["obs"].result(look["obs"]),
        actions=data["act"].result(look["act"]),
        rewards=data["rew"].result(look["rew"]),
        extra_model_outputs={k: p.result(look_emo[k]) for k, p in data_emo.items()},
        info_rows=info_rows,
        info_values=[infos[r] for r in info_rows.tolist()],
        lookback_observations=look["obs"].result(data["obs"]),
        lookback_actions=look["act"].result(data["act"]),
        lookback_rewards=look["rew"].result(data["rew"]),
        lookback_extra_model_outputs={k: p.result(data_emo[k]) for k, p in look_emo.items()},
        lookback_info_rows=lookback_info_rows,
        lookback_info_values=[lookback_infos[r] for r in lookback_info_rows.tolist()],
        observation_space=obs_space,
        action_space=act_space,
    )


def columnar_to_episodes(col: ColumnarEpisodes) -> list[SingleAgentEpisode]:
    """Unpacks into numpy'd episodes (lookback rows joined in front of each chunk's data)."""
    col.validate()
    obs_off, step_off, lb_off = col.obs_offsets, col.step_offsets, col.lookback_offsets
    infos = _dense_infos(col.info_rows, col.info_values, int(obs_off[-1]))
    lookback_infos = _dense_infos(col.lookback_info_rows, col.lookback_info_values, int(lb_off[-1]))
    out = []
    for i, id_ in enumerate(col.ids):
        o0, o1, s0, s1, l0, l1 = obs_off[i], obs_off[i + 1], step_off[i], step_off[i + 1], lb_off[i], lb_off[i + 1]
        h = int(l1 - l0)

        def joined(lookback: Any, data: Any, a: int, b: int) -> Any:
            return tree.map_structure(lambda lb, d: np.concatenate([lb[l0:l1], d[a:b]]), lookback, data)

        out.append(
            SingleAgentEpisode._from_buffers(
                id_,
                LookbackBuffer(
                    joined(col.lookback_observations, col.observations, o0, o1), lookback=h, space=col.observation_space
                ),
                LookbackBuffer(joined(col.lookback_actions, col.actions, s0, s1), lookback=h, space=col.action_space),
                LookbackBuffer(joined(col.lookback_rewards, col.rewards, s0, s1), lookback=h),
                LookbackBuffer(lookback_infos[l0:l1] + infos[o0:o1], lookback=h),
                {
                    k: LookbackBuffer(joined(col.lookback_extra_model_outputs[k], v, s0, s1), lookback=h)
                    for k, v in col.extra_model_outputs.items()
                },
                t_started=int(col.t_started[i]),
                terminated=bool(col.terminated[i]),
                truncated=bool(col.truncated[i]),
                observation_space=col.observation_space,
                action_space=col.action_space,
            )
        )
    return out


def _dense_infos(rows: np.ndarray, values: list[dict], num_rows: int) -> list[dict]:
    dense: list[dict] = [{} for _ in range(num_rows)]
    for r, v in zip(rows.tolist(), values):
        dense[r] = v
    return dense


def concat_columnar(parts: list[ColumnarEpisodes]) -> ColumnarEpisodes:
    """One ColumnarEpisodes holding the chunks of ``parts`` in order."""
    if len(parts) == 1:
        return parts[0]
    keyed = [p for p in parts if p.num_env_steps or int(p.lookback_lens.sum())]
    keys = (keyed or parts)[0].extra_model_outputs.keys()
    if any(p.extra_model_outputs.keys() != keys for p in keyed):
        raise DataFormatError("concat_columnar: parts hold different extra_model_outputs keys")

    def cat(get: Any) -> Any:
        return tree.concat([get(p) for p in parts])

    def shifted(rows: str, values: str, sizes: Any) -> tuple[np.ndarray, list]:
        base = np.cumsum([0] + [int(sizes(p)) for p in parts[:-1]])
        return (
            np.concatenate([getattr(p, rows) + b for p, b in zip(parts, base)]),
            [v for p in parts for v in getattr(p, values)],
        )

    info_rows, info_values = shifted("info_rows", "info_values", lambda p: p.num_env_steps + p.num_episodes)
    lb_info_rows, lb_info_values = shifted(
        "lookback_info_rows", "lookback_info_values", lambda p: p.lookback_lens.sum()
    )
    return ColumnarEpisodes(
        ids=[i for p in parts for i in p.ids],
        t_started=cat(lambda p: p.t_started),
        lens=cat(lambda p: p.lens),
        lookback_lens=cat(lambda p: p.lookback_lens),
        terminated=cat(lambda p: p.terminated),
        truncated=cat(lambda p: p.truncated),
        observations=cat(lambda p: p.observations),
        actions=cat(lambda p: p.actions),
        rewards=cat(lambda p: p.rewards),
        extra_model_outputs={
            k: tree.concat([p.extra_model_outputs[k] for p in parts if k in p.extra_model_outputs]) for k in keys
        },
        info_rows=info_rows,
        info_values=info_values,
        lookback_observations=cat(lambda p: p.lookback_observations),
        lookback_actions=cat(lambda p: p.lookback_actions),
        lookback_rewards=cat(lambda p: p.lookback_rewards),
        lookback_extra_model_outputs={
            k: tree.concat([p.lookback_extra_model_outputs[k] for p in parts if k in p.lookback_extra_model_outputs])
            for k in keys
        },
        lookback_info_rows=lb_info_rows,
        lookback_info_values=lb_info_values,
        observation_space=parts[0].observation_space,
        action_space=parts[0].action_space,
    )
