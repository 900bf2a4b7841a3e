"""ExternalMultiAgentEnvRunner: external clients whose episodes have several agents (per-agent dicts).

The config names a multi-agent env (``--external.spaces-from ma-cartpole:2``, a PettingZoo game):
its agents' spaces and the run's modules and mapping (``config.multi_agent``) are the clients'.
A client speaks the single-agent messages with per-agent dicts (docs/external.md): ``get_action``'s
``observation`` is ``{agent: observation}`` for the agents to act (and optional ``terminateds`` /
``truncateds`` for agents that leave), its answer ``{agent: action}``; ``log_returns`` takes
``{agent: reward}``; ``end_episode`` the last observations. Each module acts for its agents in one
forward pass. Remote inference only. The chunks are ``MultiAgentEpisode``s, as a
``MultiAgentEnvRunner``'s (``ExternalMultiAgentEpisodes`` says how they are cut).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Hashable
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.client.protocol import ProtocolError
from ray_sampler.data.multi_agent_columnar import multi_agent_episodes_to_columnar
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError, MultiAgentEnvError
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_ma_episodes import ExternalMultiAgentEpisodes
from ray_sampler.sampling.external_runner import ExternalRunnerBase
from ray_sampler.sampling.external_service import ExternalService, Session
from ray_sampler.sampling.external_values import from_wire, to_wire
from ray_sampler.sampling.multi_agent_env_runner import (
    ModulePolicy,
    MultiAgentRunnerMetrics,
    effective_multi_agent,
    make_multi_agent_sub_env,
    module_build_config,
    module_spaces,
)
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.runner_build import view_lookback_steps

__all__ = ["ExternalMultiAgentEnvRunner"]


class _MultiAgentService(ExternalService):
    """The per-agent-dict form of the remote-inference messages (see the module docstring)."""

    def __init__(self, *, runner: ExternalMultiAgentEnvRunner, max_held_env_steps: int) -> None:
        agents = runner.possible_agents
        super().__init__(
            episodes=runner.episodes,  # type: ignore[arg-type]  # the multi-agent form: its own calls below
            policy=None,  # type: ignore[arg-type]  # every module acts through ``runner.policies``
            observation_space=gym.spaces.Dict({str(a): runner.observation_spaces[a] for a in agents}),
            action_space=gym.spaces.Dict({str(a): runner.action_spaces[a] for a in agents}),
            max_held_env_steps=max_held_env_steps,
            local_form=None,
            local_refusal="a multi-agent runner acts for its clients (remote inference only)",
        )
        self.runner = runner
        self.ma_episodes = runner.episodes
        self._agents = {str(a): a for a in agents}

    def _agent_dict(self, value: Any, what: str, spaces: dict[Hashable, gym.Space] | None) -> dict[Hashable, Any]:
        if not isinstance(value, dict):
            raise ProtocolError(f"{what!r} must be an object of agent ids (a multi-agent runner)")
        out = {}
        for name, v in value.items():
            aid = self._agents.get(name)
            if aid is None:
                raise ProtocolError(f"{what!r}: unknown agent {name!r} (agents: {sorted(self._agents)})")
            out[aid] = from_wire(spaces[aid], v, f"{what}.{name}") if spaces is not None else v
        return out

    def _flags(self, message: dict[str, Any], name: str) -> dict[Hashable, bool]:
        value = message.get(name) or {}
        flags = {k: v for k, v in value.items() if k == "__all__"} if isinstance(value, dict) else {}
        rest = (
            self._agent_dict({k: v for k, v in value.items() if k != "__all__"}, name, None) if flags != value else {}
        )
        if not all(isinstance(v, bool) for v in [*flags.values(), *rest.values()]):
            raise ProtocolError(f"{name!r} must map agent ids to true or false")
        return {**rest, **flags}

    async def _get_action(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        handle = self._handle(session, message)
        obs = self._agent_dict(message.get("observation"), "observation", self.runner.observation_spaces)
        explore = message.get("explore", True)
        if not isinstance(explore, bool):
            raise ProtocolError(f"'explore' must be true or false (got {explore!r})")
        terminateds, truncateds = self._flags(message, "terminateds"), self._flags(message, "truncateds")
        if self.ma_episodes.is_running(self._key(session, handle)):
            self._fold_reward(session, handle, message)
        await self._wait_for_room(session)
        key = self._key(session, handle)
        try:
            if self.ma_episodes.is_running(key):
                if self.ma_episodes.step(key, obs, terminateds=terminateds, truncateds=truncateds):
                    session.open.discard(handle)
                    return {"type": "action", "action": {}}
            else:
                self.ma_episodes.begin(key, obs)
        except MultiAgentEnvError as e:
            raise ProtocolError(str(e).splitlines()[0]) from None
        ep = self.ma_episodes.current(key)
        acting = [a for a in obs if not (terminateds.get(a) or truncateds.get(a))]
        actions, for_env, extras = self.runner.act(ep, {a: obs[a] for a in acting}, explore=explore)
        self.ma_episodes.act(key, actions, extras)
        return {"type": "action", "action": {str(a): to_wire(v) for a, v in for_env.items()}}

    def _take_reward(self, session: Session, handle: str, message: dict[str, Any]) -> None:
        rewards = self._agent_dict(message.get("reward", {}), "reward", None)
        if not all(not isinstance(r, bool) and isinstance(r, int | float) and np.isfinite(r) for r in rewards.values()):
            raise ProtocolError("'reward' must map agent ids to finite numbers")
        key = self._key(session, handle)
        if not self.ma_episodes.is_running(key):
            raise ProtocolError(f"episode {handle!r} has no observation yet to reward (call get_action first)")
        self.ma_episodes.log_reward(key, {a: float(r) for a, r in rewards.items()})

    async def _end_episode(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        handle = self._handle(session, message)
        obs = self._agent_dict(message.get("observation") or {}, "observation", self.runner.observation_spaces)
        truncated = message.get("truncated", False)
        if not isinstance(truncated, bool):
            raise ProtocolError(f"'truncated' must be true or false (got {truncated!r})")
        key = self._key(session, handle)
        if self.ma_episodes.is_running(key):
            self._fold_reward(session, handle, message)
        session.open.discard(handle)
        if self.ma_episodes.is_running(key):
            flags: dict[Hashable, bool] = {"__all__": True}
            try:
                self.ma_episodes.step(
                    key, obs, terminateds={} if truncated else flags, truncateds=flags if truncated else {}
                )
            except MultiAgentEnvError as e:
                self.ma_episodes.drop([key])
                raise ProtocolError(str(e).splitlines()[0]) from None
        return {"type": "ok"}

    async def _log_action(self, session: Session, message: dict[str, Any]) -> dict[str, Any]:
        raise ProtocolError("'log_action' is not served for multi-agent episodes yet")


class ExternalMultiAgentEnvRunner(ExternalRunnerBase):
    """Serves external multi-agent clients (see the module docstring)."""

    def __init__(self, config: EnvRunnerConfig, *, worker_index: int = 0, num_workers: int = 0) -> None:
        external = config.external
        if not isinstance(external, ExternalConfig) or config.multi_agent is None:
            raise ConfigError("ExternalMultiAgentEnvRunner needs 'external' and 'multi_agent' in its config")
        self.config, self.worker_index, self.num_workers = config, worker_index, num_workers
        env = make_multi_agent_sub_env(config, worker_index=worker_index, vector_index=0, num_workers=num_workers)
        try:
            self.ma_config = effective_multi_agent(config, env)
            self.possible_agents = list(env.possible_agents)
            self.observation_spaces = {a: env.get_observation_space(a) for a in self.possible_agents}
            self.action_spaces = {a: env.get_action_space(a) for a in self.possible_agents}
            spaces = module_spaces(env, self.ma_config)
        finally:
            env.close()
        seq = (
            np.random.SeedSequence([config.seed, worker_index]) if config.seed is not None else np.random.SeedSequence()
        )
        seeds = [int(s.generate_state(1)[0]) for s in seq.spawn(len(self.ma_config.module_ids))]
        self.policies = {
            mid: ModulePolicy(module_build_config(config, self.ma_config, mid), *spaces[mid], seed)
            for mid, seed in zip(self.ma_config.module_ids, seeds)
        }
        if any(p.initial_state is not None for p in self.policies.values()):
            raise ConfigError(
                "'module_class': external clients need stateless modules (a recurrent one is not served yet)"
            )
        self._lock = threading.Lock()
        self.episodes = ExternalMultiAgentEpisodes(
            lookback=config.episode_lookback_horizon or 0,
            agent_lookback=view_lookback_steps(config.env_to_module_connectors) or 0,
            id_prefix=f"{uuid.uuid4().hex[:16]}{worker_index:04x}",
            truncate=config.batch_mode is BatchMode.TRUNCATE_EPISODES,
            batch_steps=config.rollout_fragment_length * config.num_envs_per_env_runner,
            observation_spaces=self.observation_spaces,
            action_spaces=self.action_spaces,
            map_agent=self.ma_config.map_agent,
        )
        self.service = _MultiAgentService(runner=self, max_held_env_steps=external.max_held_env_steps)
        self._serve(external, self.service)
        self.metrics: MultiAgentRunnerMetrics = MultiAgentRunnerMetrics(worker_index=worker_index)

    def act(
        self, ep: MultiAgentEpisode, obs: dict[Hashable, Any], *, explore: bool
    ) -> tuple[dict[Hashable, Any], dict[Hashable, Any], dict[Hashable, dict[str, Any]]]:
        """Every module's actions for its agents in ``obs`` (one forward pass per module)."""
        by_module: dict[str, list[Hashable]] = {}
        for aid in obs:
            by_module.setdefault(ep.module_for(aid), []).append(aid)
        actions, for_env, extras = {}, {}, {}
        with self._lock:
            for mid, agents in by_module.items():
                policy = self.policies[mid]
                batch = np.stack([np.asarray(obs[a]) for a in agents]) if agents else None
                acts, env_acts, out = policy.act(
                    batch, [ep.agent_episodes[a] for a in agents], None, explore=explore, random_actions=False
                )
                rows = [dict(zip(out, values)) for values in zip(*out.values())] if out else [{} for _ in agents]
                for k, aid in enumerate(agents):
                    actions[aid], for_env[aid], extras[aid] = acts[k], env_acts[k], rows[k]
        return actions, for_env, extras

    # ---------------------------------------------------------------- sampling
    def sample(
        self, num_timesteps: int | None = None, num_episodes: int | None = None, *, timeout_s: float | None = None
    ) -> list[MultiAgentEpisode]:
        """The clients' chunks for one call (``rollout_fragment_length x num_envs_per_env_runner`` env
        steps, or ``num_episodes`` episodes); waits for them, at most ``timeout_s`` (None: no limit)."""
        return self._collect(SampleRequest(num_timesteps=num_timesteps, num_episodes=num_episodes), timeout_s=timeout_s)

    def _collect(self, request: SampleRequest, *, timeout_s: float | None = None) -> list[MultiAgentEpisode]:  # type: ignore[override]
        batch_steps = self.config.rollout_fragment_length * self.config.num_envs_per_env_runner
        if request.num_timesteps is not None and request.num_timesteps != batch_steps:
            raise ConfigError(
                f"'num_timesteps': an external multi-agent runner returns its batches of {batch_steps} env steps "
                f"(rollout_fragment_length x num_envs_per_env_runner; got {request.num_timesteps})"
            )
        t0 = time.perf_counter()
        out = self.episodes.take(num_episodes=request.num_episodes, stop=self._stop, timeout_s=timeout_s)
        self.metrics = self._metrics(out, time.perf_counter() - t0)
        return out

    def _metrics(self, out: list[MultiAgentEpisode], duration_s: float) -> MultiAgentRunnerMetrics:
        returns, lengths = [], []
        agent_returns: dict[Hashable, list[float]] = {}
        module_returns: dict[str, list[float]] = {}
        module_steps: dict[str, int] = {}
        for ep in out:
            for aid, sa in ep.agent_episodes.items():
                mid = ep.module_for(aid)
                module_steps[mid] = module_steps.get(mid, 0) + len(sa)
            if not ep.is_done:
                continue
            sums = self.episodes.finished_sums.pop(ep.id_, {})
            returns.append(float(sum(sums.values())))
            lengths.append(ep.env_t)
            per_module: dict[str, float] = {}
            for aid, r in sums.items():
                agent_returns.setdefault(aid, []).append(r)
                per_module[ep.module_for(aid)] = per_module.get(ep.module_for(aid), 0.0) + r
            for mid, r in per_module.items():
                module_returns.setdefault(mid, []).append(r)
        episodes, steps_dropped, ids = self.episodes.take_drops()
        env_steps = sum(len(ep) for ep in out)
        return MultiAgentRunnerMetrics(
            worker_index=self.worker_index,
            num_env_steps=env_steps,
            num_agent_steps=sum(ep.agent_steps() for ep in out),
            num_episodes=len(returns),
            episode_returns=returns,
            episode_lengths=lengths,
            agent_episode_returns=agent_returns,
            module_episode_returns=module_returns,
            num_module_steps=module_steps,
            num_episodes_dropped_env_error=episodes,
            num_env_steps_dropped=steps_dropped,
            ended_episode_ids=ids,
            duration_s=duration_s,
            num_env_steps_per_s=env_steps / duration_s if duration_s > 0 else 0.0,
            weights_version=self.weights_version,
            external=self.server.stats.snapshot(),
        )

    def _to_columnar(self, episodes: list[Any]) -> Any:
        return multi_agent_episodes_to_columnar(episodes)

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "module": {mid: p.module.get_state() for mid, p in self.policies.items()},
                "env_to_module": {mid: p.env_to_module.get_state() for mid, p in self.policies.items()},
                "module_to_env": {},
                "weights_version": self.weights_version,
            }

    def set_state(self, state: dict[str, Any]) -> int:
        import ray

        with self._lock:
            for mid, weights in state.get("module", {}).items():
                if mid in self.policies:
                    self.policies[mid].module.set_state(
                        ray.get(weights) if isinstance(weights, ray.ObjectRef) else weights
                    )
            for mid, pipeline in state.get("env_to_module", {}).items():
                if mid in self.policies:
                    self.policies[mid].env_to_module.set_state(pipeline)
        if "weights_version" in state:
            self.weights_version = int(state["weights_version"])
        return self.weights_version

    def drain(self) -> tuple[list[MultiAgentEpisode], int]:
        held = self._take_outbox()
        out, dropped = self.episodes.drain()
        return [*held, *out], dropped  # type: ignore[list-item]
