"""MiniGrid and BabyAI (the ``minigrid`` extra): the ids resolve without importing minigrid first;
the random module samples them in both batch modes with every ``mission`` a whole string the env
could emit; the default MLP refuses them naming the leaf, before any actor starts; the MLP plus
``FilterObservationKeys`` samples them."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

from connectors import FilterObservationKeys
from ray_sampler import EnvRunner, EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
from ray_sampler.errors import ConfigError
from ray_sampler.modules import RandomModule

# Strings shorter than the number of sub-envs (Playground's is "") and missions that vary per episode.
ENVS = ["MiniGrid-Empty-5x5-v0", "MiniGrid-Playground-v0", "MiniGrid-DoorKey-5x5-v0", "BabyAI-GoToLocal-v0"]


@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
@pytest.mark.parametrize("env", ENVS)
def test_the_random_module_samples_whole_missions(env: str, batch_mode: str) -> None:
    runner = EnvRunner(
        EnvRunnerConfig(
            env=env,
            num_envs_per_env_runner=4,
            rollout_fragment_length=30,
            module_class=RandomModule,
            batch_mode=batch_mode,
            seed=0,
        )
    )
    mission_space = runner.observation_space["mission"]
    missions = [ep.get_observations(t)["mission"] for ep in runner.sample() for t in range(len(ep) + 1)]
    assert len(missions) >= 120
    assert all(isinstance(m, str) and mission_space.contains(m) for m in missions), set(missions)


def test_a_mission_is_the_one_its_sub_env_emitted() -> None:
    # BabyAI draws each sub-env's mission at reset: the first observation of each sub-env's first
    # episode is compared with the mission an env seeded the same way emits.
    runner = EnvRunner(
        EnvRunnerConfig(env="BabyAI-GoToLocal-v0", num_envs_per_env_runner=3, module_class=RandomModule, seed=5)
    )
    from ray_sampler.sampling.env_creator import sub_env_seeds

    seeds = sub_env_seeds(5, runner.worker_index, 3)
    assert seeds is not None
    chunks = runner.sample()
    firsts = {c.get_observations(0)["mission"] for c in chunks if c.t_started == 0}
    emitted = {gym.make("BabyAI-GoToLocal-v0").reset(seed=s)[0]["mission"] for s in seeds}
    assert emitted <= firsts and len(emitted) > 1


def test_the_default_mlp_refuses_the_mission_naming_the_leaf_and_the_fix() -> None:
    with pytest.raises(ConfigError) as err:
        EnvRunner(EnvRunnerConfig(env="MiniGrid-Empty-5x5-v0"))
    assert str(err.value).startswith("observation['mission'] is MissionSpace(")
    assert "MLPModule cannot flatten" in str(err.value)
    assert "FilterObservationKeys(['direction', 'image'])" in str(err.value)


@pytest.mark.usefixtures("ray_session")
def test_a_group_refuses_it_before_any_runner_starts() -> None:
    import ray

    before = len(ray.util.list_named_actors(all_namespaces=True))
    with pytest.raises(ConfigError, match=r"^observation\['mission'\] is MissionSpace"):
        EnvRunnerGroup(EnvRunnerConfig(env="MiniGrid-Empty-5x5-v0"), EnvRunnerGroupConfig(num_env_runners=1))
    assert len(ray.util.list_named_actors(all_namespaces=True)) == before


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
def test_the_mlp_with_the_key_filter_samples_and_keeps_the_whole_observation(columnar: bool) -> None:
    runner = EnvRunner(
        EnvRunnerConfig(
            env="MiniGrid-Empty-5x5-v0",
            num_envs_per_env_runner=2,
            rollout_fragment_length=10,
            env_to_module_connectors=(FilterObservationKeys(["image", "direction"]),),
            columnar_sampling=columnar,
        )
    )
    assert runner.is_vectorized == columnar
    assert sorted(runner.module_observation_space.spaces) == ["direction", "image"]
    chunks = runner.sample()
    assert sum(len(c) for c in chunks) == 20
    assert chunks[0].get_observations(0)["mission"] == "get to the green goal square"  # episodes keep it


def test_bad_filter_keys_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"keys \['colour'\] are not in the observation space"):
        EnvRunner(
            EnvRunnerConfig(
                env="MiniGrid-Empty-5x5-v0", env_to_module_connectors=(FilterObservationKeys(["image", "colour"]),)
            )
        )
    with pytest.raises(ConfigError, match=r"'keys' must be a non-empty list of Dict keys \(got 'image'\)"):
        FilterObservationKeys("image")  # type: ignore[arg-type]


def test_an_id_resolves_without_importing_minigrid_first() -> None:
    code = (
        "import sys; from ray_sampler.sampling.env_creator import resolve_creator; "
        "assert 'minigrid' not in sys.modules; resolve_creator('MiniGrid-Empty-5x5-v0'); "
        "import ray_sampler; assert 'minigrid' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
