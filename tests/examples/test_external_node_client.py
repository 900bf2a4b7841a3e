"""The Node.js client (examples/external_client.js) against a live external env runner.

Where ``node`` is installed, the client plays CartPole episodes against a runner started here and
what the runner recorded is checked against what the client reported and against CartPole's
dynamics. Where it is not, the protocol is still checked: ``external_node_transcript.json`` holds
the messages the client sent in a recorded session (``RAY_SAMPLER_RECORD=path``), replayed here
over a plain socket, and its observations are checked against the same dynamics.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.client.protocol import frame, read_message
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_runner import ExternalEnvRunner

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "examples" / "external_client.js"
TRANSCRIPT = Path(__file__).with_name("external_node_transcript.json")
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed: test_transcript_replays covers the protocol"
)

TOKEN = "s3cret-token"
ANSWERS = {
    "hello": "welcome",
    "start_episode": "episode_started",
    "get_action": "action",
    "log_returns": "ok",
    "end_episode": "ok",
}


@pytest.fixture
def make_runner() -> Iterator[Callable[..., ExternalEnvRunner]]:
    runners: list[ExternalEnvRunner] = []

    def make(token: str | None = None) -> ExternalEnvRunner:
        config = EnvRunnerConfig(
            env="CartPole-v1", seed=7, rollout_fragment_length=50, external=ExternalConfig(port=0, token=token)
        )
        runners.append(ExternalEnvRunner(config, worker_index=1))
        return runners[-1]

    yield make
    for runner in runners:
        runner.stop()


def run_client(runner: ExternalEnvRunner, *args: str, record: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    env = {k: v for k, v in os.environ.items() if k != "RAY_SAMPLER_RECORD"}
    if record is not None:
        env["RAY_SAMPLER_RECORD"] = str(record)
    return subprocess.run(
        [NODE, str(CLIENT), "--address", runner.address(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


def sample(runner: ExternalEnvRunner, num_timesteps: int) -> list[SingleAgentEpisode]:
    """``runner.sample(num_timesteps=...)``, failing (not hanging) when the steps never come."""
    out: list[list[SingleAgentEpisode]] = []
    thread = threading.Thread(target=lambda: out.append(runner.sample(num_timesteps=num_timesteps)), daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        runner.stop()  # the waiting sample() returns
        thread.join(5)
        pytest.fail(f"the runner did not get {num_timesteps} env steps within 10 s")
    return out[0]


_CARTPOLE: Any = gym.make("CartPole-v1").unwrapped
_CARTPOLE.reset(seed=0)


def cartpole_step(state: np.ndarray, action: int) -> tuple[np.ndarray, bool]:
    """Gymnasium's CartPole-v1 one step from ``state``: the next observation and ``terminated``."""
    env = _CARTPOLE
    env.state, env.steps_beyond_terminated = np.asarray(state, np.float64), None
    obs, reward, terminated, _, _ = env.step(action)
    assert reward == 1.0
    return obs, terminated


def check_dynamics(observations: np.ndarray, actions: list[int] | None, terminated: bool) -> None:
    """Each observation follows from the one before by CartPole's equations (with the recorded
    action; with either action where none is known); only the last may be out of bounds."""
    assert observations.shape[1:] == (4,)
    assert np.all(np.abs(observations[0]) <= 0.05), observations[0]
    for t in range(len(observations) - 1):
        candidates = [0, 1] if actions is None else [actions[t]]
        outcomes = [cartpole_step(observations[t], a) for a in candidates]
        matches = [done for obs, done in outcomes if np.allclose(obs, observations[t + 1], rtol=0, atol=1e-5)]
        assert matches, f"step {t}: {observations[t + 1]} follows from {observations[t]} by no action of {candidates}"
        assert matches[0] == (terminated and t == len(observations) - 2), f"step {t}: terminated is {matches[0]}"


@needs_node
def test_node_client_plays_cartpole_against_the_runner(make_runner: Callable[..., ExternalEnvRunner]) -> None:
    runner = make_runner()
    proc = run_client(runner, "--episodes", "5", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    match = re.fullmatch(r"episodes 5 mean_return (\d+(?:\.\d+)?)", proc.stdout.strip())
    assert match, proc.stdout
    mean_return = float(match.group(1))
    total = round(mean_return * 5)  # CartPole's reward is 1 a step: the returns are the lengths

    chunks = sample(runner, total)
    assert sum(len(ep) for ep in chunks) == total
    assert len(chunks) == 5 and all(ep.is_done for ep in chunks)
    metrics = runner.metrics
    assert metrics.num_env_steps == total
    assert sum(metrics.episode_returns) == total
    assert sum(metrics.episode_returns) / len(metrics.episode_returns) == mean_return
    assert sorted(metrics.episode_lengths) == sorted(len(ep) for ep in chunks)
    assert metrics.external is not None
    assert metrics.external["num_clients_total"] == 1
    assert metrics.external["num_clients_dropped"] == {} and metrics.external["num_messages_rejected"] == {}

    for ep in chunks:
        obs = np.asarray(ep.get_observations())
        assert obs.dtype == np.float32 and obs.shape == (len(ep) + 1, 4)
        actions = [int(a) for a in ep.get_actions()]
        assert set(actions) <= {0, 1}
        assert list(ep.get_rewards()) == [1.0] * len(ep)
        assert ep.get_return() == len(ep)
        assert ep.is_terminated != ep.is_truncated and ep.is_truncated == (len(ep) == 500)
        check_dynamics(obs, actions, ep.is_terminated)


@needs_node
def test_node_client_sends_what_the_transcript_holds(
    make_runner: Callable[..., ExternalEnvRunner], tmp_path: Path
) -> None:
    """The recorded transcript is still what the client sends: the same messages, the same fields,
    the same first observation for the same ``--seed`` (the rest follows the server's actions)."""
    runner = make_runner()
    proc = run_client(runner, "--episodes", "2", "--seed", "1", record=tmp_path / "sent.json")
    assert proc.returncode == 0, proc.stderr
    sent = json.loads((tmp_path / "sent.json").read_text())
    transcript = json.loads(TRANSCRIPT.read_text())
    assert sent[:3] == transcript[:3]  # hello, start_episode, the first get_action
    assert {m["type"]: sorted(m) for m in sent} == {m["type"]: sorted(m) for m in transcript}
    assert sum(m["type"] == "end_episode" for m in sent) == 2


@needs_node
def test_node_client_with_a_wrong_token_exits_with_the_servers_error(
    make_runner: Callable[..., ExternalEnvRunner],
) -> None:
    runner = make_runner(token=TOKEN)
    for args in (["--token", "not-the-token"], []):
        proc = run_client(runner, "--episodes", "1", *args)
        assert proc.returncode != 0
        assert proc.stderr.strip() == "error: wrong or missing token"
        assert proc.stdout == ""
    proc = run_client(runner, "--episodes", "2", "--token", TOKEN)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"episodes 2 mean_return \d+(\.\d+)?", proc.stdout.strip()), proc.stdout
    total = round(float(proc.stdout.split()[-1]) * 2)
    assert sum(len(ep) for ep in sample(runner, total)) == total
    assert runner.metrics.external is not None
    assert runner.metrics.external["num_clients_dropped"] == {"auth": 2}
    assert runner.metrics.external["num_clients_total"] == 1


def test_transcript_replays(make_runner: Callable[..., ExternalEnvRunner]) -> None:
    """The node client's recorded messages, sent over a Python socket: each answer has the right
    type and the runner's chunks hold the transcript's episodes (observations, rewards, ends)."""
    transcript = json.loads(TRANSCRIPT.read_text())
    assert transcript[0] == {"type": "hello", "protocol": 1, "token": None, "inference": "remote"}
    runner = make_runner()
    host, port = runner.address().rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for i, message in enumerate(transcript):
            sock.sendall(frame(message))
            answer = read_message(sock)
            assert answer["type"] == ANSWERS[message["type"]], (i, message, answer)
            if answer["type"] == "action":
                assert answer["action"] in (0, 1)
            if answer["type"] == "episode_started":
                assert answer["episode_id"] == message["episode_id"]

    episodes: dict[str, dict[str, Any]] = {}
    for message in transcript[1:]:
        ep = episodes.setdefault(message["episode_id"], {"obs": [], "rewards": [], "truncated": None})
        if message["type"] in ("get_action", "end_episode"):
            ep["obs"].append(message["observation"])
        if message["type"] == "log_returns":
            ep["rewards"].append(message["reward"])
        if message["type"] == "end_episode":
            ep["truncated"] = message["truncated"]
    assert len(episodes) == 2 and all(ep["truncated"] is not None for ep in episodes.values())
    total = sum(len(ep["rewards"]) for ep in episodes.values())

    chunks = sample(runner, total)
    assert sum(len(ep) for ep in chunks) == total and len(chunks) == len(episodes)
    for chunk, (handle, ep) in zip(chunks, episodes.items(), strict=True):
        obs = np.asarray(chunk.get_observations())
        assert obs.dtype == np.float32
        np.testing.assert_array_equal(obs, np.asarray(ep["obs"], np.float32), err_msg=handle)
        assert list(chunk.get_rewards()) == ep["rewards"]
        assert chunk.is_truncated == ep["truncated"] and chunk.is_terminated != ep["truncated"]
        # What the JS CartPole computed is gymnasium's CartPole (the actions were the server's).
        check_dynamics(np.asarray(ep["obs"], np.float64), None, chunk.is_terminated)
    assert runner.metrics.episode_returns == [float(len(ep["rewards"])) for ep in episodes.values()]
