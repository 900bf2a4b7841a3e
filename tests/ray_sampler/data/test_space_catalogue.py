"""Every leaf space the runner stores, nested in Dict and Tuple (``catalogue.CatalogueEnv``), comes
back exactly as the env emitted it: through the runner (both batch modes, both engines, SAME_STEP
and NEXT_STEP vector envs, 3 sub-envs), the columnar form, the Arrow round trip, and replay
``add`` / ``sample`` / persistence. Leaves without a fixed kind per step are refused before any
actor starts, naming the leaf."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler import EnvRunner, EnvRunnerConfig
from ray_sampler.data import tree
from ray_sampler.data.arrow_format import arrow_to_columnar, columnar_to_arrow
from ray_sampler.data.columnar import columnar_to_episodes, episodes_to_columnar
from ray_sampler.errors import ConfigError
from ray_sampler.modules import RandomModule
from replay import EpisodeReplayBuffer
from replay.persistence import restore_buffer, save_buffer
from tests.ray_sampler.data.catalogue import (
    CatalogueEnv,
    assert_emitted,
    expected_obs,
    make_catalogue_env,
    make_catalogue_vector,
)

CATALOGUE_ID = "ray_sampler_tests/Catalogue-v0"
if CATALOGUE_ID not in gym.registry:
    # Its vector entry point is gymnasium's own SyncVectorEnv, NEXT_STEP autoreset.
    gym.register(CATALOGUE_ID, entry_point=CatalogueEnv, vector_entry_point=make_catalogue_vector)


def runner(batch_mode: str, columnar: bool, vector: str) -> EnvRunner:
    native = {"env": CATALOGUE_ID, "vectorization_mode": "vector_entry_point"} if vector == "native" else {}
    return EnvRunner(
        EnvRunnerConfig(
            **{"env": make_catalogue_env, **native},
            num_envs_per_env_runner=3,
            rollout_fragment_length=5,
            module_class=RandomModule,
            batch_mode=batch_mode,
            columnar_sampling=columnar,
        )
    )


def assert_chunks_as_emitted(chunks: list[Any]) -> int:
    """Every observation of every chunk (its lookback included) is what the env emitted, and each
    follows the one before it; returns how many were checked."""
    checked = 0
    for ep in chunks:
        first = ep.get_observations(0)["stamp"]
        for t in range(-ep.observations.lookback, len(ep) + 1):
            obs = ep.get_observations(t, neg_index_as_lookback=True) if t < 0 else ep.get_observations(t)
            assert_emitted(obs)
            assert obs["stamp"].tolist() == [first[0], first[1], first[2] + t]
            checked += 1
    return checked


@pytest.mark.parametrize("vector", ["sync", "native"])
@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per_step"])
@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_the_runner_ships_every_leaf_as_emitted(batch_mode: str, columnar: bool, vector: str) -> None:
    r = runner(batch_mode, columnar, vector)
    assert r.is_vectorized == (columnar and batch_mode == "truncate_episodes")
    chunks = [c for _ in range(4) for c in r.sample()]
    assert assert_chunks_as_emitted(chunks) > 60
    texts = {c.get_observations(t)["text"] for c in chunks for t in range(len(c) + 1)}
    assert "" in texts and max(map(len, texts)) > 3  # empty strings and strings longer than num_envs
    if batch_mode == "truncate_episodes":
        col, _ = r.sample_columnar()
        assert col.data.observations["text"].dtype == np.dtypes.StringDType()
        assert_chunks_as_emitted(columnar_to_episodes(col))


@pytest.fixture(scope="module")
def chunks() -> list[Any]:
    r = runner("truncate_episodes", True, "sync")
    return [c for _ in range(4) for c in r.sample()]


def test_the_columnar_form_and_arrow_give_every_leaf_back(chunks: list[Any]) -> None:
    col = episodes_to_columnar(chunks)
    assert_chunks_as_emitted(columnar_to_episodes(col))
    table = columnar_to_arrow(col)
    assert str(table.schema.field("obs.text").type) == "string"
    assert table.schema.field("obs.pair.1").metadata[b"dtype"] == b"str"
    assert_chunks_as_emitted(columnar_to_episodes(arrow_to_columnar(table)))


def assert_transitions_as_emitted(batch: dict[str, Any], next_key: str = "next_obs") -> None:
    """Each sampled observation as emitted, and its next observation the step ``n`` after it."""
    n_steps = batch.get("n_step", np.ones(len(batch["rewards"]), np.int64))
    for obs, nxt, n in zip(tree.unstack(batch["obs"]), tree.unstack(batch[next_key]), n_steps, strict=True):
        assert_emitted(obs)
        v, e, t = obs["stamp"].tolist()
        assert_emitted(nxt, stamp=np.array([v, e, t + int(n)]))


@pytest.mark.parametrize("capacity", [1000, 40], ids=["filling", "evicting"])
def test_replay_samples_and_persists_every_leaf_as_emitted(chunks: list[Any], capacity: int, tmp_path: Path) -> None:
    buffer = EpisodeReplayBuffer(capacity=capacity, seed=0)
    for chunk in chunks:  # one add per chunk: the evicting buffer compacts many times
        buffer.add(chunk)
    assert_transitions_as_emitted(buffer.sample(batch_size_B=64))
    assert_transitions_as_emitted(buffer.sample(batch_size_B=64, n_step=3))
    assert assert_chunks_as_emitted(buffer.sample_episodes(batch_size_B=8, batch_length_T=3, lookback=2)) > 0
    path = tmp_path / "replay.parquet"
    save_buffer(buffer, path)
    restored = restore_buffer(path, seed=0)
    assert_transitions_as_emitted(restored.sample(batch_size_B=64))


def test_the_catalogue_values_are_what_the_space_holds() -> None:
    for v, e, t in [(0, 0, 0), (2, 3, 5)]:
        obs = expected_obs(v, e, t)
        assert CatalogueEnv.observation_space.contains(obs), obs


@pytest.mark.parametrize(
    ("leaf", "shown"),
    [
        (gym.spaces.Sequence(gym.spaces.Discrete(3)), "Sequence(Discrete(3), stack=False)"),
        (gym.spaces.OneOf([gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,))]), "OneOf("),
        (gym.spaces.Graph(gym.spaces.Discrete(2), None), "Graph("),
    ],
    ids=["sequence", "one_of", "graph"],
)
def test_leaves_without_a_fixed_kind_are_refused_naming_the_leaf(leaf: gym.Space, shown: str) -> None:
    class Odd(CatalogueEnv):
        observation_space = gym.spaces.Dict({"ok": gym.spaces.Discrete(2), "inner": gym.spaces.Tuple((leaf,))})

    with pytest.raises(ConfigError) as err:
        EnvRunner(EnvRunnerConfig(env=lambda ctx: Odd(), module_class=RandomModule))
    message = str(err.value)
    assert message.startswith(f"observation['inner'][0] is {shown}") and "Text" in message
    assert "\n" not in message


class SequenceEnv(CatalogueEnv):
    observation_space = gym.spaces.Dict({"seq": gym.spaces.Sequence(gym.spaces.Discrete(3))})


def make_sequence_env(ctx: Any) -> SequenceEnv:
    return SequenceEnv(ctx.vector_index)


@pytest.mark.usefixtures("ray_session")
def test_a_group_refuses_such_a_leaf_before_any_runner_starts() -> None:
    import ray

    from ray_sampler import EnvRunnerGroup, EnvRunnerGroupConfig

    before = len(ray.util.list_named_actors(all_namespaces=True))
    config = EnvRunnerConfig(env=make_sequence_env, module_class=RandomModule)
    with pytest.raises(ConfigError, match=r"^observation\['seq'\] is Sequence\(Discrete\(3\), stack=False\): "):
        EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2))
    assert len(ray.util.list_named_actors(all_namespaces=True)) == before
