"""Fixtures for trajectory views: an env of tiny uint8 frames and a module that records what it saw."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from connectors.env_to_module import FrameStackingEnvToModule, PrevActionsPrevRewardsEnvToModule
from ray_sampler.data.columns import Columns
from ray_sampler.sampling.config import EnvRunnerConfig
from tests.helpers import stamp_length

__all__ = ["FRAME_ID", "FrameEnv", "SeeingModule", "frame_config", "frame_creator", "frame_vector_env", "ordered"]


class FrameEnv(gym.Env):
    """uint8 frames [2, 3]: row 0 holds (t, episode, vector), row 1 is t's low bits; reward = t + 0.25 * action.

    Episode ``k`` of sub-env ``v`` lasts ``stamp_length(v, k)`` (2..8) steps. ``nested`` wraps the
    frame in a Dict with a Discrete leaf; ``box_actions`` makes the action a Box of two floats.
    """

    def __init__(self, vector: int = 0, *, nested: bool = False, box_actions: bool = False) -> None:
        self.vector, self.nested = vector, nested
        frame = gym.spaces.Box(0, 255, shape=(2, 3), dtype=np.uint8)
        self.observation_space = (
            gym.spaces.Dict({"frame": frame, "parity": gym.spaces.Discrete(2)}) if nested else frame
        )
        self.action_space = (
            gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32) if box_actions else gym.spaces.Discrete(3)
        )
        self.episode, self.t = -1, 0

    def _obs(self) -> Any:
        frame = np.zeros((2, 3), np.uint8)
        frame[0] = (self.t, self.episode % 256, self.vector)
        frame[1] = (self.t & 1, (self.t >> 1) & 1, (self.t >> 2) & 1)
        return {"frame": frame, "parity": self.t % 2} if self.nested else frame

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        a = float(np.asarray(action).reshape(-1)[0])
        return self._obs(), self.t + 0.25 * a, self.t >= stamp_length(self.vector, self.episode), False, {}


def frame_creator(ctx: dict[str, Any]) -> FrameEnv:
    return FrameEnv(ctx["vector_index"], nested=ctx.get("nested", False), box_actions=ctx.get("box_actions", False))


def frame_vector_env(num_envs: int = 1, autoreset_mode: str = "NextStep", **kwargs: Any) -> gym.vector.VectorEnv:
    """A 'native' vector FrameEnv reporting the given autoreset mode."""
    return gym.vector.SyncVectorEnv(
        [lambda v=v: FrameEnv(v, **kwargs) for v in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode(autoreset_mode),
    )


FRAME_ID = "RaySamplerFrames-v0"
if FRAME_ID not in gym.registry:
    gym.register(
        FRAME_ID,
        entry_point="tests.ray_sampler.sampling.frames:FrameEnv",
        vector_entry_point="tests.ray_sampler.sampling.frames:frame_vector_env",
    )


class SeeingModule:
    """Seeded random actions; records the forward batch it got (``seen_obs``, ``seen_prev_actions``,
    ``seen_prev_rewards``) as extra model outputs, so every step stores what the module saw."""

    needs_flat_observations = False

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, seed: int | None = 0) -> None:
        self.observation_space, self.action_space = observation_space, action_space
        self.rng = np.random.default_rng(seed)

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        n = len(obs["frame"] if isinstance(obs, dict) else obs)
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            actions = self.rng.integers(0, space.n, n)
        else:
            actions = self.rng.uniform(-1, 1, (n, *space.shape)).astype(space.dtype)
        out = {Columns.ACTIONS: actions, "seen_obs": obs}
        for key in (Columns.PREV_ACTIONS, Columns.PREV_REWARDS):
            if key in batch:
                out[f"seen_{key}"] = batch[key]
        return out

    forward_inference = forward_exploration

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass


def frame_config(
    mode: str = "sync",
    *,
    num_frames: int = 4,
    n_prev: int = 2,
    nested: bool = False,
    box_actions: bool = False,
    **kwargs: Any,
) -> EnvRunnerConfig:
    """A runner of 3 FrameEnvs, cut every 3 steps, with both trajectory-view pieces and a SeeingModule;
    ``mode``: our SyncVectorEnv ("sync") or a native vector env in that autoreset mode."""
    env_config: dict[str, Any] = {"nested": nested, "box_actions": box_actions}
    native = {} if mode == "sync" else {"env": FRAME_ID, "vectorization_mode": "vector_entry_point"}
    if native:
        env_config["autoreset_mode"] = mode
    return EnvRunnerConfig(
        **{
            "env": frame_creator,
            **native,
            "env_config": env_config,
            "num_envs_per_env_runner": 3,
            "rollout_fragment_length": 3,
            "module_class": SeeingModule,
            "env_to_module_connectors": (
                FrameStackingEnvToModule(num_frames=num_frames),
                PrevActionsPrevRewardsEnvToModule(n_prev_actions=n_prev, n_prev_rewards=n_prev),
            ),
            **kwargs,
        }
    )


def ordered(chunks: list[Any]) -> list[Any]:
    """Chunks in (sub-env, episode, t_started) order: the engines may return them in different orders."""

    def key(c: Any) -> tuple[int, int, int]:
        obs = c.get_observations(0)
        frame = np.asarray(obs["frame"] if isinstance(obs, dict) else obs)
        return int(frame[0, 2]), int(frame[0, 1]), c.t_started

    return sorted(chunks, key=key)
