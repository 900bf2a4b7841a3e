"""Gymnasium spaces as JSON (their bounds as arrays), so a saved policy rebuilds them with no pickle.

Box (any dtype, bounds per element), Discrete (any ``start``), MultiDiscrete, MultiBinary, Text,
and Dict / Tuple of them. Another space (MiniGrid's ``MissionSpace``, say) is refused by name.

>>> arrays = {}
>>> spec = space_to_json(gym.spaces.Dict({"a": gym.spaces.Discrete(3, start=1)}), arrays, "obs")
>>> spec
{'type': 'Dict', 'spaces': {'a': {'type': 'Discrete', 'n': 3, 'start': 1, 'dtype': 'int64'}}}
>>> space_from_json(spec, arrays)
Dict('a': Discrete(3, start=1))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.errors import PolicyError

__all__ = ["space_from_json", "space_to_json"]


def space_to_json(space: gym.Space, arrays: dict[str, np.ndarray], path: str) -> dict[str, Any]:
    """``space`` as JSON; its bound arrays go into ``arrays`` under ``path``. PolicyError for a
    space this form does not hold."""
    if isinstance(space, gym.spaces.Box):
        arrays[f"{path}/low"], arrays[f"{path}/high"] = space.low, space.high
        return {"type": "Box", "low": f"{path}/low", "high": f"{path}/high", "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start), "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        arrays[f"{path}/nvec"], arrays[f"{path}/start"] = space.nvec, space.start
        return {"type": "MultiDiscrete", "nvec": f"{path}/nvec", "start": f"{path}/start", "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.atleast_1d(space.n).tolist()}
    if type(space) is gym.spaces.Text:
        charset = "".join(sorted(space.character_set))
        return {"type": "Text", "max_length": space.max_length, "min_length": space.min_length, "charset": charset}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_json(s, arrays, f"{path}/{k}") for k, s in space.spaces.items()}}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(s, arrays, f"{path}/{i}") for i, s in enumerate(space)]}
    raise PolicyError(f"policy: {path} is a {type(space).__name__} space, which a saved policy cannot hold")


def space_from_json(spec: Any, arrays: Any) -> gym.Space:
    """The space ``space_to_json`` wrote (KeyError, TypeError or ValueError for a malformed spec)."""
    kind = spec["type"]
    if kind == "Box":
        return gym.spaces.Box(arrays[spec["low"]], arrays[spec["high"]], dtype=np.dtype(spec["dtype"]))
    if kind == "Discrete":
        return gym.spaces.Discrete(int(spec["n"]), start=int(spec["start"]), dtype=np.dtype(spec["dtype"]))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(
            arrays[spec["nvec"]], start=arrays[spec["start"]], dtype=np.dtype(spec["dtype"])
        )
    if kind == "MultiBinary":
        n = spec["n"]
        return gym.spaces.MultiBinary(n[0] if len(n) == 1 else n)
    if kind == "Text":
        return gym.spaces.Text(int(spec["max_length"]), min_length=int(spec["min_length"]), charset=spec["charset"])
    if kind == "Dict":
        return gym.spaces.Dict({k: space_from_json(s, arrays) for k, s in spec["spaces"].items()})
    if kind == "Tuple":
        return gym.spaces.Tuple(tuple(space_from_json(s, arrays) for s in spec["spaces"]))
    raise ValueError(f"unknown space type {kind!r}")
