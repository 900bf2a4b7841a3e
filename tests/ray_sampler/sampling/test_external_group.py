"""External runners in an EnvRunnerGroup on Ray: every runner serves its clients, a killed runner is
replaced on its port and its clients find it again."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import gymnasium as gym
import pytest
import ray

from ray_sampler.client import PolicyClient
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_runner import ExternalEnvRunner

pytestmark = pytest.mark.usefixtures("ray_session")


def free_ports(n: int) -> int:
    """A port ``p`` such that ``p .. p + n - 1`` were all free just now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + n > 65535:
            continue
        held = []
        try:
            for p in range(first, first + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                held.append(s)
            return first
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise AssertionError("no free ports")


@contextmanager
def cartpole_clients(addresses: list[str]) -> Iterator[list[PolicyClient]]:
    """One client thread per address, playing CartPole until the block ends."""
    stop = threading.Event()
    clients = [PolicyClient(a, reconnect_timeout_s=60) for a in addresses]

    def play(client: PolicyClient, seed: int) -> None:
        env = gym.make("CartPole-v1")
        k = 0
        while not stop.is_set():
            obs, _ = env.reset(seed=seed * 1000 + k)
            episode = client.start_episode()
            while not stop.is_set():
                obs, reward, terminated, truncated, _ = env.step(int(client.get_action(episode, obs)))
                client.log_returns(episode, float(reward))
                if terminated or truncated:
                    client.end_episode(episode, obs, truncated=truncated and not terminated)
                    break
            k += 1

    threads = [threading.Thread(target=play, args=(c, i), daemon=True) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    try:
        yield clients
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)


def test_each_runner_serves_its_port_and_a_killed_one_comes_back_there() -> None:
    port = free_ports(2)
    config = EnvRunnerConfig(
        env="CartPole-v1", num_envs_per_env_runner=1, rollout_fragment_length=40, external=ExternalConfig(port=port)
    )
    group_config = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5, sample_timeout_s=60)
    with EnvRunnerGroup(config, group_config) as group:
        addresses = ray.get([group.actor(i).address.remote() for i in (1, 2)])
        assert addresses == [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
        with cartpole_clients(addresses) as clients:
            results = group.sample_columnar()
            assert sorted((m.worker_index, m.num_env_steps) for _, m in results) == [(1, 40), (2, 40)]
            ray.kill(group.actor(1))
            results = group.sample_columnar()
            assert group.metrics.num_env_runner_restarts == 1
            assert sorted((m.worker_index, m.num_env_steps) for _, m in results) == [(1, 40), (2, 40)]
            assert clients[0].num_reconnects >= 1 and clients[1].num_reconnects == 0
            first = next(m for _, m in results if m.worker_index == 1)
            assert first.external is not None and first.external["num_clients_total"] == 1  # the new runner's


def test_a_runner_class_serves_external_clients_in_the_group() -> None:
    """The group builds ExternalEnvRunner actors from the config alone (what PPO, APPO and DQN use)."""
    port = free_ports(1)
    config = EnvRunnerConfig(env="CartPole-v1", rollout_fragment_length=10, external=ExternalConfig(port=port))
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)) as group:
        assert (
            ray.get(group.actor(1).__ray_call__.remote(lambda self: type(self).__name__)) == ExternalEnvRunner.__name__
        )
