"""Vector envs that return another library's arrays (torch tensors) or arrays the runner may not
write (read-only, as numpy views of JAX arrays are) sample exactly as the same env returning
numpy arrays: converted once at the vector boundary, never written into."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray_sampler import EnvRunner, EnvRunnerConfig
from tests.helpers import assert_episodes_equal


def read_only(x: Any) -> np.ndarray:
    out = np.array(x)
    out.flags.writeable = False
    return out


def as_tensor(x: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x))


class Foreign(gym.vector.VectorWrapper):
    """CartPole's own vector env, its observations, rewards and flags handed over as ``convert`` makes them."""

    def __init__(self, env: gym.vector.VectorEnv, convert: Any) -> None:
        super().__init__(env)
        self.convert = convert

    def reset(self, **kwargs: Any) -> Any:
        obs, infos = self.env.reset(**kwargs)
        return self.convert(obs), infos

    def step(self, actions: Any) -> Any:
        obs, rewards, terminated, truncated, infos = self.env.step(np.asarray(actions))
        return (*(self.convert(x) for x in (obs, rewards, terminated, truncated)), infos)


CONVERTERS = {"numpy": np.asarray, "read_only": read_only, "torch": as_tensor}
for name, convert in CONVERTERS.items():
    if f"ray_sampler_tests/ForeignCartPole-{name}-v0" not in gym.registry:
        gym.register(
            f"ray_sampler_tests/ForeignCartPole-{name}-v0",
            entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
            vector_entry_point=lambda num_envs, convert=convert, **kw: Foreign(
                gym.make_vec("CartPole-v1", num_envs, vectorization_mode="vector_entry_point", **kw), convert
            ),
            max_episode_steps=500,
        )


def sample(kind: str, columnar: bool) -> list[Any]:
    runner = EnvRunner(
        EnvRunnerConfig(
            env=f"ray_sampler_tests/ForeignCartPole-{kind}-v0",
            vectorization_mode="vector_entry_point",
            num_envs_per_env_runner=3,
            rollout_fragment_length=40,
            columnar_sampling=columnar,
            seed=1,
        )
    )
    return [c for _ in range(3) for c in runner.sample()]


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
@pytest.mark.parametrize("kind", ["read_only", "torch"])
def test_foreign_arrays_sample_as_numpy_ones_do(kind: str, columnar: bool) -> None:
    expected, got = sample("numpy", columnar), sample(kind, columnar)
    assert len(got) == len(expected) and sum(map(len, got)) == 3 * 3 * 40
    for a, b in zip(got, expected, strict=True):
        assert_episodes_equal(a, b, compare_ids=False)
        assert np.asarray(a.get_rewards()).dtype == np.float64 and type(a.get_observations(0)) is np.ndarray


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_gymnasiums_jax_cartpole_samples_on_both_engines(batch_mode: str, columnar: bool) -> None:
    # phys2d/CartPole-v1 is gymnasium's functional JAX env (the jax extra: jax and flax); its vector
    # env hands over JAX arrays, which are immutable: the runner once wrote into them here.
    runner = EnvRunner(
        EnvRunnerConfig(
            env="phys2d/CartPole-v1",
            vectorization_mode="vector_entry_point",
            num_envs_per_env_runner=4,
            rollout_fragment_length=50,
            batch_mode=batch_mode,
            columnar_sampling=columnar,
            seed=0,
        )
    )
    chunks = runner.sample() + runner.sample()
    if batch_mode == "truncate_episodes":
        assert sum(len(c) for c in chunks) == 2 * 4 * 50
    else:
        assert all(c.is_done for c in chunks) and sum(len(c) for c in chunks) >= 2 * 4 * 50
    for chunk in chunks:
        obs = np.asarray(chunk.get_observations())
        assert type(obs) is np.ndarray and obs.shape == (len(chunk) + 1, 4) and np.isfinite(obs).all()
        assert np.asarray(chunk.get_rewards()).dtype == np.float64
