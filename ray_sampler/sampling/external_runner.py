"""ExternalEnvRunner: an env runner whose episodes come from simulators outside Ray, over TCP.

It listens (``ExternalServer``, on ``config.external``'s host and ``port_of(worker_index)``) for
clients speaking the protocol of docs/external.md, acts for them (``remote`` inference, batched
over the clients waiting) or takes the steps they acted locally (``local``), and answers
``sample()`` with the same chunks as every runner (``ExternalEpisodes``: exact step counts in
``truncate_episodes`` with ``episode_lookback_horizon`` steps of lookback, whole episodes in
``complete_episodes``), so PPO, APPO and DQN train from it unchanged in an ``EnvRunnerGroup``.
A ``sample()`` waits until the connected clients made enough steps. The env the config names is
never stepped: only its spaces are used (``--external.spaces-from`` on the command line).

Episodes a client's disconnect ended count as ``num_episodes_dropped_env_error`` with their steps
in ``num_env_steps_dropped`` (as a failed sub-env's), local-mode chunks refused because their
episode is not held here count in ``num_env_steps_dropped`` too, and the server's own counts
(clients connected, dropped by reason, messages refused) are in ``RunnerMetrics.external``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from typing import Any

from connectors.env_to_module import default_env_to_module, env_to_module_observation_space
from connectors.module_to_env import default_module_to_env
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.spaces import check_space
from ray_sampler.errors import ConfigError
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.env_creator import probe_env
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_episodes import ExternalEpisodes
from ray_sampler.sampling.external_policy import ServedPolicy
from ray_sampler.sampling.external_server import ExternalServer
from ray_sampler.sampling.external_service import ExternalService, local_module_form
from ray_sampler.sampling.metrics import RunnerMetrics
from ray_sampler.sampling.replay_outbox import ReplayOutbox
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.runner_build import build_module, lookback_horizon
from ray_sampler.sampling.runner_calls import RunnerCalls
from ray_sampler.sampling.runner_tally import RunnerTally

__all__ = ["ExternalEnvRunner", "ExternalRunnerBase", "check_external"]


def check_external(config: EnvRunnerConfig) -> ExternalConfig:
    """``config.external``, once the rest of ``config`` suits an external runner (ConfigError if not)."""
    external = config.external
    if not isinstance(external, ExternalConfig):
        raise ConfigError(f"'external' must be an ExternalConfig or None (got {external!r})")
    if config.multi_agent is not None:
        raise ConfigError("'external': external clients serve single-agent episodes only (got a multi_agent config)")
    return external


class ExternalRunnerBase(RunnerCalls):
    """What the single- and multi-agent external runners share: their server and its lifecycle."""

    server: ExternalServer

    def _serve(self, external: ExternalConfig, service: Any) -> None:
        """Starts listening for ``service``'s clients (ConfigError if the port cannot be bound)."""
        name = f"external runner {self.worker_index}"
        self.server = ExternalServer(external, port=external.port_of(self.worker_index), service=service, name=name)
        self.server.start()
        self._stop = threading.Event()
        self._tally = RunnerTally(self.worker_index)
        self._outbox = ReplayOutbox()
        self.weights_version = 0

    def address(self) -> str:
        """``host:port`` clients connect to (the port a 0 in the config got)."""
        return f"{self.server.config.host}:{self.server.port}"

    def stop(self) -> None:
        """Closes the server and every client connection; a waiting ``sample()`` returns."""
        self._stop.set()
        self.server.stop()


class ExternalEnvRunner(ExternalRunnerBase):
    """Serves external clients and returns their episodes' chunks (see the module docstring)."""

    def __init__(self, config: EnvRunnerConfig, *, worker_index: int = 0, num_workers: int = 0) -> None:
        external = check_external(config)
        self.config = config
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.num_envs = config.num_envs_per_env_runner
        probe = probe_env(config.env, config.env_config)
        self.observation_space = check_space(probe.observation_space)
        self.action_space = probe.action_space
        module_space = env_to_module_observation_space(self.observation_space, config.env_to_module_connectors)
        module = build_module(config, module_space, self.action_space)
        if is_stateful(module):
            raise ConfigError(
                "'module_class': external clients need a stateless module (a recurrent one is not served yet)"
            )
        self.policy = ServedPolicy(
            module=module,
            env_to_module=default_env_to_module(self.observation_space, config.env_to_module_connectors),
            module_to_env=default_module_to_env(
                self.action_space, config.module_to_env_connectors, seed=_seed(config, worker_index),
                normalize_actions=config.normalize_actions,
            ),
        )  # fmt: skip
        self._is_truncating = config.batch_mode is BatchMode.TRUNCATE_EPISODES
        self.episodes = ExternalEpisodes(
            lookback=lookback_horizon(config),
            id_prefix=f"{uuid.uuid4().hex[:16]}{worker_index:04x}",
            truncate=self._is_truncating,
            observation_space=self.observation_space,
            action_space=self.action_space,
        )
        local_form = local_module_form(module, self.observation_space, config.env_to_module_connectors)
        self.service = ExternalService(
            episodes=self.episodes,
            policy=self.policy,
            observation_space=self.observation_space,
            action_space=self.action_space,
            max_held_env_steps=external.max_held_env_steps,
            local_form=local_form,
            local_refusal="clients act locally with the built-in MLP module on a flat Box observation, "
            "without env-to-module connectors",
        )
        self._serve(external, self.service)
        self._chunk_drops_reported = 0
        self.metrics = RunnerMetrics(worker_index=worker_index)

    # ---------------------------------------------------------------- sampling
    def sample(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
        *,
        timeout_s: float | None = None,
    ) -> list[SingleAgentEpisode]:
        """The clients' chunks for this call (see ``ExternalEpisodes.take``); waits for them, for at
        most ``timeout_s`` (None: as long as it takes; then TimeoutError, the steps still held).
        ``explore`` and ``random_actions`` are the clients' to choose, ``force_reset`` theirs to do."""
        request = SampleRequest(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        return self._collect(request, timeout_s=timeout_s)

    def _collect(self, request: SampleRequest, *, timeout_s: float | None = None) -> list[SingleAgentEpisode]:
        t0 = time.perf_counter()
        num_steps = None
        if request.num_episodes is None:
            num_steps = request.num_env_steps(
                rollout_fragment_length=self.config.rollout_fragment_length, num_envs=self.num_envs
            )
        out = self.episodes.take(
            num_steps=num_steps, num_episodes=request.num_episodes, stop=self._stop, timeout_s=timeout_s
        )
        episodes, steps, ids = self.episodes.take_drops()
        chunk_drops = self.service.num_chunk_steps_dropped
        steps += chunk_drops - self._chunk_drops_reported
        self._chunk_drops_reported = chunk_drops
        metrics = self._tally.record(
            out, time.perf_counter() - t0, 0, set(), (episodes, steps, ids), 0,
            weights_version=self.weights_version, fallback=None,
        )  # fmt: skip
        self.metrics = dataclasses.replace(metrics, external=self.server.stats.snapshot())
        return out

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """Module weights, connector states and the weights version (as ``EnvRunner.get_state``)."""
        return {**self.policy.get_state(), "weights_version": self.weights_version}

    def set_state(self, state: dict[str, Any]) -> int:
        """Loads any of ``get_state()``'s keys; local-mode clients learn of a new version in their next ack."""
        self.policy.set_state(state)
        if "weights_version" in state:
            self.weights_version = int(state["weights_version"])
            self.service.weights_version = self.weights_version
        return self.weights_version

    def drain(self) -> tuple[list[SingleAgentEpisode], int]:
        """What no ``sample()`` returned yet, for scale-down (as ``EnvRunner.drain``)."""
        held = self._take_outbox()
        out, dropped = self.episodes.drain()
        self._tally.clear()
        return held + out, dropped


def _seed(config: EnvRunnerConfig, worker_index: int) -> int | None:
    import numpy as np

    if config.seed is None:
        return None
    return int(np.random.SeedSequence([config.seed, worker_index]).generate_state(1)[0])
