"""CatalogueEnv: one observation holding every leaf space the runner stores, nested in Dict and
Tuple, with values that say which sub-env, episode and step emitted them (``expected_obs``).

Strings vary in length from the empty string to well past the number of sub-envs, so a string
split per character, cut to another's width, or dealt to the wrong sub-env shows at once.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium as gym
import numpy as np

CHARSET = string.ascii_letters + string.digits + " |:éü🙂"
TEXT = gym.spaces.Text(48, min_length=0, charset=CHARSET)  # the longest made: 44 characters

SPACE = gym.spaces.Dict(
    {
        "stamp": gym.spaces.Box(0, 10**6, (3,), np.int64),  # (vector index, episode, t)
        "f32": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        "f64": gym.spaces.Box(-np.inf, np.inf, (), np.float64),
        "u8": gym.spaces.Box(0, 255, (2, 2), np.uint8),
        "i16": gym.spaces.Box(-1000, 1000, (1,), np.int16),
        "flag": gym.spaces.Box(0, 1, (2,), np.bool_),
        "disc": gym.spaces.Discrete(5, start=-2),
        "multi": gym.spaces.MultiDiscrete([3, 4]),
        "bits": gym.spaces.MultiBinary(3),
        "text": TEXT,
        "pair": gym.spaces.Tuple((gym.spaces.Discrete(7), TEXT)),
        "nested": gym.spaces.Dict({"deep": TEXT, "n": gym.spaces.Box(0, 99, (), np.int32)}),
    }
)

WORDS = ["", "a", "go to the red ball", "é ü 🙂", "x" * 37, "two words"]


def text(v: int, e: int, t: int, salt: int = 0) -> str:
    """A string of varied length (the empty one included) that names (v, e, t)."""
    base = WORDS[(v + 2 * e + t + salt) % len(WORDS)]
    return base if (t + salt) % 3 == 0 else f"{base}|{v}:{e}:{t}"


def expected_obs(v: int, e: int, t: int) -> dict[str, Any]:
    """The observation sub-env ``v`` emits at step ``t`` of its episode ``e``."""
    k = 100 * v + 10 * e + t
    return {
        "stamp": np.array([v, e, t], np.int64),
        "f32": np.array([k + 0.5, -k], np.float32),
        "f64": np.array(k / 3.0),
        "u8": np.full((2, 2), k % 256, np.uint8),
        "i16": np.array([-k], np.int16),
        "flag": np.array([k % 2 == 0, k % 3 == 0]),
        "disc": np.int64(-2 + k % 5),
        "multi": np.array([k % 3, k % 4], np.int64),
        "bits": np.array([k % 2, (k // 2) % 2, 1], np.int8),
        "text": text(v, e, t),
        "pair": (np.int64(k % 7), text(v, e, t, salt=1)),
        "nested": {"deep": text(v, e, t, salt=2), "n": np.array(k % 99, np.int32)},
    }


class CatalogueEnv(gym.Env):
    """Episodes of 2 + (v + e) % 4 steps; ends truncated at odd episodes, terminated at even ones."""

    observation_space = SPACE
    action_space = gym.spaces.Discrete(2)

    def __init__(self, vector_index: int = 0) -> None:
        self.v, self.e, self.t = vector_index, -1, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.e, self.t = self.e + 1, 0
        return expected_obs(self.v, self.e, 0), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        done = self.t >= 2 + (self.v + self.e) % 4
        terminated, truncated = done and self.e % 2 == 0, done and self.e % 2 == 1
        return expected_obs(self.v, self.e, self.t), float(self.t), terminated, truncated, {}


def make_catalogue_env(ctx: Any) -> CatalogueEnv:
    return CatalogueEnv(ctx.vector_index)


def assert_emitted(obs: Any, stamp: np.ndarray | None = None) -> None:
    """``obs`` (one step's) equals what the env emitted for the (v, e, t) in its stamp, leaf by
    leaf, with the same dtypes for arrays and whole ``str`` for strings."""
    from ray_sampler.data import tree

    v, e, t = (int(x) for x in (obs["stamp"] if stamp is None else stamp))

    def check(want_leaf: Any, got_leaf: Any) -> None:
        if isinstance(want_leaf, str):
            assert isinstance(got_leaf, str) and got_leaf == want_leaf, (v, e, t, got_leaf, want_leaf)
        else:
            got, want = np.asarray(got_leaf), np.asarray(want_leaf)
            assert got.dtype == want.dtype and np.array_equal(got, want), (v, e, t, got, want)

    tree.map_structure(check, expected_obs(v, e, t), obs)  # by key: the order of a Dict's keys is free


def make_catalogue_vector(num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
    """The vector entry point: gymnasium's own SyncVectorEnv, NEXT_STEP autoreset."""
    fns = [lambda i=i: CatalogueEnv(i) for i in range(num_envs)]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
