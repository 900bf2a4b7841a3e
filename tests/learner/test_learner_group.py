"""LearnerGroup and shard_episodes: balanced shards, argument checks, a local group equal to its
learner, and data-parallel learner actors that end with identical weights (from episodes and from a
replay)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import ray

from learner.dqn import DQNConfig, DQNLearner
from learner.learner import Learner, PPOConfig
from learner.learner_group import LearnerGroup, shard_episodes
from ray_sampler.errors import ConfigError, InsufficientResourcesError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from tests.helpers import cpus_back_to, idle_cpus
from tests.learner.test_dqn_replay import make_module, random_batches
from tests.replay.test_storage import episode


def cartpole_runner(seed: int = 0, *, num_envs: int = 8, fragment: int = 256) -> EnvRunner:
    return EnvRunner(
        EnvRunnerConfig(
            env="CartPole-v1", num_envs_per_env_runner=num_envs, rollout_fragment_length=fragment, seed=seed
        )
    )


class FixedReplay:
    """Hands out fixed batches: each caller of a round gets the next rows of every batch, so the
    learners of a group together hold exactly the rows one local learner gets."""

    def __init__(self, batches: list[dict[str, np.ndarray]]) -> None:
        self.batches, self.used, self.pushed = batches, 0, []

    def sample_batches(self, batch_size_B: int, num_batches: int, **_: Any) -> list[dict[str, np.ndarray]]:
        start = self.used
        self.used = (self.used + batch_size_B) % len(self.batches[0]["obs"])
        return [{k: v[start : start + batch_size_B] for k, v in b.items()} for b in self.batches[:num_batches]]

    def update_priorities(self, keys: np.ndarray, priorities: np.ndarray) -> None:
        self.pushed.append((np.asarray(keys), np.asarray(priorities)))

    def get_pushed(self) -> dict[int, float]:
        return {int(k): float(p) for keys, prios in self.pushed for k, p in zip(keys, prios, strict=True)}


class TestShardEpisodes:
    def test_shards_hold_equal_steps(self) -> None:
        shards = shard_episodes([episode(str(i), n) for i, n in enumerate([5, 4, 3, 3, 2, 1])], 2)
        assert sorted(sum(len(ep) for ep in shard) for shard in shards) == [9, 9]

    def test_each_next_longest_episode_goes_to_the_shard_with_fewest_steps(self) -> None:
        shards = shard_episodes([episode(str(i), n) for i, n in enumerate([1, 5, 3, 4, 3, 2])], 3)
        # 5 -> s0; 4 -> s1; 3 -> s2; 3 -> s2 (3 < 4); 2 -> s1 (4 < 5, 6); 1 -> s0 (5 < 6, 6).
        assert [[ep.id_ for ep in shard] for shard in shards] == [["1", "0"], ["3", "5"], ["2", "4"]]

    def test_more_shards_than_episodes_leaves_shards_empty(self) -> None:
        shards = shard_episodes([episode("a", 2)], 3)
        assert [[ep.id_ for ep in shard] for shard in shards] == [["a"], [], []]

    def test_refuses_zero_shards(self) -> None:
        with pytest.raises(ConfigError, match=r"'num_shards' must be an int >= 1 \(got 0\)"):
            shard_episodes([], 0)


class TestLearnerGroupArguments:
    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"num_learners": -1}, r"'num_learners' must be an int >= 0 \(got -1\)"),
            ({"num_learners": True}, r"'num_learners' must be an int >= 0 \(got True\)"),
            ({"num_cpus_per_learner": float("nan")}, r"'num_cpus_per_learner' must be a finite number >= 0"),
            ({"timeout_s": 0}, r"'timeout_s' must be a finite number > 0 \(got 0\)"),
        ],
        ids=["negative", "bool", "nan_cpus", "zero_timeout"],
    )
    def test_bad_arguments_raise_before_any_learner_starts(self, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            LearnerGroup(lambda: None, PPOConfig(), **kwargs)

    def test_update_from_replay_refuses_bad_arguments(self) -> None:
        group = LearnerGroup(make_module, DQNConfig(), learner_class=DQNLearner)
        with pytest.raises(ConfigError, match="'num_updates' must be an int >= 1"):
            group.update_from_replay(FixedReplay(random_batches(1, 4)), 0, 4)
        with pytest.raises(ConfigError, match="'batch_size_B' must be an int >= 1"):
            group.update_from_replay(FixedReplay(random_batches(1, 4)), 1, 0)
        with pytest.raises(ConfigError, match=r"'num_updates' must be an int >= 1 \(got True\)"):
            group.update_from_replay(FixedReplay(random_batches(1, 4)), True, 4)
        with pytest.raises(ConfigError, match=r"'prioritized' must be True or False \(got 'yes'\)"):
            group.update_from_replay(FixedReplay(random_batches(1, 4)), 1, 4, prioritized="yes")


def test_a_local_group_updates_exactly_as_its_one_learner() -> None:
    runner = cartpole_runner(num_envs=2, fragment=64)
    spaces = (runner.observation_space, runner.action_space)
    config = PPOConfig(num_epochs=2, minibatch_size=32)
    group = LearnerGroup(lambda: MLPModule(*spaces, seed=0), config)
    learner = Learner(MLPModule(*spaces, seed=0), config)
    episodes = runner.sample()
    metrics = dict(group.update_from_episodes(episodes))
    expected = dict(learner.update_from_episodes(episodes))
    del metrics["learner_connector_s"], expected["learner_connector_s"]  # wall time
    assert metrics == expected
    weights = group.get_weights()
    assert sorted(weights) == sorted(learner.module.get_state())
    for k, v in learner.module.get_state().items():
        np.testing.assert_array_equal(weights[k], v)
    assert len(group.get_states()) == 1 and metrics["num_learners"] == 0


@pytest.mark.usefixtures("ray_session")
def test_data_parallel_learners_end_with_identical_weights() -> None:
    runner = cartpole_runner(seed=3)
    spaces = (runner.observation_space, runner.action_space)
    config = PPOConfig(num_epochs=2, minibatch_size=512)
    group = LearnerGroup(lambda: MLPModule(*spaces, seed=0), config, num_learners=2, num_cpus_per_learner=0.5)
    try:
        before = group.get_weights()
        for _ in range(2):
            metrics = group.update_from_episodes(runner.sample())
        states = group.get_states()
        assert metrics.num_learners == 2 and metrics.batch_size == 2048 and metrics.weights_version == 2
        for k, v in states[0]["module"].items():
            # The same averaged gradient on every learner, but each actor's Adam step (its clip norm a BLAS
            # dot) runs in its own process, on a cluster on another CPU: equal to a few float32 ulps. One
            # missed or different Adam step moves every weight by about lr (2e-3), far beyond 1e-6.
            np.testing.assert_allclose(v, states[1]["module"][k], rtol=1e-6, atol=1e-8, err_msg=k)
        assert states[0]["optimizer"]["t"] == states[1]["optimizer"]["t"] == 2 * 2 * 4
        assert any(not np.array_equal(before[k], states[0]["module"][k]) for k in before)
        assert states[0]["weights_version"] == states[1]["weights_version"] == 2
    finally:
        group.stop()


@pytest.mark.usefixtures("ray_session")
def test_learners_that_all_reduce_take_the_steps_of_the_drivers_average_without_it() -> None:
    """``gradient_sync="allreduce"``: the learners sum their row-weighted gradients in a gloo group;
    the same episodes and shuffles give the weights the driver's average gives, within float
    rounding (the sums run in another order), and no gradient byte passes through the driver."""
    runner = cartpole_runner(seed=4, num_envs=4, fragment=128)
    spaces = (runner.observation_space, runner.action_space)
    config = PPOConfig(num_epochs=2, minibatch_size=128)
    batches = [runner.sample() for _ in range(2)]
    weights, states = {}, {}
    for sync in ("driver", "allreduce"):
        group = LearnerGroup(
            lambda: MLPModule(*spaces, seed=0), config, num_learners=2, num_cpus_per_learner=0.25, gradient_sync=sync
        )
        try:
            for episodes in batches:
                metrics = group.update_from_episodes(episodes)
            assert metrics.num_learners == 2 and metrics.num_gradient_steps == 2 * 4 and metrics.weights_version == 2
            weights[sync], states[sync] = group.get_weights(), group.get_states()
            moved = group.driver_gradient_bytes
        finally:
            group.stop()
        gradient_bytes = sum(v.nbytes for v in weights[sync].values())
        # driver: per gradient step, 2 gradients gathered and 1 mean sent; all-reduce: none
        assert moved == (3 * 2 * 2 * 4 * gradient_bytes if sync == "driver" else 0)
    first, second = (s["module"] for s in states["allreduce"])
    for k, v in weights["driver"].items():
        np.testing.assert_allclose(weights["allreduce"][k], v, rtol=1e-5, atol=1e-7, err_msg=k)
        np.testing.assert_allclose(first[k], second[k], rtol=1e-9, atol=1e-12, err_msg=k)  # one mean, both ranks


def test_all_reduce_without_torch_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import learner.learner_group as module

    real = module.importlib.util.find_spec
    monkeypatch.setattr(module.importlib.util, "find_spec", lambda name: None if name == "torch" else real(name))
    with pytest.raises(ConfigError, match=r"^'gradient_sync' 'allreduce' needs torch .*; 'driver' works without it$"):
        LearnerGroup(lambda: None, PPOConfig(), num_learners=2, gradient_sync="allreduce")
    with pytest.raises(ConfigError, match=r"^'gradient_sync' must be one of 'driver', 'allreduce'"):
        LearnerGroup(lambda: None, PPOConfig(), gradient_sync="nccl")


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("gradient_sync", ["driver", "allreduce"])
@pytest.mark.parametrize("prioritized", [False, True])
def test_learner_actors_pulling_from_a_replay_actor_equal_one_local_learner(
    prioritized: bool, gradient_sync: str
) -> None:
    batches = random_batches(5, 24)
    config = DQNConfig(target_update_every=2)
    local_replay = FixedReplay(batches)
    local = LearnerGroup(make_module, config, learner_class=DQNLearner)
    local_metrics = local.update_from_replay(local_replay, 5, 24, prioritized=prioritized)
    remote_replay = ray.remote(FixedReplay).remote(batches)
    group = LearnerGroup(
        make_module, config, learner_class=DQNLearner, num_learners=2, num_cpus_per_learner=0.25,
        gradient_sync=gradient_sync,
    )  # fmt: skip
    try:
        metrics = group.update_from_replay(remote_replay, 5, 24, prioritized=prioritized)
        assert (group.driver_gradient_bytes > 0) is (gradient_sync == "driver")
        states = group.get_states()
        for key, value in local.get_weights().items():
            if key == "epsilon":
                continue
            # lockstep: the same averaged gradient, applied in each actor's own process (see above)
            np.testing.assert_allclose(states[0]["module"][key], states[1]["module"][key], rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(states[0]["target"][key], states[1]["target"][key], rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(states[0]["module"][key], value, rtol=1e-4, atol=1e-6)
        assert metrics.num_gradient_steps == local_metrics.num_gradient_steps == 5
        assert metrics.num_learners == 2 and metrics.loss == pytest.approx(local_metrics.loss, rel=1e-4)
        pushed = ray.get(remote_replay.get_pushed.remote())
        if prioritized:
            assert sorted(pushed) == list(range(5 * 24))  # every sampled step, from both learners
            local_pushed = local_replay.get_pushed()
            assert all(pushed[k] == pytest.approx(local_pushed[k], rel=1e-4, abs=1e-6) for k in pushed)
        else:
            assert pushed == {}
    finally:
        group.stop()


@pytest.mark.usefixtures("ray_session")
class TestPlacement:
    """Learner actors share one PACK placement group; the session's Ray has 4 CPUs."""

    def test_learners_the_cluster_can_never_hold_are_refused_before_any_starts(self) -> None:
        with pytest.raises(
            InsufficientResourcesError,
            match=r"num_learners x num_cpus_per_learner = 8 x 1 CPU = 8\.0 CPU, but the cluster has 4\.0 CPU in all",
        ):
            LearnerGroup(make_module, DQNConfig(), learner_class=DQNLearner, num_learners=8, num_cpus_per_learner=1.0)

    def test_learners_that_fit_the_cluster_but_not_beside_this_process_s_runners_are_refused_at_once(self) -> None:
        """The runners' placement group holds every CPU while the driver waits: nothing would free it
        (before, the learner group waited out its whole timeout)."""
        total = idle_cpus()
        runners = EnvRunnerGroup(
            EnvRunnerConfig(env="CartPole-v1"),
            EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=total / 2),
        )
        try:
            with pytest.raises(InsufficientResourcesError) as raised:
                LearnerGroup(
                    make_module,
                    DQNConfig(),
                    learner_class=DQNLearner,
                    num_learners=1,
                    num_cpus_per_learner=1.0,
                    timeout_s=60,  # were it to wait, it would fail after 60 s with another message
                )
            assert str(raised.value) == (
                "cannot place the actors: num_env_runners x (num_cpus_per_env_runner, custom_resources_per_env_runner) "
                f"(held by this process) = 2 x {total / 2:g} CPU = {total:.1f} CPU + num_learners x "
                f"num_cpus_per_learner = 1 x 1 CPU = 1.0 CPU = {total + 1:.1f} CPU, but the cluster has {total:.1f} "
                "CPU in all (reduce the fields named, or attach to a larger cluster with --address; set "
                "RAY_SAMPLER_CLUSTER_AUTOSCALES=1 if it autoscales)"
            )
        finally:
            runners.stop()
        assert cpus_back_to(total)
        group = LearnerGroup(
            make_module, DQNConfig(), learner_class=DQNLearner, num_learners=1, num_cpus_per_learner=1.0
        )
        group.stop()  # with the runners' reservation released, the same learners fit

    def test_learners_reserve_their_cpus_an_actor_fits_beside_them_and_stop_gives_the_cpus_back(self) -> None:
        before = idle_cpus()
        group = LearnerGroup(
            make_module, DQNConfig(), learner_class=DQNLearner, num_learners=2, num_cpus_per_learner=0.5
        )
        try:
            assert ray.available_resources().get("CPU", 0.0) == before - 1.0
            beside = ray.remote(lambda: ray.get_runtime_context().get_node_id())
            node = ray.get(beside.options(num_cpus=0, **group.colocated_options()).remote(), timeout=30)
            learner_nodes = ray.get(
                [a.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()) for a in group.actors],
                timeout=30,
            )
            assert set(learner_nodes) == {node}
        finally:
            group.stop()
        assert cpus_back_to(before)

    def test_learners_that_fail_to_start_give_their_cpus_back(self) -> None:
        before = idle_cpus()
        with pytest.raises(ray.exceptions.RayActorError, match="no learner here"):
            LearnerGroup(
                make_module, DQNConfig(), learner_class=_FailingLearner, num_learners=2, num_cpus_per_learner=0.5
            )
        assert cpus_back_to(before)


class _FailingLearner(DQNLearner):
    """A learner whose actors fail to start (the local one, built first, starts)."""

    def __init__(self, module: Any, config: Any = None) -> None:
        super().__init__(module, config)
        if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
            raise RuntimeError("no learner here")
