"""EnvRunner as an actor and the EnvRunnerGroup: remote == local, deadlines, weights, scaling."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray

from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes
from ray_sampler.errors import (
    ConfigError,
    EnvCreatorError,
    EnvRunnerFailedError,
    RaySamplerError,
)
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup, SampleTimeoutError
from ray_sampler.sampling.runner_fleet import RunnerFleet
from tests.helpers import MODEL_OUTPUTS_TOL, assert_episodes_equal, stamp_creator
from tests.ray_sampler.sampling.checks import assert_steps_once_and_continuous, stamps
from tests.ray_sampler.sampling.faults import dead_replay

pytestmark = pytest.mark.usefixtures("ray_session")

GROUP = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5, sample_timeout_s=60)


def stamp_group(num_env_runners: int = 2, **kwargs: Any) -> EnvRunnerGroup:
    config = EnvRunnerConfig(
        **{"env": stamp_creator, "num_envs_per_env_runner": 2, "rollout_fragment_length": 4, **kwargs}
    )
    return EnvRunnerGroup(
        config, EnvRunnerGroupConfig(num_env_runners=num_env_runners, num_cpus_per_env_runner=0.5, sample_timeout_s=60)
    )


def test_remote_runner_equals_local_runner() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=20, seed=3)
    actor = ray.remote(EnvRunner).options(num_cpus=0.5).remote(config, worker_index=1)
    local = EnvRunner(config, worker_index=1)
    try:
        for _ in range(3):
            col, metrics = ray.get(actor.sample_columnar.remote(), timeout=60)
            assert isinstance(col, ColumnarEpisodes) and metrics.num_env_steps == 40
            for remote_ep, local_ep in zip(columnar_to_episodes(col), local.sample(), strict=True):
                # obs, actions, rewards, flags exact; the logits, values and logp the actor's MLP computed
                # within MODEL_OUTPUTS_TOL (another process: on a cluster another CPU's BLAS kernels)
                assert_episodes_equal(remote_ep, local_ep, compare_ids=False, model_outputs_tol=MODEL_OUTPUTS_TOL)
    finally:
        ray.kill(actor)


def test_group_samples_every_runner_and_steps_stay_continuous_across_scaling() -> None:
    with stamp_group(2) as group:
        chunks = group.sample()
        assert sum(len(c) for c in chunks) == 2 * 8
        group.scale(3)
        assert group.worker_indices == [1, 2, 3]
        chunks += group.sample()
        group.scale(1)
        assert group.worker_indices == [1]
        chunks += group.sample()
        group.scale(2)
        assert group.worker_indices == [1, 4]
        chunks += group.sample() + group.sample()
        workers = {stamps(c)[0][0] for c in chunks}
        assert workers == {1, 2, 3, 4}
        assert_steps_once_and_continuous(chunks)


def test_sync_weights_reaches_every_runner_with_one_version() -> None:
    with stamp_group(2) as group:
        other = MLPModule(group_obs_space(), group_act_space(), seed=99).get_state()
        version = group.sync_weights(other)
        group.scale(3)  # a new runner gets the current weights too
        states = ray.get([group.actor(i).get_state.remote() for i in group.worker_indices], timeout=60)
        for state in states:
            assert state["weights_version"] == version
            for k, v in other.items():
                np.testing.assert_array_equal(state["module"][k], v)
        group.sample()
        assert set(group.metrics.weights_versions.values()) == {version}
        assert group.metrics.max_policy_lag == 0


def group_obs_space() -> Any:
    return stamp_creator({"worker_index": 0, "vector_index": 0}).observation_space


def group_act_space() -> Any:
    return stamp_creator({"worker_index": 0, "vector_index": 0}).action_space


def test_slow_runner_does_not_block_the_others_and_its_result_comes_later() -> None:
    with stamp_group(2, env_config={"slow_worker": 2, "sleep_s": 0.1}, rollout_fragment_length=10) as group:
        first = group.sample(timeout_s=1.0)  # runner 2 needs >= 2 s (20 steps x 0.1 s)
        assert {stamps(c)[0][0] for c in first} == {1}
        assert group.metrics.late_runners == [2]
        second = group.sample(timeout_s=60)
        assert 2 in {stamps(c)[0][0] for c in second}
        assert_steps_once_and_continuous(first + second)
        assert sum(len(c) for c in first + second) == 3 * 20  # runner 1 twice, runner 2 once


def test_the_first_answer_can_be_taken_and_weights_sent_without_waiting() -> None:
    """What the asynchronous loop does: take the first fragment that comes (``min_answers=1``), and
    send new weights without waiting for a runner busy sampling (``wait=False``): it finishes its
    fragment with the weights it had and takes the new ones before its next."""
    with stamp_group(2, env_config={"slow_worker": 2, "sleep_s": 0.05}, rollout_fragment_length=10) as group:
        before = group.weights_version
        first = group.sample(min_answers=1)  # runner 2 needs >= 1 s (20 steps x 0.05 s)
        assert {stamps(c)[0][0] for c in first} == {1} and group.in_flight == [2]
        version = group.sync_weights(MLPModule(group_obs_space(), group_act_space(), seed=5).get_state(), wait=False)
        assert version == before + 1 and group.in_flight == [2]  # runner 2 is still sampling
        answers = group.sample_columnar(timeout_s=60)
        later = [ep for col, _ in answers for ep in columnar_to_episodes(col)]
        assert group.metrics.weights_versions == {1: version, 2: before}
        assert group.metrics.runner_sampling_s == sum(metrics.duration_s for _, metrics in answers) > 0
        assert_steps_once_and_continuous(first + later)
        assert group.sample(timeout_s=60) and set(group.metrics.weights_versions.values()) == {version}


def test_chunks_by_reference_stay_in_the_object_store_and_a_dead_runners_episodes_count_abandoned() -> None:
    """``chunks_by_ref``: each runner puts its chunks in the object store and answers with the
    reference (what the asynchronous loop hands to its learner actor); the steps are those of a
    plain call, continuous, and a runner killed afterwards still has its running episodes counted
    abandoned (the runner reports them, as the driver never reads its chunks)."""
    with stamp_group(2) as group:
        answers = group.sample_columnar(chunks_by_ref=True) + group.sample_columnar(chunks_by_ref=True)
        assert all(isinstance(col, ray.ObjectRef) for col, _ in answers)
        cols = [ray.get(col) for col, _ in answers]
        assert [c.num_env_steps for c in cols] == [m.num_env_steps for _, m in answers] == [8] * 4
        assert_steps_once_and_continuous([ep for c in cols for ep in columnar_to_episodes(c)])
        ray.kill(group.actor(1))
        group.sample_columnar(chunks_by_ref=True)
        assert group.metrics.num_env_runner_restarts == 1
        assert group.metrics.num_episodes_abandoned == 2  # runner 1's two sub-envs' episodes in progress


def test_deadline_with_no_answer_raises_and_keeps_requests() -> None:
    with stamp_group(1, env_config={"slow_worker": 1, "sleep_s": 0.05}, rollout_fragment_length=10) as group:
        with pytest.raises(SampleTimeoutError, match=r"no env runner answered within the deadline \(runners \[1\]"):
            group.sample(timeout_s=0.2)
        chunks = group.sample(timeout_s=60)  # the earlier request's result, not a new one
        assert sum(len(c) for c in chunks) == 20


def test_bad_creator_fails_before_any_actor_starts() -> None:
    before = len(ray.util.list_named_actors())
    with pytest.raises(EnvCreatorError, match=r"must return a gymnasium\.Env"):
        EnvRunnerGroup(EnvRunnerConfig(env=lambda ctx: None), GROUP)
    assert len(ray.util.list_named_actors()) == before


def test_sub_envs_too_many_for_the_node_are_refused_having_built_one() -> None:
    """The driver's check takes the env's spaces from one sub-env (a runner's 65,536 took long) and
    refuses a request whose memory no node can hold, before any runner starts."""
    built = []

    def counting_creator(ctx: dict) -> gym.Env:
        built.append(ctx["vector_index"])
        if len(built) > 10:
            raise AssertionError("the driver's check builds every sub-env")
        return gym.make("CartPole-v1")

    before = len(ray.util.list_named_actors())
    # 65,536 x (3,000 + 50 x 100,002) bytes: at least 328 GB a runner, beyond any machine this suite runs on.
    config = EnvRunnerConfig(env=counting_creator, num_envs_per_env_runner=65_536, rollout_fragment_length=10**5)
    with pytest.raises(
        ConfigError, match=r"^'num_envs_per_env_runner' must be an int <= [\d,]+ for this env \(got 65,536\)"
    ):
        EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=1, check_env=False))
    assert built == [0]
    assert len(ray.util.list_named_actors()) == before


def test_a_million_sub_envs_per_runner_are_refused_by_the_config() -> None:
    with pytest.raises(ConfigError, match=r"'num_envs_per_env_runner' must be an int <= 65,536 .*\(got 1,000,000\)"):
        EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=1_000_000)


def test_registered_name_works_in_actors() -> None:
    from ray_sampler.sampling.env_creator import register_env

    register_env("stamp-in-actors", stamp_creator)
    with EnvRunnerGroup(EnvRunnerConfig(env="stamp-in-actors", rollout_fragment_length=3), GROUP) as group:
        assert {stamps(c)[0][0] for c in group.sample()} == {1, 2}


def test_runners_are_named_actors_and_stop_kills_them() -> None:
    group = stamp_group(2)
    names = [n["name"] if isinstance(n, dict) else n for n in ray.util.list_named_actors()]
    assert (
        sum(name.endswith(("-env-runner-1", "-env-runner-2")) and name.startswith(group.name_prefix) for name in names)
        == 2
    )
    group.stop()
    assert group.num_env_runners == 0
    with pytest.raises(RaySamplerError, match="has no env runners"):
        group.sample()


def test_runner_failure_names_the_runner() -> None:
    def creator(ctx: Any) -> Any:
        env = stamp_creator(ctx)
        if ctx["worker_index"] == 2:
            env.step = lambda action: 1 / 0  # type: ignore[method-assign]
        return env

    with (
        EnvRunnerGroup(
            EnvRunnerConfig(env=creator),
            EnvRunnerGroupConfig(
                num_env_runners=2,
                num_cpus_per_env_runner=0.5,
                validate_env_locally=False,
                restart_failed_env_runners=False,
            ),
        ) as group,
        pytest.raises(EnvRunnerFailedError, match=r"env runner 2 failed: .*division by zero.*; restarts are disabled"),
    ):
        group.sample()


def test_keep_sampling_keeps_a_request_in_flight_and_every_step_once() -> None:
    config = EnvRunnerConfig(env=stamp_creator, num_envs_per_env_runner=2, rollout_fragment_length=4)
    group_config = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5, keep_sampling=True)
    with EnvRunnerGroup(config, group_config) as group:
        chunks = []
        for _ in range(4):
            out = group.sample()
            assert sum(len(c) for c in out) == 16
            assert group.in_flight == [1, 2]  # each runner already samples its next batch
            chunks += out
        group.sync_weights(MLPModule(group_obs_space(), group_act_space(), seed=5).get_state())
        chunks += group.sample() + group.sample()
        assert group.metrics.max_policy_lag <= 1
        assert_steps_once_and_continuous(chunks)


def test_two_requests_in_flight_keep_a_runner_busy_and_every_step_comes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_requests_in_flight_per_env_runner=2``: a runner's next request waits in its actor behind
    the one it samples; each request sent is answered once, in order, also when a scale-down
    settles them and when the last are collected."""
    sent: Counter[int] = Counter()
    call = RunnerFleet.call
    monkeypatch.setattr(RunnerFleet, "call", lambda fleet, index, *a: (sent.update([index]), call(fleet, index, *a))[1])
    config = EnvRunnerConfig(env=stamp_creator, num_envs_per_env_runner=2, rollout_fragment_length=4)
    group_config = EnvRunnerGroupConfig(
        num_env_runners=2, num_cpus_per_env_runner=0.5, keep_sampling=True, max_requests_in_flight_per_env_runner=2
    )
    with EnvRunnerGroup(config, group_config) as group:
        answers = []
        for _ in range(3):
            answers += group.sample_columnar(min_answers=1)
            assert group.in_flight == [1, 2]
        group.sync_weights(MLPModule(group_obs_space(), group_act_space(), seed=5).get_state(), wait=False)
        answers += group.sample_columnar() + group.sample_columnar()
        assert group.metrics.max_policy_lag <= 2  # behind the two requests queued before the weights
        group.scale(1)  # runner 2's two requests are settled, and come with the next call
        answers += group.sample_columnar() + group.collect_in_flight()
        assert group.in_flight == []
        by_runner = Counter(metrics.worker_index for _, metrics in answers)
        assert by_runner == sent and sent[1] >= 5 and group.metrics.num_env_steps_lost == 0
        assert all(metrics.num_env_steps == 8 for _, metrics in answers)
        chunks = [ep for col, _ in answers for ep in columnar_to_episodes(col)]
        assert sum(len(c) for c in chunks) == 8 * sum(by_runner.values())
        assert_steps_once_and_continuous(chunks)


def test_more_than_one_request_in_flight_needs_keep_sampling() -> None:
    with pytest.raises(ConfigError, match=r"^'max_requests_in_flight_per_env_runner' > 1 needs 'keep_sampling'"):
        EnvRunnerGroupConfig(max_requests_in_flight_per_env_runner=2)


def test_scale_down_waits_with_a_deadline_and_stops_nothing_on_timeout() -> None:
    config = EnvRunnerConfig(
        env=stamp_creator, env_config={"slow_worker": 2, "sleep_s": 0.1}, rollout_fragment_length=20
    )
    group_config = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5, sample_timeout_s=0.5)
    with EnvRunnerGroup(config, group_config) as group:
        first = group.sample()  # runner 2 is late (>= 2 s); its request stays in flight
        assert group.metrics.late_runners == [2]
        with pytest.raises(SampleTimeoutError, match=r"env runners \[2\] are still sampling"):
            group.scale(1)
        assert group.worker_indices == [1, 2]
        import time

        time.sleep(2.5)
        group.scale(1)  # now runner 2's result is collected before it stops
        rest = group.sample()
        assert_steps_once_and_continuous(first + rest)
        assert sum(len(c) for c in first + rest) == 3 * 20


def test_complete_mode_scale_down_drops_running_episodes_and_counts_them() -> None:
    with stamp_group(2, batch_mode="complete_episodes") as group:
        group.sample()
        group.scale(1)
        after = group.sample()
        assert all(ep.is_done and ep.t_started == 0 for ep in after)
        assert group.metrics.num_episodes_dropped_by_scale >= 1


def test_keep_sampling_reports_arguments_and_never_repeats_a_reset() -> None:
    config = EnvRunnerConfig(env=stamp_creator, rollout_fragment_length=3)
    group_config = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5, keep_sampling=True)
    with EnvRunnerGroup(config, group_config) as group:
        group.sample_columnar()
        group.sample_columnar(force_reset=True)  # collects the prefetch made with the first call's arguments
        ((_, metrics),) = group.sample_columnar()
        assert metrics.request is not None and metrics.request.force_reset is False


def test_registered_name_wins_over_a_gymnasium_id_in_actors() -> None:
    from ray_sampler.sampling.env_creator import register_env

    register_env("CartPole-v1", stamp_creator)
    try:
        with EnvRunnerGroup(EnvRunnerConfig(env="CartPole-v1", rollout_fragment_length=2), GROUP) as group:
            assert {stamps(c)[0][0] for c in group.sample()} == {1, 2}
    finally:
        from ray_sampler.sampling.env_creator import unregister_env

        unregister_env("CartPole-v1")


@pytest.mark.parametrize("bad", [True, -1, 1.5, "2"], ids=repr)
def test_scale_refuses_a_bad_runner_count_and_keeps_the_runners(bad: object) -> None:
    with EnvRunnerGroup(EnvRunnerConfig(env="CartPole-v1", rollout_fragment_length=2), GROUP) as group:
        with pytest.raises(ConfigError, match=re.escape(f"'num_env_runners' must be an int >= 0 (got {bad!r})")):
            group.scale(bad)  # type: ignore[arg-type]
        assert group.num_env_runners == 2


def test_scale_down_ships_the_chunks_a_runner_held_for_a_dead_replay_with_the_next_sample() -> None:
    with stamp_group(2) as group:
        answers = group.sample_to_replay(dead_replay())
        assert {m.worker_index: m.num_env_steps_held_for_replay for m in answers} == {1: 8, 2: 8}
        group.scale(1)
        chunks = group.sample()
        assert sorted(stamps(c) for c in chunks if stamps(c)[0][0] == 2) == [
            [(2, 0, 0, 0), (2, 0, 0, 1), (2, 0, 0, 2)],
            [(2, 0, 1, 0), (2, 0, 1, 1), (2, 0, 1, 2)],
            [(2, 1, 0, 0), (2, 1, 0, 1), (2, 1, 0, 2), (2, 1, 0, 3)],
            [(2, 1, 1, 0), (2, 1, 1, 1)],
        ]
        assert group.metrics.num_env_steps_lost == 0
