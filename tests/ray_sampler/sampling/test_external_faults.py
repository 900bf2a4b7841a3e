"""ExternalEnvRunner faults a review found, each injected: Box actions in local mode, back-pressure in
complete mode, a refused batch, a client back on a new connection while its old one waits."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from ray_sampler.client import PolicyClient
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_runner import ExternalEnvRunner
from tests.ray_sampler.sampling.test_external_runner import _Raw, _runner


@pytest.fixture
def runner() -> Iterator[ExternalEnvRunner]:
    r = _runner()
    yield r
    r.stop()


class TestReviewFindings:
    """One test per finding."""

    def test_local_box_actions_are_recorded_as_drawn_and_clipped_for_the_simulator(self) -> None:
        config = EnvRunnerConfig(env="Pendulum-v1", rollout_fragment_length=20, external=ExternalConfig(port=0))
        r = ExternalEnvRunner(config, worker_index=1)
        try:
            client = PolicyClient(r.address(), inference="local", batch_steps=10, seed=0)
            got = []
            episode = client.start_episode()
            for _ in range(20):
                action = client.get_action(episode, [1.0, 0.0, 0.0])
                got.append(float(action[0]))
                client.log_returns(episode, -1.0)
            client.get_action(episode, [1.0, 0.0, 0.0])
            client.flush()
            (chunk,) = r.sample(num_timesteps=20, timeout_s=30)
            assert all(-2.0 <= a <= 2.0 for a in got)  # the simulator gets actions inside the bounds
            drawn = np.asarray(chunk.get_actions())[:, 0]
            assert np.allclose(np.clip(drawn, -2, 2), got, atol=1e-6) and client.num_batches_refused == 0
        finally:
            r.stop()

    def test_complete_mode_back_pressure_lets_running_episodes_finish(self) -> None:
        r = _runner(batch_mode=BatchMode.COMPLETE_EPISODES, max_held_env_steps=20, rollout_fragment_length=30)
        try:
            client = PolicyClient(r.address())
            episode = client.start_episode()
            for _ in range(30):  # more steps than max_held_env_steps, in one running episode
                client.get_action(episode, [0.0, 0.0, 0.0, 0.0])
            client.end_episode(episode, [0.0, 0.0, 0.0, 0.0])
            (chunk,) = r.sample(timeout_s=30)
            assert len(chunk) == 30 and chunk.is_terminated
        finally:
            r.stop()

    def test_a_refused_batch_ends_the_episodes_it_would_continue_counted(self, runner: ExternalEnvRunner) -> None:
        raw = _Raw(runner.address())
        raw.hello(inference="local", client_id="sim-2")
        obs = [[0.0] * 4, [0.1, 0, 0, 0], [0.2, 0, 0, 0]]
        first = {"episode_id": "a", "start": True, "observations": obs, "actions": [0, 1], "rewards": [1.0, 1.0],
                 "action_logp": [-0.7, -0.7]}  # fmt: skip
        assert raw.ask({"type": "chunks", "batch": 0, "chunks": [first]})["type"] == "ack"
        bad = {**first, "start": False, "actions": [0, 7]}
        assert raw.ask({"type": "chunks", "batch": 1, "chunks": [bad]})["type"] == "error"
        later = {**first, "start": False}
        assert raw.ask({"type": "chunks", "batch": 2, "chunks": [later]})["num_steps_dropped"] == 2
        assert runner.episodes.take_drops()[:2] == (1, 2)  # episode a, its 2 steps not taken yet

    def test_a_client_back_on_a_new_connection_replaces_its_old_one(self, runner: ExternalEnvRunner) -> None:
        old = _Raw(runner.address())
        old.hello(client_id="sim-3")
        old.ask({"type": "start_episode", "episode_id": "e"})
        for _ in range(3):
            old.ask({"type": "get_action", "episode_id": "e", "observation": [0, 0, 0, 0]})
        new = PolicyClient(runner.address(), client_id="sim-3")
        episode = new.start_episode("e")
        for _ in range(3):
            new.get_action(episode, [0.0, 0.0, 0.0, 0.0])
        new.end_episode(episode, [0.0, 0.0, 0.0, 0.0])
        (chunk,) = runner.sample(num_timesteps=3, timeout_s=30)
        assert len(chunk) == 3 and chunk.is_terminated and chunk.t_started == 0  # the new connection's episode
        metrics = runner.metrics  # the old connection's episode, dropped and counted
        assert (metrics.num_episodes_dropped_env_error, metrics.num_env_steps_dropped) == (1, 2)
