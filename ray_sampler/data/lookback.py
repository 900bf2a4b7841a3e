"""LookbackBuffer: one episode field (observations, actions, ...) as lookback items then data items.

Index rules (documented once here; every episode getter follows them):

- An ``int`` returns one item; a ``list`` of ints or a ``slice`` returns a list in list form
  and (nested) arrays with a leading axis in numpy form. ``None`` means all data items.
- Index ``0`` is the first *data* item; the lookback items sit before it.
- A negative index counts from the end of the data, running on into the lookback once the
  data is used up; with ``neg_index_as_lookback=True`` it counts back from the first data
  item instead, so ``-1`` is the last lookback item.
- An ``int`` or list index that lands outside lookback + data raises ``IndexError``, in list
  and numpy form alike. A slice is clipped to lookback + data as a Python slice is (as
  RLlib's is). With ``fill`` given, every position outside gets an item shaped like the
  stored ones with every leaf set to ``fill`` instead (in numpy form, and for numpy items,
  ``fill`` is cast to the leaf's dtype as any numpy assignment is).
  With ``one_hot_discrete=True`` a filled position is ``fill`` across the whole one-hot width of
  each Discrete/MultiDiscrete leaf (zeros for ``fill=0``, as in RLlib), never the one-hot of ``fill``.
- Slices of numpy data are views; everything else is a fresh object.
- ``set`` / ``buf[i] = x`` write at the same indices (never clipped, never filled).

``InfiniteLookbackBuffer`` is RLlib's name for this class.

>>> buf = LookbackBuffer(["a", "b", "c"], lookback=1)
>>> len(buf), buf.get(0), buf.get(-1), buf.get(-1, neg_index_as_lookback=True)
(2, 'b', 'c', 'a')
>>> buf.get(slice(-4, None), fill="-"), buf.get(slice(1, 10))
(['-', 'a', 'b', 'c'], ['c'])
>>> buf[-1] = "C"
>>> buf == LookbackBuffer(["a", "b", "C"], lookback=1), buf.len_incl_lookback()
(True, 3)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data import tree
from ray_sampler.errors import SpaceError

__all__ = ["Indices", "InfiniteLookbackBuffer", "LookbackBuffer"]

Indices = int | list[int] | slice | None


class LookbackBuffer:
    """Items of one episode field: ``lookback`` items followed by the data items.

    ``data`` is a list of items (list form) or a structure of arrays whose leading axis runs
    over lookback + data (numpy form).
    """

    __slots__ = ("data", "lookback", "space")

    def __init__(self, data: Any = None, *, lookback: int = 0, space: gym.Space | None = None) -> None:
        self.data = [] if data is None else data
        self.lookback = lookback
        self.space = space

    @property
    def is_numpy(self) -> bool:
        return not isinstance(self.data, list)

    @property
    def finalized(self) -> bool:
        """RLlib's name for ``is_numpy``."""
        return self.is_numpy

    def num_total(self) -> int:
        """Number of items, lookback included."""
        d = self.data
        return len(d) if isinstance(d, list) else len(tree.first_leaf(d))

    def len_incl_lookback(self) -> int:
        """RLlib's name for ``num_total()``."""
        return self.num_total()

    def __len__(self) -> int:
        return self.num_total() - self.lookback

    def __iter__(self) -> Iterator[Any]:
        for pos in range(self.lookback, self.num_total()):
            yield self._item(pos)

    def __getitem__(self, indices: Indices) -> Any:
        return self.get(indices)

    def __setitem__(self, indices: Indices, value: Any) -> None:
        self.set(value, at_indices=indices)

    def __eq__(self, other: object) -> bool:
        """Equal form (list or numpy), lookback, space and items (structures and values)."""
        if not isinstance(other, LookbackBuffer):
            return NotImplemented
        return (
            self.lookback == other.lookback
            and self.is_numpy == other.is_numpy
            and self.space == other.space
            and self.num_total() == other.num_total()
            and tree.equal(self.data, other.data)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        form = "numpy" if self.is_numpy else "list"
        return f"LookbackBuffer({form}, lookback={self.lookback}, len={len(self)})"

    # ---------------------------------------------------------------- reading
    def get(
        self,
        indices: Indices = None,
        *,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        one_hot_discrete: bool = False,
    ) -> Any:
        """Items at ``indices`` (see the module docstring for the rules)."""
        out, filled = self._get(indices, neg_index_as_lookback, fill)
        if one_hot_discrete:
            out = self._one_hot(out, filled, fill)
        return out

    def _pos(self, i: int, total: int, neg_index_as_lookback: bool) -> int:
        return self.lookback + i if i >= 0 or neg_index_as_lookback else total + i

    def _get(self, indices: Indices, nal: bool, fill: Any) -> tuple[Any, Any]:
        """The items and which of them are filled: a ``bool`` for one item, else ``None`` (none
        filled) or a boolean array over the returned positions."""
        total = self.num_total()
        if indices is None:
            return self.view(self.lookback, total), None
        if isinstance(indices, np.ndarray) and indices.ndim == 0:
            indices = int(indices)
        if isinstance(indices, slice):
            step = 1 if indices.step is None else indices.step
            if isinstance(step, np.integer):
                step = int(step)
            if not isinstance(step, int) or step < 1:
                raise ValueError(f"slice step must be an int >= 1 (got {indices.step!r})")
            start = self.lookback if indices.start is None else self._pos(indices.start, total, nal)
            stop = total if indices.stop is None else self._pos(indices.stop, total, nal)
            if fill is None:  # clipped as a Python slice is
                start, stop = min(max(start, 0), total), min(max(stop, 0), total)
            stop = max(stop, start)
            if step == 1 and start >= 0 and stop <= total:
                return self.view(start, stop), None
            return self._gather(list(range(start, stop, step)), total, fill, indices)
        if isinstance(indices, (list, tuple, np.ndarray)):
            positions = [self._pos(int(i), total, nal) for i in indices]
            return self._gather(positions, total, fill, indices)
        if not isinstance(indices, (int, np.integer)):
            raise TypeError(f"'indices' must be an int, a list of ints, a slice or None (got {indices!r})")
        pos = self._pos(int(indices), total, nal)
        if 0 <= pos < total:
            return self._item(pos), False
        if fill is None:
            raise self._index_error(indices)
        return self._fill_item(fill), True

    def _index_error(self, indices: Any) -> IndexError:
        return IndexError(
            f"index {indices!r} reaches outside the {self.lookback} lookback and {len(self)} data "
            "items; pass fill= to pad"
        )

    def _item(self, pos: int) -> Any:
        if isinstance(self.data, list):
            return self.data[pos]
        return tree.map_structure(lambda a: a[pos], self.data)

    def view(self, start: int, stop: int) -> Any:
        """Items at raw positions ``[start, stop)``, lookback included (no index rules; numpy data
        comes as views, list data as a new list of the same items)."""
        if isinstance(self.data, list):
            return self.data[start:stop]
        return tree.map_structure(lambda a: a[start:stop], self.data)

    def _gather(self, positions: list[int], total: int, fill: Any, indices: Any) -> tuple[Any, np.ndarray]:
        p = np.asarray(positions, dtype=np.int64)
        mask = (p < 0) | (p >= total)
        if mask.any() and fill is None:
            raise self._index_error(indices)
        if isinstance(self.data, list):
            filler = self._fill_item(fill) if mask.any() else None
            return [filler if out else self.data[i] for i, out in zip(positions, mask)], mask
        if total == 0:
            return (tree.stack([self._fill_item(fill)] * len(positions)) if positions else self.view(0, 0)), mask
        idx = np.clip(p, 0, total - 1)

        def gather_leaf(a: np.ndarray) -> np.ndarray:
            out = a[idx]
            if mask.any():
                out[mask] = fill
            return out

        return tree.map_structure(gather_leaf, self.data), mask

    def _fill_item(self, fill: Any) -> Any:
        """One item shaped like the stored ones (or like ``space``) with every leaf ``fill``."""
        if self.num_total():
            return tree.map_structure(lambda leaf: _filled_like(leaf, fill), self._item(0))
        if self.space is not None:
            return _space_fill(self.space, fill)
        return fill

    def _one_hot(self, out: Any, filled: Any, fill: Any) -> Any:
        """One-hot Discrete/MultiDiscrete leaves; ``filled`` (from ``_get``) positions get ``fill``."""
        space = self.space
        if space is None or not _has_discrete_leaf(space):
            raise SpaceError(f"one_hot_discrete=True needs a Discrete or MultiDiscrete space (got {space!r})")

        def convert(item: Any, flags: Any) -> Any:
            return _map_space(lambda s, v: _one_hot_leaf(s, v, flags, fill), space, item)

        if isinstance(out, list) and not isinstance(filled, bool):  # several items in list form
            return [convert(x, f) for x, f in zip(out, np.zeros(len(out), bool) if filled is None else filled)]
        return convert(out, filled)

    # ---------------------------------------------------------------- writing
    def append(self, item: Any) -> None:
        """Appends one data item (cheap in list form, a concatenation in numpy form)."""
        if isinstance(self.data, list):
            self.data.append(item)
        else:
            self.data = tree.concat([self.data, tree.stack([item])])

    def extend(self, items: Any) -> None:
        """Appends data items given as a list (list form) or a structure of arrays."""
        if isinstance(self.data, list):
            self.data.extend(items if isinstance(items, list) else tree.unstack(items))
        else:
            self.data = tree.concat([self.data, items if not isinstance(items, list) else _stack(items, self.space)])

    def pop(self, index: int = -1) -> Any:
        """Removes the item at ``index`` (index rules as ``get``; default the last) and returns it."""
        total = self.num_total()
        pos = self._pos(int(index), total, False)
        if not 0 <= pos < total:
            raise self._index_error(index)
        item = self._item(pos)
        if isinstance(self.data, list):
            del self.data[pos]
        else:
            self.data = tree.map_structure(lambda a: np.delete(a, pos, axis=0), self.data)
        if pos < self.lookback:
            self.lookback -= 1
        return item

    def set(self, new_data: Any, *, at_indices: Indices = None, neg_index_as_lookback: bool = False) -> None:
        """Overwrites the items at ``at_indices`` (None: every data item) with ``new_data``: one
        item for an ``int``, else as many items as positions (a list in list form, a structure of
        arrays with that leading length in numpy form). Positions follow the ``get`` rules but are
        never clipped: any outside lookback + data raise ``IndexError``, as does a length mismatch.
        Numpy leaves are written in place, except read-only ones (e.g. from Ray's object store),
        which are copied first."""
        total = self.num_total()
        nal = neg_index_as_lookback
        if at_indices is None:
            positions: list[int] | int = list(range(self.lookback, total))
        elif isinstance(at_indices, slice):
            step = 1 if at_indices.step is None else at_indices.step
            if not isinstance(step, (int, np.integer)) or step < 1:
                raise ValueError(f"slice step must be an int >= 1 (got {at_indices.step!r})")
            start = self.lookback if at_indices.start is None else self._pos(at_indices.start, total, nal)
            stop = total if at_indices.stop is None else self._pos(at_indices.stop, total, nal)
            positions = list(range(start, max(stop, start), int(step)))
        elif isinstance(at_indices, (list, tuple, np.ndarray)) and np.ndim(at_indices) == 1:
            positions = [self._pos(int(i), total, nal) for i in at_indices]
        elif isinstance(at_indices, (int, np.integer)):
            positions = self._pos(int(at_indices), total, nal)
        else:
            raise TypeError(f"'at_indices' must be an int, a list of ints, a slice or None (got {at_indices!r})")
        many = isinstance(positions, list)
        wanted = positions if isinstance(positions, list) else [positions]
        if any(not 0 <= p < total for p in wanted):
            raise self._index_error(at_indices)
        if many:
            got = len(new_data) if isinstance(self.data, list) or isinstance(new_data, list) else None
            got = got if got is not None else len(tree.first_leaf(new_data))
            if got != len(wanted):
                raise IndexError(f"set: {len(wanted)} positions at {at_indices!r} but 'new_data' holds {got} items")
        if isinstance(self.data, list):
            for p, item in zip(wanted, new_data if many else [new_data]):
                self.data[p] = item
            return
        items = _stack(new_data, self.space) if many and isinstance(new_data, list) else new_data
        index = np.asarray(wanted) if many else wanted[0]

        def write(leaf: np.ndarray, value: Any) -> np.ndarray:
            if not leaf.flags.writeable:
                leaf = leaf.copy()
            leaf[index] = value
            return leaf

        self.data = tree.map_structure(write, self.data, items)

    def finalize(self) -> None:
        """RLlib's name for ``to_numpy()``."""
        self.to_numpy()

    def copy_range(self, start: int, stop: int, *, lookback: int, as_list: bool = False) -> LookbackBuffer:
        """A new buffer holding copies of positions ``[start, stop)``, the first ``lookback`` as lookback."""
        part = self.view(start, stop)
        if isinstance(part, list):
            data = list(part)
        elif as_list:
            data = tree.unstack(part)
        else:
            data = tree.map_structure(np.copy, part)
        return LookbackBuffer(data, lookback=lookback, space=self.space)

    def to_numpy(self) -> None:
        """Turns list storage into (nested) arrays with a leading axis, in place."""
        if isinstance(self.data, list):
            self.data = _stack(self.data, self.space)

    def to_list(self) -> None:
        """Turns numpy storage into a list of items (rows copied), in place: cheap appends again."""
        if not isinstance(self.data, list):
            self.data = tree.unstack(self.data)


def _stack(items: list[Any], space: gym.Space | None) -> Any:
    if items:
        return tree.stack(items)
    if space is not None:
        return tree.map_structure(
            lambda leaf: np.zeros((0, *np.shape(leaf)), np.asarray(leaf).dtype), _space_fill(space, 0)
        )
    return np.zeros((0,))


def _filled_like(leaf: Any, fill: Any) -> Any:
    if isinstance(leaf, np.ndarray):
        return np.full_like(leaf, fill)
    if isinstance(leaf, np.generic):
        return leaf.dtype.type(fill)
    return fill


def _space_fill(space: gym.Space, fill: Any) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _space_fill(s, fill) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_space_fill(s, fill) for s in space.spaces)
    if space.shape is None or space.dtype is None:  # e.g. Text: no fixed shape or dtype
        return np.asarray(fill)[()]
    if space.shape == ():
        return np.dtype(space.dtype).type(fill)
    return np.full(space.shape, fill, dtype=space.dtype)


def _map_space(fn: Any, space: gym.Space, value: Any) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _map_space(fn, s, value[k]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_map_space(fn, s, v) for s, v in zip(space.spaces, value))
    return fn(space, value)


def _has_discrete_leaf(space: gym.Space) -> bool:
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return any(_has_discrete_leaf(s) for s in subs)
    return isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))


def _one_hot_leaf(space: gym.Space, value: Any, filled: Any = None, fill: Any = None) -> Any:
    """One-hot float32 vectors (last axis) for Discrete; per-dimension ones concatenated for
    MultiDiscrete; other leaves as they are. Rows flagged by ``filled`` (a bool for one item, a
    boolean array over the leading axis, or ``None``) are ``fill`` across the whole width, as
    RLlib's fill dummies are; stored values outside the space give all-zero vectors."""
    v = np.asarray(value)
    if isinstance(space, gym.spaces.Discrete):
        out = ((v - space.start)[..., None] == np.arange(space.n)).astype(np.float32)
    elif isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec).reshape(-1)
        flat = (v - np.asarray(space.start)).reshape(*v.shape[: v.ndim - np.ndim(space.nvec)], -1)
        parts = [(flat[..., j, None] == np.arange(n)).astype(np.float32) for j, n in enumerate(nvec)]
        out = np.concatenate(parts, axis=-1)
    else:
        return value
    if filled is not None and np.any(filled):
        out[filled] = fill  # a fresh array: never writes into the stored data
    return out


InfiniteLookbackBuffer = LookbackBuffer
"""RLlib's name for :class:`LookbackBuffer`."""
