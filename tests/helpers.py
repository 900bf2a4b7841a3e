"""Test fixtures: a counting env, a catalogue of spaces, episode builders and an exact comparison."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler import tree
from ray_sampler.episode import SingleAgentEpisode

__all__ = ["SPACES", "CountingEnv", "assert_episodes_equal", "episode_from_space", "full_state"]


class CountingEnv(gym.Env):
    """obs = [t], reward = t (for the step that led to obs t), terminated at t == episode_len."""

    def __init__(self, episode_len: int = 5) -> None:
        self.episode_len = episode_len
        self.observation_space = gym.spaces.Box(0, 10**9, shape=(1,), dtype=np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0]), {"t": 0}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.array([self.t]), float(self.t), self.t >= self.episode_len, False, {"t": self.t}


SPACES: dict[str, gym.Space] = {
    "box_f32_3": gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32),
    "box_u8_image": gym.spaces.Box(0, 255, shape=(4, 4, 3), dtype=np.uint8),
    "box_f64_scalar": gym.spaces.Box(-5.0, 5.0, shape=(), dtype=np.float64),
    "box_i16_2x2": gym.spaces.Box(-100, 100, shape=(2, 2), dtype=np.int16),
    "discrete": gym.spaces.Discrete(5),
    "discrete_start": gym.spaces.Discrete(3, start=-1),
    "multi_discrete": gym.spaces.MultiDiscrete([3, 4, 2]),
    "multi_binary": gym.spaces.MultiBinary(4),
    "dict": gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "id": gym.spaces.Discrete(4)}),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,), np.float32))),
    "nested": gym.spaces.Dict({
        "a": gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2))),
        "b": gym.spaces.Dict({"c": gym.spaces.MultiDiscrete([2, 3]), "d": gym.spaces.Box(0, 9, (), np.int32)}),
    }),
}


def episode_from_space(
    obs_space: gym.Space,
    action_space: gym.Space,
    num_steps: int,
    *,
    seed: int = 0,
    terminated: bool = False,
    extra: bool = True,
) -> SingleAgentEpisode:
    """A list-form episode with ``num_steps`` random steps from the spaces (seeded)."""
    obs_space.seed(seed)
    action_space.seed(seed + 1)
    ep = SingleAgentEpisode(observation_space=obs_space, action_space=action_space)
    ep.add_env_reset(obs_space.sample(), {"start": seed})
    for t in range(num_steps):
        ep.add_env_step(
            obs_space.sample(),
            action_space.sample(),
            float(t) - 0.5,
            {"t": t} if t % 3 == 0 else None,
            terminated=terminated and t == num_steps - 1,
            extra_model_outputs={"action_logp": np.float32(-t / 10), "vf_preds": np.float32(t)} if extra else None,
        )
    return ep


def full_state(ep: SingleAgentEpisode) -> dict[str, Any]:
    """Everything in ``ep``, lookback included, in numpy form (``ep`` itself is not changed)."""
    state = SingleAgentEpisode.from_state(ep.get_state()).to_numpy().get_state()
    del state["observation_space"], state["action_space"]
    return state


def assert_episodes_equal(a: SingleAgentEpisode, b: SingleAgentEpisode) -> None:
    """Field-by-field equality (values, dtypes, nesting, lookback, flags, infos)."""
    sa, sb = full_state(a), full_state(b)
    assert sa.keys() == sb.keys()
    for key in sa:
        x, y = sa[key], sb[key]
        if key in ("observations", "actions", "rewards"):
            _assert_struct_equal(x, y, key)
        elif key == "extra_model_outputs":
            assert x.keys() == y.keys()
            for k in x:
                _assert_struct_equal(x[k], y[k], f"extra_model_outputs[{k!r}]")
        else:
            assert x == y, key


def _assert_struct_equal(x: Any, y: Any, where: str) -> None:
    assert tree.spec_of(x) == tree.spec_of(y), where
    for lx, ly in zip(tree.flatten(x), tree.flatten(y)):
        assert lx.dtype == ly.dtype, f"{where}: {lx.dtype} != {ly.dtype}"
        np.testing.assert_array_equal(lx, ly, err_msg=where)
