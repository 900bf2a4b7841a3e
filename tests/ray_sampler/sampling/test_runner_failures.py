"""Runner failures: a runner killed (``ray.kill``, SIGKILL) or raising is replaced under its worker
index, sampling goes on, and what died with it is counted; past the limits the error names it."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import numpy as np
import pytest
import ray
from ray.core.generated.common_pb2 import ActorDiedErrorContext

from connectors.common import MeanStdFilter
from ray_sampler.data.columnar import columnar_to_episodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EnvRunnerFailedError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.runner_failures import describe_failure
from replay.actor import ReplayConfig, create_replay_actor
from tests.helpers import StampEnv, kill_and_wait, stamp_creator
from tests.ray_sampler.sampling.checks import assert_steps_once_and_continuous, join, stamps
from tests.ray_sampler.sampling.faults import FaultPlan, dead_replay, faulty_creator

pytestmark = pytest.mark.usefixtures("ray_session")

ROLLOUT, NUM_ENVS = 20, 2
STEPS_PER_REQUEST = ROLLOUT * NUM_ENVS
PROCESS_STRIDE = 1_000  # episode stamps of one runner process start at (pid % 10_000) * 1_000


def process_stamp_creator(ctx: Any) -> StampEnv:
    """StampEnv numbering its episodes from a per-process offset (every sub-env sleeps ``sleep_s``
    per step), so a replacement's steps never repeat its predecessor's stamps."""
    env = stamp_creator(ctx)
    env.sleep_s = ctx.get("sleep_s", 0.0)
    env.episode = (os.getpid() % 10_000) * PROCESS_STRIDE - 1
    return env


def group_of(
    num_env_runners: int = 4, *, batch_mode: str = "truncate_episodes", connectors: tuple = (), **group: Any
) -> EnvRunnerGroup:
    config = EnvRunnerConfig(
        env_to_module_connectors=connectors,
        env=process_stamp_creator,
        env_config={"sleep_s": 0.01},  # a request takes >= 0.4 s: a kill lands while it runs
        num_envs_per_env_runner=NUM_ENVS,
        rollout_fragment_length=ROLLOUT,
        batch_mode=batch_mode,
    )
    group_config = EnvRunnerGroupConfig(
        **{
            "num_env_runners": num_env_runners,
            "num_cpus_per_env_runner": 0.25,
            "sample_timeout_s": 60,
            "delay_between_env_runner_restarts_s": 0.0,
            **group,
        }
    )
    return EnvRunnerGroup(config, group_config)


def kill(actor: Any, how: str, pid: int | None = None) -> None:
    if how == "ray_kill":
        ray.kill(actor)
    else:
        assert pid is not None
        os.kill(pid, signal.SIGKILL)


def pid_ref(actor: Any) -> Any:
    """The actor's process id (answered once its current call is done)."""
    return actor.__ray_call__.remote(lambda self: os.getpid())


def by_process(chunks: list[SingleAgentEpisode]) -> dict[tuple[int, int], list[SingleAgentEpisode]]:
    """Chunks keyed by (worker index, runner process) as stamped, in delivery order."""
    out: dict[tuple[int, int], list[SingleAgentEpisode]] = {}
    for c in chunks:
        worker, _, episode, _ = stamps(c)[0]
        out.setdefault((worker, episode // PROCESS_STRIDE), []).append(c)
    return out


def dead_processes(chunks: list[SingleAgentEpisode]) -> set[tuple[int, int]]:
    """Every (worker, process) but the last one to deliver for each worker."""
    last = {}
    for c in chunks:
        worker, _, episode, _ = stamps(c)[0]
        last[worker] = (worker, episode // PROCESS_STRIDE)
    return set(by_process(chunks)) - set(last.values())


# Both ways to kill, two workers dying and a replacement killed (the last); ``SHORT_KILLS`` keeps
# both ways and the killed replacement on one worker, for the combination the full list does not
# run. Truncate mode with keep_sampling:
# test_a_runner_killed_with_two_requests_in_flight_counts_what_it_had_not_answered
KILLS = [(1, "ray_kill"), (2, "sigkill"), (1, "sigkill")]
SHORT_KILLS = [(1, "ray_kill"), (1, "sigkill")]


@pytest.mark.parametrize(
    ("batch_mode", "keep_sampling", "num_env_runners", "kills"),
    [
        ("truncate_episodes", False, 3, KILLS),
        ("complete_episodes", True, 3, KILLS),
        ("complete_episodes", False, 2, SHORT_KILLS),
    ],
    ids=["truncate-one_call_at_a_time", "complete-keep_sampling", "complete-one_call_at_a_time"],
)
def test_killed_runners_are_replaced_and_sampling_goes_on(
    batch_mode: str, keep_sampling: bool, num_env_runners: int, kills: list[tuple[int, str]]
) -> None:
    workers = list(range(1, num_env_runners + 1))
    with group_of(num_env_runners, batch_mode=batch_mode, keep_sampling=keep_sampling) as group:
        chunks = group.sample()
        for index, how in kills:
            actor = group.actor(index)
            if keep_sampling:
                # Every runner has its next request in flight between calls: kill it there.
                ref = pid_ref(actor)  # runs between the request collected next and the one sent after it
                chunks += group.sample()
                pid = ray.get(ref, timeout=60)
                kill(actor, how, pid)
            else:
                # Kill it during the call, while its request runs.
                pid = ray.get(pid_ref(actor), timeout=60)
                timer = threading.Timer(0.15, kill, (actor, how, pid))
                timer.start()
                chunks += group.sample()
                timer.join()
            chunks += group.sample()
            assert group.worker_indices == workers
        chunks += group.sample()
        metrics = group.metrics
        assert metrics.num_env_runner_restarts == len(kills)
        assert metrics.num_healthy_env_runners == num_env_runners and group.num_env_runners == num_env_runners
        assert metrics.num_env_steps_lost == len(kills) * STEPS_PER_REQUEST
        assert sorted(metrics.weights_versions) == workers  # every runner answered the last call
        assert_steps_once_and_continuous(chunks)
        dead = dead_processes(chunks)
        assert len(dead) == len(kills)
        # No chunk continues an episode of a dead runner: their ids are nowhere else.
        processes = by_process(chunks)
        for key in dead:
            others = {c.id_ for k, cs in processes.items() if k != key for c in cs}
            assert not others & {c.id_ for c in processes[key]}
        abandoned = sum(not ep.is_done for key in dead for ep in join(processes[key]).values())
        assert metrics.num_episodes_abandoned == abandoned
        if batch_mode == "complete_episodes":
            assert abandoned == 0 and all(c.is_done and c.t_started == 0 for c in chunks)
        else:
            assert abandoned > 0


def test_a_runner_killed_with_two_requests_in_flight_counts_what_it_had_not_answered() -> None:
    """With ``max_requests_in_flight_per_env_runner=2`` runner 2 holds three requests over the first
    call: the first, answered; the second, running when it is killed (0.4 s of sleeps); the third,
    queued behind. What it had not answered is counted lost, whole requests, and what it had answered
    is delivered; the replacement samples on."""
    with group_of(2, keep_sampling=True, max_requests_in_flight_per_env_runner=2) as group:
        chunks = group.sample()
        ray.kill(group.actor(2))
        for _ in range(2):
            chunks += group.sample()
        metrics = group.metrics
        assert metrics.num_env_runner_restarts == 1 and group.worker_indices == [1, 2]
        (dead,) = dead_processes(chunks)
        answered = sum(len(c) for c in by_process(chunks)[dead]) // STEPS_PER_REQUEST
        assert answered in (1, 2)  # the second, if it finished before the kill landed
        assert metrics.num_env_steps_lost == (3 - answered) * STEPS_PER_REQUEST
        assert_steps_once_and_continuous(chunks)


def test_replacement_takes_the_current_weights_and_connector_states_before_sampling() -> None:
    with group_of(2, connectors=(MeanStdFilter(),)) as group:
        group.sample()
        space = StampEnv().observation_space, StampEnv().action_space
        weights = MLPModule(*space, seed=99).get_state()
        version = group.sync_weights(weights, connector_states=True)
        merged = group.merged_connector_states
        assert merged is not None
        (name,) = merged
        assert merged[name]["global"]["count"] == 2 * STEPS_PER_REQUEST  # every obs acted on
        kill_and_wait(group.actor(2))
        group.sample()
        assert group.metrics.num_env_runner_restarts == 1
        assert group.metrics.weights_versions == {1: version, 2: version}
        state = ray.get(group.actor(2).get_state.remote(), timeout=60)
        # It started from the merged moments: its global part is theirs (what it saw since is local).
        for key, value in merged[name]["global"].items():
            np.testing.assert_array_equal(state["env_to_module"][name]["global"][key], value)
        for k, v in weights.items():
            np.testing.assert_array_equal(state["module"][k], v)


def test_a_restart_is_logged_in_one_line_and_sync_weights_replaces_a_dead_runner_instead_of_raising() -> None:
    with group_of(2) as group:
        group.sample()
        kill_and_wait(group.actor(2))
        group.sample()
        (line,) = group.metrics.runner_failures
        assert line.startswith("runner 2 died (ActorDiedError: ") and line.endswith("; restarted (restart 1 of 1000)")
        group.sample()
        assert group.metrics.runner_failures == []
        lost = group.metrics.num_env_steps_lost
        kill_and_wait(group.actor(1))  # found dead by the weights' broadcast, not by a sample
        version = group.sync_weights(MLPModule(StampEnv().observation_space, StampEnv().action_space).get_state())
        group.sample()
        assert group.metrics.weights_versions == {1: version, 2: version}
        (line,) = group.metrics.runner_failures
        assert line.startswith("runner 1 died (") and line.endswith("; restarted (restart 2 of 1000)")
        assert group.metrics.num_env_runner_restarts == 2 and group.metrics.num_env_steps_lost == lost  # none in flight


def test_restarts_disabled_fail_fast_naming_the_runner_and_cause() -> None:
    with group_of(2, restart_failed_env_runners=False) as group:
        group.sample()
        kill_and_wait(group.actor(2))
        with pytest.raises(
            EnvRunnerFailedError,
            match=r"^env runner 2 failed: ActorDiedError: .*; "
            r"restarts are disabled \(restart_failed_env_runners=False\)$",
        ):
            group.sample()


def test_a_death_is_described_by_its_reason_not_by_rays_first_line() -> None:
    context = ActorDiedErrorContext(
        error_message="The actor died because its node has died. Node Id: ab12\n\tthe actor's node was terminated",
        actor_id=b"\x01" * 16,
        class_name="EnvRunner",
        pid=7,
    )
    assert describe_failure(ray.exceptions.ActorDiedError(context)) == (
        "died",
        "ActorDiedError: The actor died because its node has died. Node Id: ab12",
    )
    assert describe_failure(ray.exceptions.ActorDiedError()) == (
        "died",
        "ActorDiedError: The actor died unexpectedly before finishing this task.",
    )


def test_restarts_used_up_raise_naming_each_failed_runner() -> None:
    with group_of(2, max_num_env_runner_restarts=1) as group:
        group.sample()
        kill_and_wait(group.actor(1))
        group.sample()
        assert group.metrics.num_env_runner_restarts == 1
        kill_and_wait(group.actor(2))
        with pytest.raises(
            EnvRunnerFailedError,
            match=r"^env runner 1 failed: ActorDiedError: .*; env runner 2 failed: ActorDiedError: .*; "
            r"the 1 restarts allowed \(max_num_env_runner_restarts\) are used up$",
        ):
            group.sample()


def test_a_runner_that_keeps_raising_uses_up_its_restarts() -> None:
    def creator(ctx: Any) -> Any:
        env = stamp_creator(ctx)
        if ctx["worker_index"] == 2:
            env.step = lambda action: 1 / 0  # type: ignore[method-assign]
        return env

    config = EnvRunnerConfig(env=creator, rollout_fragment_length=3)
    group_config = EnvRunnerGroupConfig(
        num_env_runners=2,
        num_cpus_per_env_runner=0.25,
        validate_env_locally=False,
        max_num_env_runner_restarts=2,
        delay_between_env_runner_restarts_s=0.0,
    )
    with (
        EnvRunnerGroup(config, group_config) as group,
        pytest.raises(EnvRunnerFailedError, match=r"^env runner 2 failed: .*division by zero.*; the 2 restarts"),
    ):
        group.sample()


def test_replacement_gets_a_fresh_seed_and_does_not_replay_its_predecessor() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=5, seed=0)
    group_config = EnvRunnerGroupConfig(
        num_env_runners=1, num_cpus_per_env_runner=0.25, delay_between_env_runner_restarts_s=0.0
    )
    with EnvRunnerGroup(config, group_config) as group:
        first = group.sample()
        kill_and_wait(group.actor(1))
        replayed = group.sample()
        assert group.metrics.num_env_runner_restarts == 1
        # Same worker index, but its sub-envs do not start where its predecessor's did.
        before = {tuple(np.asarray(c.get_observations(0)).tolist()) for c in first if c.t_started == 0}
        after = {tuple(np.asarray(c.get_observations(0)).tolist()) for c in replayed if c.t_started == 0}
        assert len(before) == 2 and len(after) == 2 and not before & after


def test_steps_a_dead_runner_held_for_a_dead_replay_count_as_lost() -> None:
    config = EnvRunnerConfig(env=stamp_creator, num_envs_per_env_runner=2, rollout_fragment_length=4)
    group_config = EnvRunnerGroupConfig(
        num_env_runners=1, num_cpus_per_env_runner=0.25, delay_between_env_runner_restarts_s=0.0
    )
    with EnvRunnerGroup(config, group_config) as group:
        (answer,) = group.sample_to_replay(dead_replay())
        assert answer.num_env_steps_held_for_replay == 8
        kill_and_wait(group.actor(1))
        group.sample()
        assert group.metrics.num_env_runner_restarts == 1
        assert group.metrics.num_env_steps_lost == 8 + 8  # the request that died and the held chunks


def test_episodes_a_sub_env_failure_ended_are_not_abandoned_again_when_the_runner_dies() -> None:
    # Sub-env 0's first episode (2 steps) ships its first step, then its second step raises: the
    # episode ends there (dropped); the rebuilt sub-env's episode (8 steps) is the one running.
    config = EnvRunnerConfig(
        env=faulty_creator,
        env_config={"plan": FaultPlan(steps={(0, 2)})},
        num_envs_per_env_runner=1,
        rollout_fragment_length=1,
        restart_failed_sub_environments=True,
    )
    group_config = EnvRunnerGroupConfig(
        num_env_runners=1, num_cpus_per_env_runner=0.25, delay_between_env_runner_restarts_s=0.0
    )
    with EnvRunnerGroup(config, group_config) as group:
        group.sample()
        ((_, metrics),) = group.sample_columnar()
        assert metrics.num_episodes_dropped_env_error == 1
        kill_and_wait(group.actor(1))
        group.sample()
        assert group.metrics.num_env_runner_restarts == 1
        assert group.metrics.num_episodes_abandoned == 1


def test_episodes_running_on_a_runner_that_dies_while_sampling_to_a_replay_count_as_abandoned() -> None:
    config = EnvRunnerConfig(env=stamp_creator, num_envs_per_env_runner=NUM_ENVS, rollout_fragment_length=4)
    group_config = EnvRunnerGroupConfig(
        num_env_runners=2, num_cpus_per_env_runner=0.25, delay_between_env_runner_restarts_s=0.0
    )
    replay = create_replay_actor(ReplayConfig(capacity_env_steps=10_000), num_cpus=0)
    try:
        with EnvRunnerGroup(config, group_config) as group:
            for _ in range(3):  # episodes of 2..8 steps: some end on the way, each sub-env has one running
                group.sample_to_replay(replay)
            stored = columnar_to_episodes(ray.get(replay.get_state.remote(), timeout=60).episodes)
            running = [ep.id_ for ep in stored if ep.get_observations(0)[0] == 2 and not ep.is_done]
            assert len(running) == NUM_ENVS
            kill_and_wait(group.actor(2))
            group.sample_to_replay(replay)
            assert group.metrics.num_env_runner_restarts == 1
            assert group.metrics.num_episodes_abandoned == NUM_ENVS
    finally:
        ray.kill(replay)
