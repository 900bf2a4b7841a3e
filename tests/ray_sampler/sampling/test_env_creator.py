"""Env creators: registered names, the EnvContext each sub-env's creator sees, creator errors, derived seeds."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from ray_sampler.errors import ConfigError, EnvCreatorError
from ray_sampler.sampling.config import EnvRunnerConfig, VectorizationMode
from ray_sampler.sampling.env_creator import (
    is_registered_env,
    make_vector_env,
    register_env,
    resolve_creator,
    sub_env_seeds,
    unregister_env,
)
from ray_sampler.sampling.env_runner import EnvRunner
from tests.helpers import STAMP_ID, stamp_creator
from tests.ray_sampler.sampling.checks import stamps


def test_creator_sees_distinct_worker_and_vector_indices() -> None:
    contexts: list[dict] = []

    def creator(ctx: Any) -> gym.Env:
        contexts.append(dict(ctx))
        assert ctx.worker_index == ctx["worker_index"]
        return stamp_creator(ctx)

    make_vector_env(
        EnvRunnerConfig(env=creator, num_envs_per_env_runner=3, env_config={"x": 1}), worker_index=4, num_workers=5
    )
    assert contexts == [
        {"x": 1, "worker_index": 4, "vector_index": v, "num_workers": 5, "num_envs": 3} for v in range(3)
    ]


def test_registered_env_name_is_used() -> None:
    register_env("stamp-for-test", stamp_creator)
    out = EnvRunner(EnvRunnerConfig(env="stamp-for-test", rollout_fragment_length=3)).sample()
    assert stamps(out[0])[0] == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("env", "error", "match"),
    [
        (42, ConfigError, "'env' must be a gymnasium id, a registered env name or a callable creator"),
        ("NoSuchEnv-v9", EnvCreatorError, "neither a name given to register_env nor a gymnasium id"),
        (lambda ctx: "not an env", EnvCreatorError, "must return a gymnasium.Env \\(got builtins.str"),
        (lambda ctx: 1 / 0, EnvCreatorError, r"env creator .*<lambda> failed for worker_index=0, vector_index=0: Zero"),
    ],
    ids=["not_callable", "unknown_name", "non_env", "raises"],
)
def test_bad_creators_raise_clear_errors(env: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make_vector_env(EnvRunnerConfig(env=env), worker_index=0, num_workers=0)


def test_sub_envs_with_different_spaces_raise() -> None:
    def creator(ctx: Any) -> gym.Env:
        return gym.make("CartPole-v1") if ctx.vector_index == 0 else gym.make("MountainCar-v0")

    with pytest.raises(EnvCreatorError, match="sub-envs must share their observation_space"):
        make_vector_env(EnvRunnerConfig(env=creator, num_envs_per_env_runner=2), worker_index=0, num_workers=0)


def test_unregister_env_forgets_the_name_and_a_gymnasium_id_is_found_again() -> None:
    register_env("CartPole-v1", stamp_creator)
    assert is_registered_env("CartPole-v1") and resolve_creator("CartPole-v1") is stamp_creator
    unregister_env("CartPole-v1")
    assert not is_registered_env("CartPole-v1")
    assert resolve_creator("CartPole-v1") is not stamp_creator
    with pytest.raises(EnvCreatorError, match="'CartPole-v1' is not registered"):
        unregister_env("CartPole-v1")


def test_register_env_checks_its_arguments() -> None:
    with pytest.raises(EnvCreatorError, match="'name' must be a non-empty str"):
        register_env("", stamp_creator)
    with pytest.raises(EnvCreatorError, match="'creator' for 'x' must be callable"):
        register_env("x", 3)  # type: ignore[arg-type]


def test_sub_env_seeds_differ_per_sub_env_and_worker_and_none_unseeded() -> None:
    seeds = sub_env_seeds(7, 1, 3)
    assert seeds is not None and len(set(seeds)) == 3
    assert sub_env_seeds(7, 1, 3) == seeds and sub_env_seeds(7, 2, 3) != seeds
    assert sub_env_seeds(None, 1, 3) is None


@pytest.mark.parametrize("seed", [0, 1, 7, 2**40], ids=["0", "1", "7", "2**40"])
def test_derived_seeds_stay_signed_32_bit_with_a_native_envs_offsets(seed: int) -> None:
    # A native vector env given seed s seeds its sub-envs s, s + 1, ...: with up to 64 of them, every
    # one must stay below 2**31 (ALE's vector env refuses more), for each worker and rebuild.
    seeds = [
        s
        for worker in range(64)
        for restart in (0, 1, 2)
        for s in sub_env_seeds(seed, worker, 64, restart=restart) or []
    ]
    assert len(seeds) == 64 * 3 * 64
    assert min(seeds) >= 0
    assert max(seeds) + 63 < 2**31


@pytest.mark.parametrize("mode", list(VectorizationMode), ids=[m.value for m in VectorizationMode])
@pytest.mark.parametrize("worker_index", [0, 1, 5])
def test_every_mode_seeds_its_sub_envs_below_2_31(mode: VectorizationMode, worker_index: int) -> None:
    config = EnvRunnerConfig(env=STAMP_ID, vectorization_mode=mode, num_envs_per_env_runner=3, seed=0)
    runner = EnvRunner(config, worker_index=worker_index)
    runner.sample(num_timesteps=3)
    seeds = sub_env_seeds(0, worker_index, 3)
    assert seeds is not None
    # Sync: one derived seed per sub-env; native: the first, and the env's own s + i after it.
    expected = seeds if mode is VectorizationMode.SYNC else [seeds[0] + i for i in range(3)]
    assert [env.unwrapped.np_random_seed for env in runner.env.envs] == expected
    assert max(expected) < 2**31


class TestDidYouMean:
    """An unknown env name's error suggests the closest known ones."""

    def test_an_unknown_gymnasium_id_gets_the_closest_ids(self) -> None:
        with pytest.raises(EnvCreatorError, match=r"; did you mean 'CartPole-v1' or 'CartPole-v0'\?$"):
            resolve_creator("CartPol-v1")

    def test_an_unknown_name_gets_a_registered_name(self) -> None:
        register_env("stamp-for-suggestions", stamp_creator)
        try:
            with pytest.raises(EnvCreatorError, match=r"; did you mean 'stamp-for-suggestions'\?$"):
                resolve_creator("stamp-for-sugestions")
        finally:
            unregister_env("stamp-for-suggestions")

    def test_an_unknown_name_of_a_module_gets_the_modules_closest(self) -> None:
        with pytest.raises(
            EnvCreatorError, match=r"registered no gymnasium id 'stamp_creatr'; did you mean 'stamp_creator'\?$"
        ):
            resolve_creator("tests.helpers:stamp_creatr")

    def test_a_pettingzoo_short_name_gets_the_closest_module(self) -> None:
        with pytest.raises(
            EnvCreatorError, match=r"mpe2\.tictactoe_v2\); did you mean 'pettingzoo:classic\.tictactoe_v3'\?$"
        ):
            resolve_creator("pettingzoo:tictactoe_v2")

    def test_a_pettingzoo_family_name_gets_the_closest_module(self) -> None:
        with pytest.raises(EnvCreatorError, match=r"; did you mean 'pettingzoo:mpe2\.simple_spread_v3'\?$"):
            resolve_creator("pettingzoo:mpe2.simple_sprad_v3")
