"""ExternalEnvRunner with a live server: real client processes, bad input, faults, back-pressure, TLS.

The runner is the plain class (no Ray): its server thread listens on a free port of 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.client import PolicyClient, ServerError
from ray_sampler.client.protocol import HEADER, frame, read_message
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_runner import ExternalEnvRunner

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"


def _runner(**external: Any) -> ExternalEnvRunner:
    batch_mode = external.pop("batch_mode", BatchMode.TRUNCATE_EPISODES)
    config = EnvRunnerConfig(
        env="CartPole-v1",
        rollout_fragment_length=external.pop("rollout_fragment_length", 50),
        batch_mode=batch_mode,
        external=ExternalConfig(port=0, **external),
    )
    return ExternalEnvRunner(config, worker_index=1)


@pytest.fixture
def runner() -> Iterator[ExternalEnvRunner]:
    r = _runner()
    yield r
    r.stop()


def _client_process(address: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ray_sampler.sampling.external_client_proc", "--address", address, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


class _Raw:
    """A client speaking the protocol by hand (to send what PolicyClient never would)."""

    def __init__(self, address: str, *, context: ssl.SSLContext | None = None) -> None:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock = context.wrap_socket(sock, server_hostname=host) if context else sock

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.sock.sendall(frame(message))
        return read_message(self.sock)

    def hello(self, **fields: Any) -> dict[str, Any]:
        return self.ask({"type": "hello", "protocol": 1, **fields})

    def is_closed(self) -> bool:
        """Whether the server closed the connection (after any answer it sent first)."""
        try:
            while self.sock.recv(4096):
                pass
        except OSError:
            pass
        return True


def frame_text(body: str) -> bytes:
    """A message whose body is ``body`` as written (JSON that ``frame`` would never write)."""
    return HEADER.pack(len(body.encode())) + body.encode()


def _wait(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class TestClientsInProcesses:
    def test_remote_clients_chunks_hold_exactly_their_episodes(self, runner: ExternalEnvRunner) -> None:
        procs = [_client_process(runner.address(), "--episodes", "3", "--seed", str(s)) for s in range(3)]
        results = [_result(p) for p in procs]
        lengths = sorted(n for r in results for n in r["lengths"])
        chunks = runner.sample(num_timesteps=sum(lengths), timeout_s=30)
        assert sum(len(c) for c in chunks) == sum(lengths)
        assert sorted(runner.metrics.episode_lengths) == lengths
        assert sorted(runner.metrics.episode_returns) == sorted(r for res in results for r in res["returns"])
        assert runner.metrics.num_env_steps == sum(lengths)
        assert runner.metrics.external is not None and runner.metrics.external["num_clients_total"] == 3
        for c in chunks:
            obs = c.get_observations()
            assert obs[0].shape == (4,) and obs[0].dtype == np.float32
            assert set(np.asarray(c.get_actions()).tolist()) <= {0, 1}
            for key in ("action_logp", "action_dist_inputs", "vf_preds"):
                assert len(c.get_extra_model_outputs(key)) == len(c)

    def test_a_client_replays_as_the_same_env_from_its_seed(self, runner: ExternalEnvRunner) -> None:
        """Observations the server stored are the env's own, step for step, for the actions it gave."""
        result = _result(_client_process(runner.address(), "--episodes", "1", "--seed", "7"))
        (chunk,) = runner.sample(num_timesteps=result["lengths"][0], timeout_s=30)
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=7000)
        assert np.array_equal(chunk.get_observations(0), obs)
        for t, action in enumerate(chunk.get_actions()):
            obs, *_ = env.step(int(action))
            assert np.array_equal(chunk.get_observations(t + 1), obs)
        assert chunk.is_terminated or chunk.is_truncated

    def test_local_inference_chunks_carry_the_clients_log_probabilities(self, runner: ExternalEnvRunner) -> None:
        result = _result(_client_process(runner.address(), "--episodes", "2", "--inference", "local"))
        chunks = runner.sample(num_timesteps=sum(result["lengths"]), timeout_s=30)
        assert sorted(runner.metrics.episode_returns) == sorted(result["returns"])
        for c in chunks:
            logp = np.asarray(c.get_extra_model_outputs("action_logp"))
            assert ((logp < 0) & (logp > -5)).all()  # a two-action softmax near uniform: about log(0.5)

    def test_logged_actions_are_recorded_and_scored(self, runner: ExternalEnvRunner) -> None:
        result = _result(_client_process(runner.address(), "--episodes", "1", "--log-actions"))
        (chunk,) = runner.sample(num_timesteps=result["lengths"][0], timeout_s=30)
        n = len(chunk)
        assert np.asarray(chunk.get_actions()).tolist() == [(t // 3) % 2 for t in range(n)]
        logits = np.asarray(chunk.get_extra_model_outputs("action_dist_inputs"), np.float64)
        expected = logits[np.arange(n), [(t // 3) % 2 for t in range(n)]] - np.log(np.exp(logits).sum(axis=1))
        np.testing.assert_allclose(chunk.get_extra_model_outputs("action_logp"), expected, atol=1e-5)

    def test_complete_mode_returns_whole_episodes(self) -> None:
        r = _runner(batch_mode=BatchMode.COMPLETE_EPISODES, rollout_fragment_length=10)
        try:
            result = _result(_client_process(r.address(), "--episodes", "2"))
            chunks = r.sample(timeout_s=30)
            assert all(c.is_done and c.t_started == 0 for c in chunks)
            assert [len(c) for c in chunks] == result["lengths"][: len(chunks)]
        finally:
            r.stop()


class TestBadInput:
    def test_wrong_version_or_token_closes_only_that_connection_and_is_counted(self) -> None:
        r = _runner(token="s3cret-token")
        try:
            good = PolicyClient(r.address(), token="s3cret-token")
            for fields, reason in (({"protocol": 2}, "version"), ({"token": "wrong-token"}, "auth"), ({}, "auth")):
                raw = _Raw(r.address())
                answer = raw.ask({"type": "hello", "protocol": 1, **fields})
                assert answer["type"] == "error" and answer["fatal"] is True
                assert raw.is_closed()
                assert r.server.stats.num_clients_dropped[reason] >= 1
            episode = good.start_episode()
            assert good.get_action(episode, [0.0, 0.0, 0.0, 0.0]) in (0, 1)
            with pytest.raises(ServerError, match="wrong or missing token"):
                PolicyClient(r.address(), token="not-the-token")
        finally:
            r.stop()

    def test_an_oversized_or_malformed_message_closes_that_connection(self, runner: ExternalEnvRunner) -> None:
        raw = _Raw(runner.address())
        raw.sock.sendall(HEADER.pack(10**9))
        assert read_message(raw.sock)["type"] == "error" and raw.is_closed()
        raw = _Raw(runner.address())
        raw.hello()
        raw.sock.sendall(HEADER.pack(5) + b"{nope")
        assert "UTF-8 JSON" in read_message(raw.sock)["error"] and raw.is_closed()
        assert runner.server.stats.num_clients_dropped == {"oversized": 1, "malformed": 1}

    @pytest.mark.parametrize(
        ("message", "error"),
        [
            ({"type": "get_action", "episode_id": "never", "observation": [0, 0, 0, 0]}, "never started"),
            ({"type": "start_episode", "colour": "red"}, r"unknown fields \['colour'\]"),
            ({"type": "fly"}, "unknown message type 'fly'"),
            ({"type": "get_weights"}, "not for a client with 'remote' inference"),
        ],
        ids=["unknown-episode", "unknown-field", "unknown-type", "wrong-mode"],
    )
    def test_a_bad_message_gets_an_error_and_the_connection_goes_on(
        self, runner: ExternalEnvRunner, message: dict[str, Any], error: str
    ) -> None:
        raw = _Raw(runner.address())
        raw.hello()
        answer = raw.ask(message)
        assert answer["type"] == "error"
        assert re.search(error, answer["error"])
        assert raw.ask({"type": "start_episode", "episode_id": "e"}) == {"type": "episode_started", "episode_id": "e"}
        assert sum(runner.server.stats.num_messages_rejected.values()) == 1

    def test_an_observation_of_the_wrong_shape_is_refused_and_not_recorded(self, runner: ExternalEnvRunner) -> None:
        client = PolicyClient(runner.address())
        episode = client.start_episode()
        with pytest.raises(ServerError, match=r"'observation' must have shape \(4,\) \(got \(3,\)\)"):
            client.get_action(episode, [0.0, 0.0, 0.0])
        raw = _Raw(runner.address())
        raw.hello()
        raw.ask({"type": "start_episode", "episode_id": "n"})
        raw.sock.sendall(frame_text('{"type": "get_action", "episode_id": "n", "observation": [0, NaN, 0, 0]}'))
        assert "must hold finite numbers" in read_message(raw.sock)["error"]
        assert client.get_action(episode, [0.0, 0.0, 0.0, 0.0]) in (0, 1)
        assert runner.episodes.num_held_steps() == 0  # the first observation: no step yet

    def test_rewards_that_add_up_past_a_float_are_refused(self, runner: ExternalEnvRunner) -> None:
        raw = _Raw(runner.address())
        raw.hello()
        raw.ask({"type": "start_episode", "episode_id": "e"})
        raw.ask({"type": "get_action", "episode_id": "e", "observation": [0, 0, 0, 0]})
        assert raw.ask({"type": "log_returns", "episode_id": "e", "reward": 1e308}) == {"type": "ok"}
        answer = raw.ask({"type": "get_action", "episode_id": "e", "observation": [0, 0, 0, 0], "reward": 1e308})
        assert "add up to more than a float holds" in answer["error"]
        assert runner.episodes.num_held_steps() == 0  # the refused message recorded nothing

    def test_a_reward_beside_the_next_observation_is_a_log_returns_before_it(self, runner: ExternalEnvRunner) -> None:
        raw = _Raw(runner.address())
        raw.hello()
        raw.ask({"type": "start_episode", "episode_id": "e"})
        raw.ask({"type": "get_action", "episode_id": "e", "observation": [0, 0, 0, 0]})
        raw.ask({"type": "log_returns", "episode_id": "e", "reward": 0.5})
        raw.ask({"type": "get_action", "episode_id": "e", "observation": [0, 0, 0, 0], "reward": 0.25})
        raw.ask({"type": "end_episode", "episode_id": "e", "observation": [0, 0, 0, 0], "reward": 2, "info": {"x": 1}})
        (chunk,) = runner.sample(num_timesteps=2, timeout_s=30)
        assert list(chunk.get_rewards()) == [0.75, 2.0] and chunk.get_infos(-1) == {"x": 1}

    def test_a_space_mismatch_at_hello_is_refused(self, runner: ExternalEnvRunner) -> None:
        raw = _Raw(runner.address())
        answer = raw.hello(
            action_space={"spec": {"type": "Discrete", "n": 3, "start": 0, "dtype": "int64"}, "arrays": {}}
        )
        assert answer["type"] == "error" and "action_space is not the server's" in answer["error"]

    def test_a_local_mode_batch_is_stored_once_and_whole(self, runner: ExternalEnvRunner) -> None:
        raw = _Raw(runner.address())
        assert raw.hello(inference="local", client_id="sim-1")["last_batch"] == -1
        obs = [[0.0, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0], [0.2, 0.0, 0.0, 0.0]]
        chunk = {"episode_id": "a", "start": True, "observations": obs, "actions": [0, 1], "rewards": [1.0, 1.0],
                 "action_logp": [-0.7, -0.7]}  # fmt: skip
        bad = {**chunk, "episode_id": "b", "actions": [0, 5]}
        answer = raw.ask({"type": "chunks", "batch": 0, "chunks": [chunk, bad]})
        assert answer["type"] == "error" and "chunks[1].actions[1]" in answer["error"]
        assert runner.episodes.num_held_steps() == 0  # nothing of a refused batch is stored
        assert raw.ask({"type": "chunks", "batch": 0, "chunks": [chunk]})["num_steps_dropped"] == 0
        assert raw.ask({"type": "chunks", "batch": 0, "chunks": [chunk]})["duplicate"] is True
        assert runner.episodes.num_held_steps() == 2
        again = _Raw(runner.address())
        assert again.hello(inference="local", client_id="sim-1")["last_batch"] == 0


class TestFaults:
    def test_a_killed_client_loses_its_running_episode_counted(self, runner: ExternalEnvRunner) -> None:
        proc = _client_process(runner.address(), "--episodes", "2", "--seed", "3", "--hold")
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        proc.kill()
        proc.wait(timeout=30)
        _wait(lambda: runner.server.stats.num_clients_connected == 0)
        held = runner.episodes.num_held_steps()
        chunks = runner.sample(num_timesteps=held, timeout_s=30)
        assert len(chunks) == 1 and chunks[0].is_done  # the first episode, whole
        assert runner.metrics.num_episodes_dropped_env_error == 1
        assert runner.metrics.num_env_steps_dropped == 4  # 5 observations after the first: 4 whole steps

    def test_a_silent_client_is_dropped_and_others_go_on(self) -> None:
        r = _runner(client_timeout_s=0.3, handshake_timeout_s=0.3)
        try:
            silent = _Raw(r.address())
            half = _Raw(r.address())
            half.hello()
            half.sock.sendall(HEADER.pack(100) + b'{"type"')  # never the rest
            client = PolicyClient(r.address())
            episode = client.start_episode()
            for _ in range(10):
                assert client.get_action(episode, [0.0, 0.0, 0.0, 0.0]) in (0, 1)
                time.sleep(0.05)
            _wait(lambda: r.server.stats.num_clients_dropped["timeout"] == 2)
            assert silent.is_closed() and half.is_closed()
        finally:
            r.stop()

    def test_one_client_too_many_is_refused(self) -> None:
        r = _runner(max_clients=1)
        try:
            first = PolicyClient(r.address())
            with pytest.raises(ServerError, match="serves 1 clients at most"):
                PolicyClient(r.address(), reconnect_timeout_s=0.1)
            assert r.server.stats.num_clients_dropped["full"] == 1
            first.close()
        finally:
            r.stop()

    def test_a_restarted_server_is_found_again_and_episodes_go_on_there(self) -> None:
        first = _runner()
        address = first.address()
        port = int(address.rsplit(":", 1)[1])
        client = PolicyClient(address, reconnect_timeout_s=30)
        episode = client.start_episode()
        for _ in range(3):
            client.get_action(episode, [0.0, 0.0, 0.0, 0.0])
            client.log_returns(episode, 1.0)
        first.stop()
        second_box: list[ExternalEnvRunner] = []
        starter = threading.Timer(0.5, lambda: second_box.append(_runner_on(port)))
        starter.start()
        try:
            for _ in range(4):
                client.get_action(episode, [0.0, 0.0, 0.0, 0.0])
                client.log_returns(episode, 1.0)
            client.end_episode(episode, [0.0, 0.0, 0.0, 0.0])
            assert client.num_reconnects == 1
            second = second_box[0]
            (chunk,) = second.sample(num_timesteps=4, timeout_s=30)
            assert len(chunk) == 4 and chunk.is_terminated and chunk.t_started == 0
            assert list(chunk.get_rewards()) == [1.0, 1.0, 1.0, 1.0]
        finally:
            starter.join()
            for r in second_box:
                r.stop()

    def test_a_local_client_sends_again_what_was_not_acknowledged(self) -> None:
        first = _runner()
        port = int(first.address().rsplit(":", 1)[1])
        client = PolicyClient(first.address(), inference="local", batch_steps=1000, reconnect_timeout_s=30)
        episode = client.start_episode()
        for _ in range(5):
            client.get_action(episode, [0.0, 0.0, 0.0, 0.0])
            client.log_returns(episode, 1.0)
        first.stop()
        second = None
        try:
            second = _runner_on(port)
            client.end_episode(episode, [0.0, 0.0, 0.0, 0.0])
            client.flush()
            (chunk,) = second.sample(num_timesteps=5, timeout_s=30)
            assert len(chunk) == 5 and chunk.is_terminated
        finally:
            if second is not None:
                second.stop()


def _runner_on(port: int, **external: Any) -> ExternalEnvRunner:
    config = EnvRunnerConfig(
        env="CartPole-v1", rollout_fragment_length=50, external=ExternalConfig(port=port, **external)
    )
    return ExternalEnvRunner(config, worker_index=1)


class TestServer:
    def test_answers_wait_while_the_runner_holds_its_most_steps(self) -> None:
        r = _runner(max_held_env_steps=10)
        try:
            done = threading.Event()

            def play() -> None:
                client = PolicyClient(r.address())
                episode = client.start_episode()
                for _ in range(15):  # 10 steps held, then 4 more once a call took them
                    client.get_action(episode, [0.0, 0.0, 0.0, 0.0])
                done.set()

            threading.Thread(target=play, daemon=True).start()
            _wait(lambda: r.episodes.num_held_steps() == 10)
            time.sleep(0.3)
            assert r.episodes.num_held_steps() == 10 and not done.is_set()
            assert sum(len(c) for c in r.sample(num_timesteps=10, timeout_s=30)) == 10
            _wait(done.is_set)
        finally:
            r.stop()

    def test_a_port_in_use_is_one_line(self, runner: ExternalEnvRunner) -> None:
        port = int(runner.address().rsplit(":", 1)[1])
        with pytest.raises(ConfigError, match=rf"'external.port': cannot listen on 127.0.0.1:{port} \(OSError"):
            _runner_on(port)

    def test_tls_serves_a_client_that_trusts_the_certificate(self) -> None:
        r = _runner(ssl_certfile=str(DATA / "external_test_cert.pem"), ssl_keyfile=str(DATA / "external_test_key.pem"))
        try:
            context = ssl.create_default_context(cafile=str(DATA / "external_test_cert.pem"))
            client = PolicyClient(r.address(), ssl_context=context)
            episode = client.start_episode()
            assert client.get_action(episode, [0.0, 0.0, 0.0, 0.0]) in (0, 1)
            with pytest.raises(ssl.SSLCertVerificationError):
                PolicyClient(r.address(), ssl_context=ssl.create_default_context())
            plain = _Raw(r.address())  # plain TCP to a TLS server: its hello is no TLS handshake
            plain.sock.sendall(frame({"type": "hello", "protocol": 1}))
            assert plain.is_closed()
        finally:
            r.stop()

    def test_new_weights_reach_local_clients_through_the_ack(self, runner: ExternalEnvRunner) -> None:
        client = PolicyClient(runner.address(), inference="local", batch_steps=2)
        assert client.policy is not None and client.policy.version == 0
        state = runner.get_state()["module"]
        runner.set_state({"module": {k: v + 0.5 for k, v in state.items()}, "weights_version": 3})
        episode = client.start_episode()
        for _ in range(3):
            client.get_action(episode, [0.0, 0.0, 0.0, 0.0])
            client.log_returns(episode, 1.0)
        client.flush()  # the batches' acknowledgements are read (they say version 3): the weights follow
        assert client.policy.version == 3
        np.testing.assert_allclose(client.policy.params["pi.0.b"], state["pi.0.b"] + 0.5, atol=1e-6)


def test_local_inference_is_refused_where_the_module_cannot_be_rebuilt() -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1", external=ExternalConfig(port=0), env_to_module_connectors=(_Identity(),)
    )
    r = ExternalEnvRunner(config, worker_index=1)
    try:
        with pytest.raises(ServerError, match="'inference': 'local' is not possible here"):
            PolicyClient(r.address(), inference="local")
    finally:
        r.stop()


class _Identity:
    def __call__(self, *, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return batch

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        pass
