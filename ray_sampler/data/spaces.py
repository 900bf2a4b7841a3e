"""Gymnasium spaces at the vector boundary: which leaves are stored, and batches made numpy.

Every observation is a structure (``tree``) of leaves. A leaf space is one of:

- ``Box`` (any dtype), ``Discrete`` (any ``start``), ``MultiDiscrete``, ``MultiBinary``: a numpy
  array per step;
- ``Text`` (or any other space whose items are strings, such as MiniGrid's ``MissionSpace``): a
  Python ``str`` per step, batched as a numpy ``StringDType`` array (variable width, so no string
  is ever cut to another's length; Arrow writes it as a string column).

``Dict`` and ``Tuple`` nest them. ``Sequence``, ``OneOf`` and ``Graph`` leaves have no fixed
shape per step; they are refused before any actor starts, naming the leaf (``check_space``).

``to_numpy_batch`` turns what a vector env returns into that form, once per step: gymnasium
batches a ``Text`` leaf as a tuple of strings (which ``tree`` would take for a structure and split
character by character), and a JAX or torch vector env returns its own arrays (immutable, or on
another device). Arrays that numpy owns and may write are passed as they are; anything else is
copied into a new numpy array, so the runner never writes into an array it did not allocate.

>>> space = gym.spaces.Dict({"mission": gym.spaces.Text(20), "pos": gym.spaces.Discrete(3)})
>>> batch = to_numpy_batch(space, {"mission": ("go left", ""), "pos": np.array([0, 2])})
>>> batch["mission"].tolist(), batch["pos"].tolist()
(['go left', ''], [0, 2])
>>> check_space(gym.spaces.Dict({"seq": gym.spaces.Sequence(gym.spaces.Discrete(2))}))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ray_sampler.errors.ConfigError: observation['seq'] is Sequence(Discrete(2), stack=False): ...
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.errors import ConfigError

__all__ = [
    "FLAT_LEAVES",
    "STRING_DTYPE",
    "batch_converter",
    "check_flattenable",
    "check_space",
    "describe_outside",
    "flatten_batch",
    "is_string_leaf",
    "is_text",
    "item_converter",
    "leaf_spaces",
    "owned_array",
    "strings",
    "to_numpy_batch",
]

STRING_DTYPE = np.dtypes.StringDType()
"""How a batch of ``Text`` values is held: numpy's variable-width strings."""

FLAT_LEAVES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
"""Leaves ``gymnasium.spaces.flatten`` turns into floats (what an MLP can take)."""

_ARRAY_LEAVES = FLAT_LEAVES
_CONTAINERS = (gym.spaces.Dict, gym.spaces.Tuple, gym.spaces.Sequence, gym.spaces.OneOf, gym.spaces.Graph)
_NOT_STRINGS = (*FLAT_LEAVES, *_CONTAINERS)


def is_text(space: gym.Space) -> bool:
    """Whether ``space``'s items are strings: ``Text``, or another space whose sample is a ``str``
    (sampled from a copy, so the space's own random state is not touched)."""
    if isinstance(space, gym.spaces.Text):
        return True
    if isinstance(space, _NOT_STRINGS):
        return False
    try:
        return isinstance(copy.deepcopy(space).sample(), str)
    except Exception:  # a space that cannot sample is not one we can store either
        return False


def leaf_spaces(space: gym.Space, path: str = "observation") -> Iterator[tuple[str, gym.Space]]:
    """``(path, leaf space)`` of every leaf, in ``tree``'s order (``observation['image']``,
    ``observation[1]``)."""
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            yield from leaf_spaces(sub, f"{path}[{key!r}]")
    elif isinstance(space, gym.spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            yield from leaf_spaces(sub, f"{path}[{i}]")
    else:
        yield path, space


def check_space(space: gym.Space, path: str = "observation") -> gym.Space:
    """``space`` if every leaf is one the runner stores (see the module docstring); else a
    ConfigError naming the first leaf that is not."""
    for where, leaf in leaf_spaces(space, path):
        if not (isinstance(leaf, FLAT_LEAVES) or is_text(leaf)):
            raise ConfigError(
                f"{where} is {leaf}: ray-sampler stores leaves of a fixed kind per step (Box, Discrete, "
                "MultiDiscrete, MultiBinary, Text, nested in Dict and Tuple); drop or convert it in a "
                "gymnasium ObservationWrapper in the env creator"
            )
    return space


def check_flattenable(space: gym.Space, module_name: str, path: str = "observation") -> None:
    """A ConfigError naming the first leaf of ``space`` that cannot be flattened into floats, for a
    module that asks for flat input."""
    for where, leaf in leaf_spaces(space, path):
        if not isinstance(leaf, FLAT_LEAVES):
            keep = (
                [k for k, v in space.spaces.items() if isinstance(v, FLAT_LEAVES)]
                if isinstance(space, gym.spaces.Dict)
                else None
            )
            fix = (
                f"drop it before the module with an env-to-module piece, e.g. "
                f"env_to_module_connectors=(FilterObservationKeys({keep!r}),)"
                if keep
                else "drop or encode it with an env-to-module piece (connectors.FilterObservationKeys keeps Dict keys)"
            )
            raise ConfigError(f"{where} is {leaf}, which {module_name} cannot flatten into its input: {fix}")


def is_string_leaf(array: Any) -> bool:
    """Whether ``array`` is a batch of strings (``StringDType``, or numpy's fixed-width ``<U``)."""
    return isinstance(array, np.ndarray) and array.dtype.kind in "TU"


def strings(values: Any) -> np.ndarray:
    """``values`` (strings) as a ``StringDType`` array."""
    return np.asarray(values, dtype=STRING_DTYPE)


def _owned(value: Any) -> np.ndarray:
    """``value`` as a numpy array this process may write: as it is if it is one, else a new copy
    (another library's array through DLPack, which torch and JAX arrays on the CPU speak)."""
    if type(value) is np.ndarray:
        return value if value.flags.writeable else value.copy()
    if hasattr(value, "__dlpack__"):
        try:
            return np.array(np.from_dlpack(value))
        except (BufferError, RuntimeError, TypeError, ValueError):  # e.g. on a GPU: numpy's own conversion
            pass
    return np.array(value)


Converter = Callable[[Any], Any]


def batch_converter(space: gym.Space) -> Converter:
    """The function that puts a vector env's batch of ``space`` items in the runner's form (see the
    module docstring), built once per space: per step it costs one call per leaf."""
    return _converter(space, lambda batch: strings([str(v) for v in batch]))


def item_converter(space: gym.Space) -> Converter:
    """The same for one sub-env's item (a final observation): arrays owned, strings as ``str``."""
    return _converter(space, str)


def _converter(space: gym.Space, text: Converter) -> Converter:
    if isinstance(space, _ARRAY_LEAVES):
        return _owned
    if isinstance(space, gym.spaces.Dict):
        parts = {k: _converter(sub, text) for k, sub in space.spaces.items()}
        return lambda value: {k: convert(value[k]) for k, convert in parts.items()}
    if isinstance(space, gym.spaces.Tuple):
        items = [_converter(sub, text) for sub in space.spaces]
        return lambda value: tuple(convert(part) for convert, part in zip(items, value, strict=True))
    if is_text(space):
        return text
    return lambda value: value  # refused by check_space before any actor starts


def to_numpy_batch(space: gym.Space, batch: Any) -> Any:
    """``batch_converter(space)(batch)``, for one-off use."""
    return batch_converter(space)(batch)


def flatten_batch(space: gym.Space, x: Any) -> np.ndarray:
    """A batch of items of ``space`` -> float32 ``[N, flatdim(space)]`` in gymnasium's flatten layout
    (Box raveled, Discrete and MultiDiscrete one-hot, Dict in key order, Tuple in order)."""
    if isinstance(space, gym.spaces.Dict):
        return np.concatenate([flatten_batch(s, x[k]) for k, s in space.spaces.items()], axis=-1)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate([flatten_batch(s, part) for s, part in zip(space.spaces, x)], axis=-1)
    x = np.asarray(x)
    n = len(x)
    if isinstance(space, gym.spaces.Discrete):
        return ((x - space.start)[:, None] == np.arange(space.n)).astype(np.float32)
    if isinstance(space, gym.spaces.MultiDiscrete):
        flat = (x - space.start).reshape(n, -1)
        return np.concatenate(
            [
                (flat[:, j, None] == np.arange(k)).astype(np.float32)
                for j, k in enumerate(np.asarray(space.nvec).reshape(-1))
            ],
            axis=-1,
        )
    return x.reshape(n, -1).astype(np.float32, copy=False)


owned_array = _owned
"""``value`` as a numpy array the runner may write (see ``_owned``): for rewards and flags."""


def describe_outside(
    space: gym.Space, value: Any, path: str = "observation", *, non_finite_ok: bool = False
) -> str | None:
    """What makes ``value`` fall outside ``space`` (``space.contains``), naming the leaf at ``path``
    and what the space holds; None when it is inside. ``non_finite_ok``: NaN and inf in a float Box
    leaf pass (a check of their own reports them).

    >>> box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    >>> print(describe_outside(box, np.zeros(3), "obs"))
    obs of shape (3,) and dtype float64, where Box(-1.0, 1.0, (4,), float32) holds shape (4,) and dtype float32
    >>> describe_outside(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}), {"a": 5})
    "observation['a'] 5 (a int), which Discrete(2) does not contain"
    """
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(value, Mapping) or set(value) != set(space.spaces):
            keys = sorted(value) if isinstance(value, Mapping) else f"a {type(value).__name__}"
            return f"{path} with keys {keys}, where {space} has keys {sorted(space.spaces)}"
        items = ((sub, value[k], f"{path}[{k!r}]") for k, sub in space.spaces.items())
        return next((d for sub, v, p in items if (d := describe_outside(sub, v, p, non_finite_ok=non_finite_ok))), None)
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, tuple | list) or len(value) != len(space.spaces):
            return f"{path} {value!r:.60}, where {space} holds a tuple of {len(space.spaces)}"
        items = ((sub, v, f"{path}[{i}]") for i, (sub, v) in enumerate(zip(space.spaces, value, strict=True)))
        return next((d for sub, v, p in items if (d := describe_outside(sub, v, p, non_finite_ok=non_finite_ok))), None)
    try:
        with warnings.catch_warnings():  # gymnasium warns when it casts a list; the answer is what counts
            warnings.simplefilter("ignore")
            if space.contains(value):
                return None
    except Exception:  # a value the space cannot even compare
        pass
    if isinstance(space, gym.spaces.Box):
        try:
            array = np.asarray(value)
        except Exception:
            array = None
        if array is None or array.shape != space.shape or not np.can_cast(array.dtype, space.dtype):
            got = f"of shape {array.shape} and dtype {array.dtype}" if array is not None else repr(value)[:60]
            return f"{path} {got}, where {space} holds shape {space.shape} and dtype {space.dtype}"
        finite = np.isfinite(array) if array.dtype.kind == "f" else np.True_
        if not non_finite_ok and not np.all(finite):
            return f"{path} with {array[~finite][0]} at index {np.argwhere(~finite)[0].tolist()}"
        outside = np.argwhere(finite & ((array < space.low) | (array > space.high)))
        if len(outside):
            at = tuple(int(k) for k in outside[0])
            bounds = f"[{space.low[at]}, {space.high[at]}]"
            return f"{path} {array[at]} at index {list(at)}, outside {space}'s bounds {bounds} there"
        return None  # inside but for NaN or inf, which non_finite_ok lets through
    return f"{path} {value!r:.60} (a {type(value).__name__}), which {space} does not contain"
