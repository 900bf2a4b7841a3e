"""Observations, actions and spaces as the external-simulator protocol carries them.

A value of a Box, MultiDiscrete or MultiBinary space is a (nested) JSON list or the protocol's
array object; a Discrete value is an int; a Dict value is a JSON object with the space's keys, a
Tuple value a list. ``from_wire`` checks the shape (and that an action lies in its space) and
gives the numpy value a runner's episodes hold; a space travels as ``space_to_json``'s spec and its
bound arrays (``space_message``).

>>> box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
>>> from_wire(box, [0.5, 0.25], "observation")
array([0.5 , 0.25], dtype=float32)
>>> from_wire(box, [0.5], "observation")
Traceback (most recent call last):
...
ray_sampler.client.protocol.ProtocolError: 'observation' must have shape (2,) (got (1,))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.client.protocol import ProtocolError, decode_array, encode_array, to_json_value
from ray_sampler.errors import PolicyError
from ray_sampler.policy.space_spec import space_to_json

__all__ = ["from_wire", "same_space", "space_message", "to_wire"]


def from_wire(space: gym.Space, value: Any, what: str, *, check_contains: bool = False) -> Any:
    """``value`` from a message as a value of ``space`` (ProtocolError naming ``what`` if it is not)."""
    if isinstance(space, gym.spaces.Discrete):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{what!r} must be an int (got {type(value).__name__})")
        out: Any = np.int64(value)
    elif isinstance(space, gym.spaces.Box | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        out = decode_array(value, space.dtype)
        if out.shape != space.shape:
            raise ProtocolError(f"{what!r} must have shape {space.shape} (got {out.shape})")
        if out.dtype.kind == "f" and not np.isfinite(out).all():
            raise ProtocolError(f"{what!r} must hold finite numbers (got NaN or infinity)")
    elif isinstance(space, gym.spaces.Dict):
        if not isinstance(value, dict) or set(value) != set(space.spaces):
            raise ProtocolError(f"{what!r} must be an object with the keys {sorted(space.spaces)}")
        out = {k: from_wire(s, value[k], f"{what}.{k}") for k, s in space.spaces.items()}
    elif isinstance(space, gym.spaces.Tuple):
        if not isinstance(value, list) or len(value) != len(space.spaces):
            raise ProtocolError(f"{what!r} must be a list of {len(space.spaces)} values")
        out = tuple(from_wire(s, v, f"{what}[{i}]") for i, (s, v) in enumerate(zip(space.spaces, value)))
    else:
        raise ProtocolError(f"{what!r}: a {type(space).__name__} space cannot travel in this protocol")
    # A Box action is recorded as the policy drew it (a Gaussian's may lie past the bounds; the env
    # gets it clipped), as a runner records it: only its shape and finiteness are checked.
    if check_contains and not isinstance(space, gym.spaces.Box) and not space.contains(out):
        raise ProtocolError(f"{what!r} must lie in {space} (got {to_json_value(out)!r})")
    return out


def to_wire(value: Any) -> Any:
    """A value of a space as plain JSON (ints, floats, lists, objects)."""
    if isinstance(value, tuple):
        return [to_wire(v) for v in value]
    return to_json_value(value)


def space_message(space: gym.Space, name: str) -> dict[str, Any]:
    """``space`` as the protocol carries it: ``{"spec": ..., "arrays": {path: array object}}``."""
    arrays: dict[str, np.ndarray] = {}
    try:
        spec = space_to_json(space, arrays, name)
    except PolicyError as e:
        raise ProtocolError(f"{name}: {e}") from None
    return {"spec": spec, "arrays": {path: encode_array(np.asarray(a)) for path, a in arrays.items()}}


def same_space(ours: dict[str, Any], theirs: Any) -> bool:
    """Whether a client's space (``space_message``'s form) is ours."""
    if not isinstance(theirs, dict) or theirs.get("spec") != ours["spec"]:
        return False
    arrays = theirs.get("arrays")
    if not isinstance(arrays, dict) or set(arrays) != set(ours["arrays"]):
        return False
    return all(np.array_equal(decode_array(arrays[k]), decode_array(v)) for k, v in ours["arrays"].items())
