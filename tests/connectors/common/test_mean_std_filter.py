"""MeanStdFilter: normalization, and exact merging of runner states over many sync rounds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import ray

from connectors.common import MeanStdFilter
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup


def feed(f: MeanStdFilter, obs: np.ndarray) -> np.ndarray:
    return f(rl_module=None, batch={"obs": obs}, episodes=[])["obs"]


def test_normalizes_with_what_it_has_seen() -> None:
    f = MeanStdFilter()
    data = np.random.default_rng(0).normal(5.0, 2.0, (1000, 3))
    out = feed(f, data)
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(0), 1.0, atol=1e-4)
    frozen = MeanStdFilter(update=False)
    frozen.set_state(f.get_state())  # the copied moments become the agreed ones
    feed(frozen, data + 100)
    assert frozen.get_state()["global"]["count"] == 1000.0 and frozen.get_state()["local"]["count"] == 0.0
    np.testing.assert_allclose(feed(frozen, data), out, atol=1e-5)  # the same normalization, nothing learned


def test_merged_state_is_exact_over_many_sync_rounds() -> None:
    rng = np.random.default_rng(1)
    runners = [MeanStdFilter() for _ in range(3)]
    seen = []
    for _ in range(5):  # sync rounds
        for f in runners:
            batch = rng.normal(rng.uniform(-3, 3), rng.uniform(0.5, 4), (int(rng.integers(1, 50)), 2))
            feed(f, batch)
            seen.append(batch)
        merged = MeanStdFilter.merge_states([f.get_state() for f in runners])
        for f in runners:
            f.set_state(merged)
        everything = np.concatenate(seen)
        g = merged["global"]
        assert g["count"] == len(everything)
        np.testing.assert_allclose(g["mean"], everything.mean(0), rtol=1e-12)
        np.testing.assert_allclose(g["m2"] / g["count"], everything.var(0), rtol=1e-10)


def test_pipeline_merges_by_piece_name_not_position() -> None:
    a = ConnectorPipelineV2([MeanStdFilter()])
    b = ConnectorPipelineV2([ConnectorPipelineV2([], name="Other"), MeanStdFilter()])
    feed(a.connectors[0], np.array([[1.0], [2.0]]))
    feed(b.connectors[1], np.array([[4.0]]))
    merged = a.merge_states([a.get_state(), b.get_state()])
    assert merged["MeanStdFilter"]["global"]["count"] == 3.0
    assert merged["MeanStdFilter"]["global"]["mean"][0] == pytest.approx(7.0 / 3.0)


@pytest.mark.usefixtures("ray_session")
def test_group_syncs_filter_states_of_its_runners_exactly() -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        num_envs_per_env_runner=2,
        rollout_fragment_length=10,
        env_to_module_connectors=(MeanStdFilter(),),
    )
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)) as group:
        group.sample()
        merged = group.sync_connector_states()
        g = merged["MeanStdFilter"]["global"]
        # Each runner's module saw one batch per vector step: 2 runners x 10 steps x 2 sub-envs.
        assert g["count"] == 2 * 10 * 2
        states: list[Any] = ray.get([group.actor(i).get_state.remote() for i in group.worker_indices])
        for state in states:
            assert state["env_to_module"]["MeanStdFilter"]["global"]["count"] == g["count"]
            assert state["env_to_module"]["MeanStdFilter"]["local"]["count"] == 0.0


@pytest.mark.usefixtures("ray_session")
def test_connector_states_go_with_the_weights_in_one_sync() -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        num_envs_per_env_runner=2,
        rollout_fragment_length=10,
        env_to_module_connectors=(MeanStdFilter(),),
    )
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)) as group:
        group.sample()
        weights = {k: v + 1.0 for k, v in ray.get(group.actor(1).get_state.remote())["module"].items()}
        version = group.sync_weights(weights, connector_states=True)
        assert group.merged_connector_states["MeanStdFilter"]["global"]["count"] == 2 * 10 * 2
        group.scale(3)  # a runner added later takes the same weights and filter state
        group.sync_weights(weights)  # weights alone: the filter state stays what was agreed
        group.scale(4)
        states: list[Any] = ray.get([group.actor(i).get_state.remote() for i in group.worker_indices])
        for state in states:
            assert state["env_to_module"]["MeanStdFilter"]["global"]["count"] == 2 * 10 * 2
            assert state["env_to_module"]["MeanStdFilter"]["local"]["count"] == 0.0
            assert all(np.array_equal(state["module"][k], w) for k, w in weights.items())
            assert state["weights_version"] == version + 1
        group.scale(0)
        for _ in range(2):  # no runner saw anything since: what was agreed stands
            group.sync_weights(weights, connector_states=True)
        group.scale(1)
        state = ray.get(group.actor(group.worker_indices[0]).get_state.remote())
        assert state["env_to_module"]["MeanStdFilter"]["global"]["count"] == 2 * 10 * 2


def test_copies_of_one_state_are_not_counted_twice() -> None:
    source = MeanStdFilter()
    feed(source, np.array([[1.0], [2.0]]))
    copies = [MeanStdFilter() for _ in range(3)]
    for c in copies:
        c.set_state(source.get_state())
    assert MeanStdFilter.merge_states([c.get_state() for c in copies])["global"]["count"] == 2.0


def test_a_fresh_copy_first_does_not_drop_history() -> None:
    old, fresh = MeanStdFilter(), MeanStdFilter()
    feed(old, np.ones((20, 1)))
    old.set_state(MeanStdFilter.merge_states([old.get_state()]))
    feed(old, np.ones((2, 1)))
    assert MeanStdFilter.merge_states([fresh.get_state(), old.get_state()])["global"]["count"] == 22.0


def test_reset_state_forgets_every_observation() -> None:
    f = MeanStdFilter()
    feed(f, np.array([[1.0], [3.0]]))
    f.set_state(MeanStdFilter.merge_states([f.get_state()]))
    feed(f, np.array([[5.0]]))
    f.reset_state()
    assert f.get_state() == {
        "global": {"count": 0.0, "mean": None, "m2": None},
        "local": {"count": 0.0, "mean": None, "m2": None},
    }
    assert feed(f, np.array([[7.0]])).tolist() == [[7.0]]  # one observation: not normalized yet


def test_bad_observations_and_states_raise() -> None:
    from ray_sampler.errors import ConfigError

    a, b = MeanStdFilter(), MeanStdFilter()
    feed(a, np.ones((2, 1)))
    feed(b, np.ones((2, 3)))
    with pytest.raises(ConfigError, match="cannot be merged"):
        MeanStdFilter.merge_states([a.get_state(), b.get_state()])
    with pytest.raises(ConfigError, match="not a Dict/Tuple"):
        feed(MeanStdFilter(), {"x": np.ones((2, 1))})  # type: ignore[arg-type]
    import gymnasium as gym

    with pytest.raises(ConfigError, match="needs a Box observation space"):
        MeanStdFilter(observation_space=gym.spaces.Discrete(3))
    with pytest.raises(ConfigError, match="at least one state"):
        MeanStdFilter.merge_states([])


def test_learner_mode_normalizes_the_module_batch_and_gae_values() -> None:
    from connectors.learner import AddColumnsFromEpisodesToTrainBatch, GeneralAdvantageEstimation
    from ray_sampler.data.episode import SingleAgentEpisode

    seen: list[np.ndarray] = []

    class Recorder:
        def compute_values(self, obs: np.ndarray) -> np.ndarray:
            seen.append(np.asarray(obs))
            return np.zeros(len(obs))

    runner_filter = MeanStdFilter()
    feed(runner_filter, np.array([[0.0], [10.0]]))
    learner_filter = MeanStdFilter(update=False, module_id="default_policy")
    learner_filter.set_state(runner_filter.get_state())
    ep = SingleAgentEpisode(
        observations=[np.array([0.0]), np.array([10.0])],
        actions=[0],
        rewards=[1.0],
        extra_model_outputs={"action_logp": [0.0]},
    )
    out = ConnectorPipelineV2(
        [AddColumnsFromEpisodesToTrainBatch(), learner_filter, GeneralAdvantageEstimation(standardize_advantages=False)]
    )(rl_module=Recorder(), batch={}, episodes=[ep])
    np.testing.assert_allclose(out["default_policy"]["obs"], [[-1.0]], atol=1e-6)
    np.testing.assert_allclose(seen[0], [[-1.0], [1.0]], atol=1e-6)  # GAE's values saw the same
    assert "obs" not in out
    # After frame stacking, GAE's values see the stacks normalized, as the policy inputs are.
    from connectors.learner import FrameStacking

    seen.clear()
    out = ConnectorPipelineV2(
        [
            AddColumnsFromEpisodesToTrainBatch(),
            FrameStacking(num_frames=2),
            learner_filter,
            GeneralAdvantageEstimation(standardize_advantages=False),
        ]
    )(rl_module=Recorder(), batch={}, episodes=[ep], shared_data={})
    # The fill (0) is normalized too.
    np.testing.assert_allclose(out["default_policy"]["obs"], [[[-1.0], [-1.0]]], atol=1e-6)
    np.testing.assert_allclose(seen[0], [[[-1.0], [-1.0]], [[-1.0], [1.0]]], atol=1e-6)


@pytest.mark.usefixtures("ray_session")
def test_scaling_keeps_the_filter_history() -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        num_envs_per_env_runner=2,
        rollout_fragment_length=10,
        env_to_module_connectors=(MeanStdFilter(),),
    )
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)) as group:
        group.sample()
        group.sync_connector_states()  # 40 observations agreed
        group.sample()
        group.scale(0)  # stopped runners' 40 unsynced observations are kept for the next sync
        group.scale(2)  # new runners start from the agreed state
        group.sample()
        merged = group.sync_connector_states()
        assert merged["MeanStdFilter"]["global"]["count"] == 120


@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_the_filter_runs_on_the_vectorized_engine_and_equals_the_per_step_engine(mode: str) -> None:
    from ray_sampler.sampling.env_runner import EnvRunner
    from tests.helpers import assert_episodes_equal

    def runner(columnar: bool) -> EnvRunner:
        config = EnvRunnerConfig(
            env="CartPole-v1",
            num_envs_per_env_runner=3,
            rollout_fragment_length=40,
            seed=3,
            env_to_module_connectors=(MeanStdFilter(),),
            columnar_sampling=columnar,
            vectorization_mode=mode,
        )
        return EnvRunner(config)

    def ordered(chunks: list[Any]) -> list[Any]:  # the engines may return chunks in different orders
        return sorted(chunks, key=lambda c: (tuple(np.asarray(c.get_observations(0)).tolist()), c.t_started))

    fast, slow = runner(True), runner(False)
    assert fast.is_vectorized and fast.vectorized_fallback is None and not slow.is_vectorized
    for _ in range(3):  # equal actions: the module saw equal normalized observations at every step
        a, b = ordered(fast.sample()), ordered(slow.sample())
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_episodes_equal(x, y, compare_ids=False)
    moments = [r.env_to_module.get_state()["MeanStdFilter"]["local"] for r in (fast, slow)]
    # Every observation a module acted on: 3 calls x 40 x 3 sub-envs, plus (native NextStep
    # autoreset) the reset observations of the vector steps that only reset.
    assert moments[0]["count"] == moments[1]["count"] >= 3 * 40 * 3
    np.testing.assert_allclose(moments[0]["mean"], moments[1]["mean"], rtol=1e-12)
    np.testing.assert_allclose(moments[0]["m2"], moments[1]["m2"], rtol=1e-10)
