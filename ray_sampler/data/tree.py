"""Nested observation/action structures: dicts and tuples of leaves, mapped, stacked and flattened.

A *structure* is a ``dict`` (any Mapping subclass gymnasium returns) or a ``tuple`` whose
items are structures or leaves; anything else (an array, a number, a string) is a leaf.
Dict keys keep the order of the first structure given. A *spec* is the JSON-able shape of
a structure without its leaves: ``None`` for a leaf, ``{"dict": [[key, spec], ...]}`` or
``{"tuple": [spec, ...]}``.

>>> stack([{"a": 1, "b": (2.0, 3)}, {"a": 4, "b": (5.0, 6)}])["b"][0]
array([2., 5.])
>>> flatten({"a": 1, "b": (2, 3)})
[1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "concat",
    "equal",
    "first_leaf",
    "first_mismatch",
    "flatten",
    "is_structure",
    "map_structure",
    "spec_of",
    "stack",
    "unflatten",
    "unstack",
]


def is_structure(x: Any) -> bool:
    """Whether ``x`` is a container (dict or tuple) rather than a leaf."""
    return isinstance(x, (Mapping, tuple))


def map_structure(fn: Callable[..., Any], *structs: Any) -> Any:
    """Applies ``fn`` to the leaves of one or more structures of the same shape."""
    first = structs[0]
    if isinstance(first, Mapping):
        return {k: map_structure(fn, *(s[k] for s in structs)) for k in first}
    if isinstance(first, tuple):
        return tuple(map_structure(fn, *parts) for parts in zip(*structs))
    return fn(*structs)


def flatten(struct: Any) -> list[Any]:
    """The leaves of ``struct`` in canonical order (dict keys in order, then tuple items)."""
    if isinstance(struct, Mapping):
        return [leaf for v in struct.values() for leaf in flatten(v)]
    if isinstance(struct, tuple):
        return [leaf for v in struct for leaf in flatten(v)]
    return [struct]


def first_leaf(struct: Any) -> Any:
    """The first leaf of ``struct`` (cheaper than ``flatten(struct)[0]``)."""
    while is_structure(struct):
        struct = next(iter(struct.values())) if isinstance(struct, Mapping) else struct[0]
    return struct


def spec_of(struct: Any) -> Any:
    """The JSON-able spec of a structure (see the module docstring)."""
    if isinstance(struct, Mapping):
        return {"dict": [[k, spec_of(v)] for k, v in struct.items()]}
    if isinstance(struct, tuple):
        return {"tuple": [spec_of(v) for v in struct]}
    return None


def unflatten(spec: Any, leaves: list[Any]) -> Any:
    """Rebuilds a structure from its spec and its leaves in canonical order."""
    it = iter(leaves)
    out = _unflatten(spec, it)
    if next(it, _END) is not _END:
        raise ValueError("more leaves than the spec has places for")
    return out


_END = object()


def _unflatten(spec: Any, it: Any) -> Any:
    if spec is None:
        try:
            return next(it)
        except StopIteration:
            raise ValueError("fewer leaves than the spec has places for") from None
    if "dict" in spec:
        return {k: _unflatten(s, it) for k, s in spec["dict"]}
    return tuple(_unflatten(s, it) for s in spec["tuple"])


def stack(items: list[Any]) -> Any:
    """Stacks a list of same-shaped structures into one structure of arrays (new axis 0)."""
    first = items[0]
    if isinstance(first, Mapping):
        return {k: stack([it[k] for it in items]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack(list(parts)) for parts in zip(*items))
    out = np.asarray(items)
    # Strings (a Text leaf) stay variable-width: numpy's fixed "<U" would cut longer ones on a copy.
    return out.astype(np.dtypes.StringDType()) if out.dtype.kind == "U" else out


def _layout(item: Any) -> Any:
    """``item``'s structure with each leaf's shape in place of the leaf (what ``stack`` needs equal)."""
    if isinstance(item, Mapping):
        return {k: _layout(v) for k, v in item.items()}
    if isinstance(item, tuple):
        return tuple(_layout(v) for v in item)
    return np.shape(item)


def first_mismatch(items: list[Any]) -> tuple[int, str] | None:
    """The index of the first item that ``stack`` cannot put beside ``items[0]`` (another structure,
    or a leaf of another shape) and what differs; None when all agree.

    >>> first_mismatch([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0, 6.0]])
    (2, 'shape (3,) where the first has shape (2,)')
    """
    want = _layout(items[0]) if items else None
    for i, item in enumerate(items[1:], 1):
        got = _layout(item)
        if got != want:
            if isinstance(got, tuple) and isinstance(want, tuple) and all(isinstance(n, int) for n in got + want):
                return i, f"shape {got} where the first has shape {want}"
            return i, f"layout {got} where the first has {want} (leaf shapes in place of the leaves)"
    return None


def concat(structs: list[Any]) -> Any:
    """Concatenates structures of arrays along axis 0; zero-length pieces are skipped."""
    kept = [s for s in structs if len(first_leaf(s))] or structs[:1]
    if len(kept) == 1:
        return kept[0]
    return map_structure(lambda *leaves: np.concatenate(leaves), *kept)


def unstack(struct: Any) -> list[Any]:
    """Structure of arrays -> list of items (the inverse of ``stack``); array rows are copied so no
    view pins the source.

    >>> [item["a"].tolist() for item in unstack({"a": np.arange(4).reshape(2, 2)})]
    [[0, 1], [2, 3]]
    """
    if isinstance(struct, np.ndarray) and struct.ndim == 1:
        return list(struct)  # numpy scalars: no view of the source
    n = len(first_leaf(struct))

    def row(a: np.ndarray, i: int) -> Any:
        r = a[i]
        return r.copy() if isinstance(r, np.ndarray) else r

    return [map_structure(lambda a, i=i: row(a, i), struct) for i in range(n)]


def equal(a: Any, b: Any) -> bool:
    """Whether two (nested) items, or lists of them, hold the same structure, shapes and values
    (NaN equal to NaN).

    >>> equal({"a": np.array([1.0, np.nan])}, {"a": np.array([1.0, np.nan])}), equal([1, 2], [1])
    (True, False)
    """
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(equal, a, b))
    if is_structure(a) or is_structure(b):
        return spec_of(a) == spec_of(b) and all(equal(x, y) for x, y in zip(flatten(a), flatten(b)))
    x, y = np.asarray(a), np.asarray(b)
    nan_aware = x.dtype.kind in "fc" and y.dtype.kind in "fc"
    return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=nan_aware))
