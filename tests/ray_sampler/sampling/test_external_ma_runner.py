"""ExternalMultiAgentEnvRunner: clients that send per-agent dicts get MultiAgentEpisode chunks."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from ray_sampler.client import PolicyClient, ServerError
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_ma_runner import ExternalMultiAgentEnvRunner
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig, policy_mapping


def _runner(*, mapping: MultiAgentConfig | None = None, **kwargs: Any) -> ExternalMultiAgentEnvRunner:
    config = EnvRunnerConfig(
        env="ma-cartpole:2",
        rollout_fragment_length=kwargs.pop("rollout_fragment_length", 30),
        external=ExternalConfig(port=0),
        multi_agent=mapping or MultiAgentConfig(),
        **kwargs,
    )
    return ExternalMultiAgentEnvRunner(config, worker_index=1)


@pytest.fixture
def runner() -> Iterator[ExternalMultiAgentEnvRunner]:
    r = _runner()
    yield r
    r.stop()


def play(address: str, episodes: int, seed: int = 0) -> list[dict[str, float]]:
    """Two CartPoles per episode, one per agent; each agent leaves when its pole falls. Returns each
    episode's per-agent returns."""
    client = PolicyClient(address)
    envs = {"0": gym.make("CartPole-v1"), "1": gym.make("CartPole-v1")}
    out = []
    for k in range(episodes):
        obs = {a: env.reset(seed=seed * 100 + 10 * k + int(a))[0] for a, env in envs.items()}
        episode = client.start_episode()
        totals = dict.fromkeys(envs, 0.0)
        while obs:
            actions = client.get_action(episode, obs)
            assert set(actions) == set(obs)
            rewards, running = {}, {}
            for a, action in actions.items():
                o, reward, terminated, truncated, _ = envs[a].step(int(action))
                rewards[a] = float(reward)
                totals[a] += float(reward)
                if not (terminated or truncated):
                    running[a] = o
            client.log_returns(episode, rewards)
            obs = running
        client.end_episode(episode, {})
        out.append(totals)
    client.close()
    return out


def test_chunks_hold_exactly_the_batchs_env_steps_and_the_agents_returns(runner: ExternalMultiAgentEnvRunner) -> None:
    played: list[list[dict[str, float]]] = []
    thread = threading.Thread(target=lambda: played.append(play(runner.address(), 4)))
    thread.start()
    chunks = runner.sample(timeout_s=60) + runner.sample(timeout_s=60)
    thread.join(timeout=60)
    assert all(isinstance(c, MultiAgentEpisode) for c in chunks)
    assert sum(len(c) for c in chunks) == 60 and runner.metrics.num_env_steps == 30
    # chunks of one episode follow each other in env steps
    by_id: dict[str, list[MultiAgentEpisode]] = {}
    for c in chunks:
        by_id.setdefault(c.id_, []).append(c)
    for parts in by_id.values():
        for a, b in itertools.pairwise(parts):
            assert b.env_t_started == a.env_t
    rest = runner.episodes.drain()[0]
    finished = [c for c in chunks + rest if c.is_done]
    assert len(finished) == 4
    lengths = [c.env_t for c in finished]
    assert lengths == [int(max(p.values())) for p in played[0]]  # an agent's return is its steps


def test_each_module_acts_for_its_agents_and_whole_returns_are_reported() -> None:
    r = _runner(mapping=policy_mapping("per-agent", [0, 1]), batch_mode=BatchMode.COMPLETE_EPISODES)
    try:
        played: list[list[dict[str, float]]] = []
        thread = threading.Thread(target=lambda: played.append(play(r.address(), 2, seed=3)))
        thread.start()
        chunks = r.sample(num_episodes=2, timeout_s=60)
        thread.join(timeout=60)
        assert all(c.is_done and c.env_t_started == 0 for c in chunks)
        assert r.metrics.agent_episode_returns == {0: [p["0"] for p in played[0]], 1: [p["1"] for p in played[0]]}
        assert r.metrics.episode_returns == [p["0"] + p["1"] for p in played[0]]
        assert set(r.metrics.num_module_steps) == set(r.ma_config.module_ids) and len(r.ma_config.module_ids) == 2
    finally:
        r.stop()


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"type": "get_action", "episode_id": "e", "observation": {"7": [0, 0, 0, 0]}}, "unknown agent '7'"),
        ({"type": "get_action", "episode_id": "e", "observation": [0, 0, 0, 0]}, "must be an object of agent ids"),
        ({"type": "get_action", "episode_id": "e", "observation": {"0": [0, 0]}}, r"observation.0' must have shape"),
        ({"type": "log_action", "episode_id": "e", "observation": {}, "action": {}}, "not served for multi-agent"),
    ],
    ids=["unknown-agent", "not-a-dict", "wrong-shape", "log-action"],
)
def test_a_bad_message_gets_one_line(runner: ExternalMultiAgentEnvRunner, message: dict[str, Any], error: str) -> None:
    import re

    from tests.ray_sampler.sampling.test_external_runner import _Raw

    raw = _Raw(runner.address())
    raw.hello()
    raw.ask({"type": "start_episode", "episode_id": "e"})
    answer = raw.ask(message)
    assert answer["type"] == "error" and re.search(error, answer["error"]), answer


def test_a_gone_client_drops_its_running_episode_counted(runner: ExternalMultiAgentEnvRunner) -> None:
    client = PolicyClient(runner.address())
    episode = client.start_episode()
    for _ in range(4):
        client.get_action(episode, {"0": [0.0] * 4, "1": [0.0] * 4})
        client.log_returns(episode, {"0": 1.0, "1": 1.0})
    client.close()
    with pytest.raises(TimeoutError):
        runner.sample(timeout_s=0.5)
    assert runner.episodes.take_drops()[:2] == (1, 3)  # 4 observations: 3 whole env steps


def test_local_inference_is_refused(runner: ExternalMultiAgentEnvRunner) -> None:
    with pytest.raises(ServerError, match="remote inference only"):
        PolicyClient(runner.address(), inference="local")
