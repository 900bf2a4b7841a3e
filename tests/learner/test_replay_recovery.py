"""SupervisedReplay: a killed replay actor comes back from its checkpoint, the acknowledged steps
lost since are counted exactly, and the runners' held and continuation chunks are accepted."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import numpy as np
import pytest
import ray

from learner.replay_recovery import SupervisedReplay
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from replay.actor import ReplayConfig
from tests.helpers import kill_and_wait, stamp_creator
from tests.replay.test_storage import episode

pytestmark = pytest.mark.usefixtures("ray_session")

RUNNER = EnvRunnerConfig(env=stamp_creator, num_envs_per_env_runner=2, rollout_fragment_length=4, seed=0)
GROUP = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
STEPS_PER_CALL = 2 * 2 * 4  # runners x sub-envs x fragment


def supervised(path: Path) -> SupervisedReplay:
    return SupervisedReplay(ReplayConfig(checkpoint_path=str(path)), timeout_s=30, num_cpus=0)


def temp_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def kill(replay: SupervisedReplay) -> None:
    kill_and_wait(replay.actor)


def assert_stamps_continuous(replay: SupervisedReplay) -> None:
    """Every stored episode piece holds consecutive steps of one sub-env episode."""
    from replay.buffer import EpisodeReplayBuffer

    buffer = EpisodeReplayBuffer(capacity_env_steps=10)
    buffer.set_state(replay.call("get_state"))
    for id_ in buffer.storage.episodes:
        stamps = buffer.storage.episodes_columnar([id_]).data.observations.tolist()
        assert [s[3] for s in stamps] == list(range(stamps[0][3], stamps[0][3] + len(stamps)))
        assert all(s[:3] == stamps[0][:3] for s in stamps)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_replay_killed_at_a_random_point_comes_back_and_counts_the_loss_exactly(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    path = tmp_path / "replay.parquet"
    replay = supervised(path)
    try:
        with EnvRunnerGroup(RUNNER, GROUP) as runners:
            for _ in range(int(rng.integers(1, 3))):
                replay.sample_to_replay(runners)
            replay.call("save")
            checkpointed = replay.metrics.num_env_steps_acknowledged
            for _ in range(int(rng.integers(0, 3))):
                replay.sample_to_replay(runners)
            acked_after_checkpoint = replay.metrics.num_env_steps_acknowledged - checkpointed
            kill(replay)
            answers = replay.sample_to_replay(runners)  # the runners hold what the dead actor did not take
            assert sum(m.num_env_steps_held_for_replay for m in answers) == STEPS_PER_CALL
            assert replay.metrics.num_replay_restarts == 1
            assert replay.metrics.num_env_steps_lost == acked_after_checkpoint
            (line,) = replay.take_recoveries()
            assert re.fullmatch(
                rf"replay actor died \(a runner could not add its chunks\); restored from {re.escape(str(path))} "
                rf"\(restart 1\), {acked_after_checkpoint} acknowledged env steps lost",
                line,
            )
            answers = replay.sample_to_replay(runners)  # held chunks first, then the continuations
            assert sum(m.num_env_steps_held_for_replay for m in answers) == 0
            assert sum(m.replay.num_env_steps_received for m in answers) == 2 * STEPS_PER_CALL
            assert runners.metrics.num_env_runner_restarts == 0
        metrics = replay.call("get_metrics")
        assert metrics.restored_from == str(path)
        # The checkpoint, the held chunks and the continuations: everything acknowledged but what was lost.
        assert metrics.num_env_steps_received == checkpointed + 2 * STEPS_PER_CALL
        assert metrics.num_env_steps == metrics.num_env_steps_received
        assert_stamps_continuous(replay)
        assert temp_files(path) == []
    finally:
        replay.stop()


def test_a_replay_killed_mid_save_comes_back_from_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "replay.parquet"
    replay = supervised(path)
    try:
        replay.add([episode("small", 10)])
        replay.call("save")
        big = [episode(f"big-{i}", 20_000).to_numpy() for i in range(20)]  # arrays: quick to send to the actor
        replay.add(big)
        save = replay.actor.save.remote()
        deadline = time.monotonic() + 30
        while not temp_files(path) and time.monotonic() < deadline:
            time.sleep(0.001)
        ray.kill(replay.actor)
        assert temp_files(path), "the save ended before the kill: make the data larger"
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(save, timeout=30)
        metrics = replay.call("get_metrics")  # finds the actor dead and restores it
        assert replay.metrics.num_replay_restarts == 1
        assert replay.metrics.num_env_steps_lost == 20 * 20_000
        assert metrics.num_env_steps == 10
        assert temp_files(path) == []
        ack = replay.add([episode("small", 5, start=10)])  # the continuation of a restored episode
        assert ack.num_env_steps == 5
        # What the restored actor received since counts as kept, not lost.
        assert replay.call("num_env_steps_lost", replay.metrics.num_env_steps_acknowledged) == 20 * 20_000
    finally:
        replay.stop()


def test_the_acks_of_requests_in_flight_when_the_replay_died_count_as_lost(tmp_path: Path) -> None:
    replay = supervised(tmp_path / "replay.parquet")  # never saved: every acknowledged step is lost
    group = dataclasses.replace(GROUP, keep_sampling=True)
    try:
        with EnvRunnerGroup(RUNNER, group) as runners:
            first = replay.sample_to_replay(runners)  # each runner gets its next request at once
            assert sum(m.replay.num_env_steps_received for m in first) == STEPS_PER_CALL
            deadline = time.monotonic() + 30
            while replay.call("get_metrics").num_env_steps_received < 2 * STEPS_PER_CALL:
                assert time.monotonic() < deadline, "the requests in flight did not reach the replay"
                time.sleep(0.01)
            time.sleep(1.0)  # their acks reach the runners
            kill(replay)
            assert replay.call("get_metrics").num_env_steps == 0  # finds it dead: restores it (empty)
            assert replay.metrics.num_replay_restarts == 1
            assert replay.metrics.num_env_steps_acknowledged == 2 * STEPS_PER_CALL
            assert replay.metrics.num_env_steps_lost == 2 * STEPS_PER_CALL
            answers = replay.sample_to_replay(runners)  # those collected during the restart come first
            assert len(answers) == 4
            assert [m.replay.num_env_steps_received for m in answers] == [STEPS_PER_CALL // 2] * 4
            assert replay.metrics.num_env_steps_acknowledged == 3 * STEPS_PER_CALL
    finally:
        replay.stop()


def test_a_second_driver_run_with_the_same_seed_adds_its_steps(tmp_path: Path) -> None:
    path = tmp_path / "replay.parquet"
    stored = []
    for _ in range(2):
        replay = supervised(path)
        try:
            with EnvRunnerGroup(RUNNER, GROUP) as runners:
                answers = replay.sample_to_replay(runners)
            assert sum(m.replay.num_env_steps for m in answers) == STEPS_PER_CALL
            replay.call("save")
            stored.append(replay.call("get_metrics").num_env_steps)
        finally:
            replay.stop()
    assert stored == [STEPS_PER_CALL, 2 * STEPS_PER_CALL]


def test_a_replay_found_dead_by_the_learners_is_restored_and_the_updates_are_owed(tmp_path: Path) -> None:
    import gymnasium as gym

    from learner.dqn import DQNConfig, DQNLearner, QModule
    from learner.learner_group import LearnerGroup

    path = tmp_path / "replay.parquet"
    replay = supervised(path)
    learners = LearnerGroup(
        lambda: QModule(gym.spaces.Box(-np.inf, np.inf, (1,)), gym.spaces.Discrete(2), seed=0),
        DQNConfig(),
        learner_class=DQNLearner,
    )
    try:
        replay.add([episode("a", 50)])
        replay.call("save")
        assert replay.update_from_replay(learners, 2, 8) is not None
        kill(replay)
        assert replay.update_from_replay(learners, 2, 8) is None
        assert (replay.metrics.num_replay_restarts, replay.metrics.num_env_steps_lost) == (1, 0)
        assert replay.update_from_replay(learners, 2, 8) is not None
    finally:
        replay.stop()


def test_each_restart_counts_only_its_own_loss(tmp_path: Path) -> None:
    path = tmp_path / "replay.parquet"
    replay = supervised(path)
    try:
        with EnvRunnerGroup(RUNNER, GROUP) as runners:
            expected_losses = []
            for _ in range(2):  # each round: a checkpoint, one call more, then the actor dies
                replay.sample_to_replay(runners)
                replay.call("save")
                checkpointed = replay.metrics.num_env_steps_acknowledged
                replay.sample_to_replay(runners)
                expected_losses.append(replay.metrics.num_env_steps_acknowledged - checkpointed)
                kill(replay)
                replay.sample_to_replay(runners)  # finds it dead, restores it
                replay.sample_to_replay(runners)  # the held chunks and the continuations go in
            assert expected_losses == [STEPS_PER_CALL, STEPS_PER_CALL]
            assert replay.metrics.num_replay_restarts == 2
            assert replay.metrics.num_env_steps_lost == sum(expected_losses)
            lines = replay.take_recoveries()
            assert [int(re.search(r"(\d+) acknowledged env steps lost", line).group(1)) for line in lines] == (
                expected_losses
            )
        stored = replay.call("get_metrics").num_env_steps
        assert stored == replay.metrics.num_env_steps_acknowledged - replay.metrics.num_env_steps_lost
    finally:
        replay.stop()


def test_a_dead_learner_raises_its_error_and_the_healthy_replay_is_kept(tmp_path: Path) -> None:
    import gymnasium as gym

    from learner.dqn import DQNConfig, DQNLearner, QModule
    from learner.learner_group import LearnerGroup

    replay = supervised(tmp_path / "replay.parquet")
    learners = LearnerGroup(
        lambda: QModule(gym.spaces.Box(-np.inf, np.inf, (1,)), gym.spaces.Discrete(2), seed=0),
        DQNConfig(),
        learner_class=DQNLearner,
        num_learners=1,
        num_cpus_per_learner=0.5,
    )
    try:
        replay.add([episode("a", 50)])
        ray.kill(learners.actors[0])
        with pytest.raises(ray.exceptions.RayActorError):
            replay.update_from_replay(learners, 1, 8)
        assert replay.metrics.num_replay_restarts == 0
        assert replay.take_recoveries() == []
        assert replay.call("get_metrics").num_env_steps == 50
    finally:
        learners.stop()
        replay.stop()


def test_chunks_the_driver_could_not_add_to_a_dead_replay_are_returned_held_and_added_after_the_restore(
    tmp_path: Path,
) -> None:
    replay = supervised(tmp_path / "replay.parquet")  # never saved: restored empty
    group = dataclasses.replace(GROUP, keep_sampling=True)
    try:
        with EnvRunnerGroup(RUNNER, group) as runners:
            runners.sample_columnar()  # each runner's next request (no replay) is in flight at once
            kill(replay)
            answers = replay.sample_to_replay(runners)  # the driver adds those: the replay is dead
            assert replay.metrics.num_replay_restarts == 1
            assert sum(m.num_env_steps for m in answers) == 2 * STEPS_PER_CALL
            assert sum(m.num_env_steps_held_for_replay for m in answers) == 2 * STEPS_PER_CALL
            answers = replay.sample_to_replay(runners)  # the group's held chunks first, then the runners'
            assert sum(m.num_env_steps_held_for_replay for m in answers) == 0
            assert replay.metrics.num_env_steps_lost == 0
            runners.collect_in_flight()  # the requests made ahead store their chunks too
        metrics = replay.call("get_metrics")
        assert (metrics.num_env_steps_received, metrics.num_env_steps) == (4 * STEPS_PER_CALL, 4 * STEPS_PER_CALL)
        assert_stamps_continuous(replay)
    finally:
        replay.stop()


def test_a_corrupt_checkpoint_found_by_a_restart_raises_replay_unavailable_naming_the_file(tmp_path: Path) -> None:
    from learner.replay_recovery import ReplayUnavailableError

    path = tmp_path / "replay.parquet"
    replay = supervised(path)
    try:
        replay.add([episode("a", 50)])
        replay.call("save")
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        kill(replay)
        with pytest.raises(ReplayUnavailableError) as info:
            replay.call("get_metrics")
        assert re.fullmatch(
            r"the replay actor died \(ActorDiedError: .*\) and its replacement failed to start from "
            rf"checkpoint_path='{re.escape(str(path))}': ray_sampler\.errors\.DataFormatError: "
            rf"{re.escape(str(path))}: .*corrupted.*",
            str(info.value),
        )
        assert isinstance(info.value.__cause__, ray.exceptions.RayActorError)
        assert replay.metrics.num_replay_restarts == 0
    finally:
        replay.stop()


def _creating(monkeypatch: pytest.MonkeyPatch, kill_first: int) -> list:
    """Makes SupervisedReplay's replacements through a wrapper that kills the first ``kill_first``
    of them as soon as they are created (they die while starting: not their ``__init__``'s fault)."""
    import learner.replay_recovery as recovery

    made: list = []
    real = recovery.create_replay_actor

    def create(config: ReplayConfig, **kwargs: object) -> object:
        actor = real(config, **kwargs)
        made.append(actor)
        if len(made) <= kill_first:
            ray.kill(actor)
        return actor

    monkeypatch.setattr(recovery, "create_replay_actor", create)
    return made


def test_a_replacement_killed_while_starting_is_replaced_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replay = supervised(tmp_path / "replay.parquet")
    try:
        replay.add([episode("a", 50)])
        replay.call("save")
        made = _creating(monkeypatch, kill_first=1)
        kill(replay)
        assert replay.call("get_metrics").num_env_steps == 50  # restored by the second replacement
        assert len(made) == 2 and replay.actor is made[1]
        assert replay.metrics.num_replay_restarts == 1 and replay.metrics.num_env_steps_lost == 0
    finally:
        replay.stop()


def test_replacements_that_all_die_while_starting_raise_replay_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from learner.replay_recovery import START_ATTEMPTS, ReplayUnavailableError

    path = tmp_path / "replay.parquet"
    replay = supervised(path)
    try:
        replay.add([episode("a", 50)])
        replay.call("save")
        made = _creating(monkeypatch, kill_first=START_ATTEMPTS)
        kill(replay)
        with pytest.raises(
            ReplayUnavailableError, match=f"died while starting {START_ATTEMPTS} times, with checkpoint"
        ):
            replay.call("get_metrics")
        assert len(made) == START_ATTEMPTS and replay.metrics.num_replay_restarts == 0
        assert replay.call("get_metrics").num_env_steps == 50  # a later call tries again, and this one starts
    finally:
        replay.stop()


def test_a_checkpoint_directory_missing_on_the_actors_node_is_refused_when_the_replay_starts(tmp_path: Path) -> None:
    """Before: the actor's refusal was found as a replay death by the first sampling round, and
    reported as ReplayUnavailableError after restarts that failed the same way."""
    path = tmp_path / "missing" / "replay.parquet"
    with pytest.raises(ConfigError) as raised:
        supervised(path)
    assert str(raised.value) == (
        f"'checkpoint_path' {str(path)!r}: its directory {tmp_path / 'missing'} does not exist on the replay "
        "actor's node"
    )
