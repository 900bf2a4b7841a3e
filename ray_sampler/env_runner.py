"""EnvRunner: steps a vector of sub-envs with a module and connector pipelines, returning episodes.

A plain class (the actor is ``ray.remote(EnvRunner)``). ``sample()`` follows the batch mode:

- ``truncate_episodes``: exactly ``rollout_fragment_length x num_envs`` env steps (or
  ``num_timesteps`` rounded *up* to a multiple of ``num_envs``); running episodes are cut with
  ``episode_lookback_horizon`` steps of lookback and continue in the next call. When a
  NEXT_STEP-autoreset vector env makes more steps than asked in the last vector step, the
  extra steps are kept for the next call: no env step is lost or returned twice.
- ``complete_episodes``: at least that many steps, finished episodes only; episodes still
  running keep going in the next call (nothing is thrown away, short episodes are not favoured).
- ``num_episodes=k``: exactly ``k`` finished episodes (extra finished ones wait for the next call).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np

from connectors.env_to_module import default_env_to_module
from connectors.module_to_env import default_module_to_env
from ray_sampler.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.columns import Columns
from ray_sampler.config import BatchMode, EnvRunnerConfig, VectorizationMode
from ray_sampler.env_creator import make_vector_env, sub_env_seeds
from ray_sampler.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.module import MLPModule, RandomModule
from ray_sampler.vector import VectorStepper

__all__ = ["EnvRunner"]


class EnvRunner:
    """Samples episodes from ``config.num_envs_per_env_runner`` sub-envs (see the module docstring)."""

    def __init__(self, config: EnvRunnerConfig, *, worker_index: int = 0, num_workers: int = 0) -> None:
        self.config = config
        self.worker_index = worker_index
        self.env = make_vector_env(config, worker_index=worker_index, num_workers=num_workers)
        self._stepper = VectorStepper(self.env)
        self.num_envs = self.env.num_envs
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        seq = np.random.SeedSequence([config.seed, worker_index]) if config.seed is not None else np.random.SeedSequence()
        policy_seed, random_seed, id_seed = (int(s.generate_state(1)[0]) for s in seq.spawn(3))
        module_class = config.module_class or MLPModule
        module_kwargs = dict(config.module_config)
        if module_class is MLPModule:
            module_kwargs.setdefault("seed", config.seed)
        self.module = module_class(self.observation_space, self.action_space, **module_kwargs)
        self._random_module = RandomModule(self.observation_space, self.action_space, seed=random_seed)
        self.env_to_module = default_env_to_module(self.observation_space, config.env_to_module_connectors)
        self.module_to_env = default_module_to_env(self.action_space, config.module_to_env_connectors,
                                                   seed=policy_seed, normalize_actions=config.normalize_actions)
        self._id_rng = np.random.default_rng(id_seed) if config.seed is not None else None
        self._episodes: list[SingleAgentEpisode] = []
        self._pending: list[SingleAgentEpisode] = []
        self._vector_obs: Any = None
        self._last_valid = np.ones(self.num_envs, dtype=bool)
        self._partial: dict[str, tuple[float, int]] = {}
        self._is_seeded = False
        self.weights_version = 0
        self.metrics: dict[str, Any] = {}

    # ---------------------------------------------------------------- episodes
    def _new_id(self) -> str:
        return self._id_rng.bytes(16).hex() if self._id_rng is not None else uuid.uuid4().hex

    def _new_episode(self, obs: Any, infos: dict) -> SingleAgentEpisode:
        ep = SingleAgentEpisode(self._new_id(), observation_space=self.observation_space, action_space=self.action_space)
        ep.add_env_reset(obs, infos)
        return ep

    def _reset(self) -> int:
        """Resets every sub-env; returns how many unfinished episodes with steps were dropped."""
        dropped = sum(1 for ep in self._episodes if len(ep) and not ep.is_done)
        if self.config.batch_mode is BatchMode.TRUNCATE_EPISODES:
            # Their steps go out as chunks with the next result, so none is lost.
            self._pending += [ep for ep in self._episodes if len(ep) and not ep.is_done]
            dropped = 0
        seeds: Any = None
        if not self._is_seeded:
            seeds = sub_env_seeds(self.config.seed, self.worker_index, self.num_envs)
            if seeds is not None and self.config.vectorization_mode is VectorizationMode.VECTOR_ENTRY_POINT:
                seeds = seeds[0]  # native vector envs take one seed and derive their sub-envs' from it
        self._is_seeded = True
        obs_rows, infos, self._vector_obs = self._stepper.reset(seeds)
        self._episodes = [self._new_episode(o, i) for o, i in zip(obs_rows, infos)]
        self._last_valid = np.ones(self.num_envs, dtype=bool)
        return dropped

    def _step(self, explore: bool, random_actions: bool) -> tuple[list[SingleAgentEpisode], int]:
        """One vector step through the pipelines; returns (episodes it finished, transitions made)."""
        episodes = self._episodes
        module = self.module
        shared: dict[str, Any] = {"vector_obs": self._vector_obs}
        batch = self.env_to_module(rl_module=module, batch={}, episodes=episodes, explore=explore, shared_data=shared)
        out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
        if random_actions:
            # Uniform actions, but the module's outputs are still recorded so every step of an
            # episode carries the same extra model outputs whichever way it was sampled.
            out[Columns.ACTIONS] = self._random_module.forward_inference(batch)[Columns.ACTIONS]
        out = self.module_to_env(rl_module=module, batch=out, episodes=episodes, explore=explore, shared_data=shared)
        actions = out.pop(Columns.ACTIONS)
        env_actions = out.pop(Columns.ACTIONS_FOR_ENV, actions)
        step = self._stepper.step(env_actions)
        finished = []
        # Per-sub-env values are pulled out once per step (C-level list/zip), not per access.
        extras = [dict(zip(out, values)) for values in zip(*(list(v) for v in out.values()))] if out else None
        rows = zip(episodes, step.next_obs, list(actions), step.rewards.tolist(), step.infos,
                   step.terminated.tolist(), step.truncated.tolist(), step.valid.tolist())
        for i, (ep, obs, action, reward, infos, terminated, truncated, valid) in enumerate(rows):
            if valid:
                ep.add_env_step(obs, action, reward, infos, terminated=terminated, truncated=truncated,
                                extra_model_outputs=extras[i] if extras else None)
                if terminated or truncated:
                    finished.append(ep)
        for i, (obs, infos) in step.resets.items():
            episodes[i] = self._new_episode(obs, infos)
        self._vector_obs = step.current_obs
        self._last_valid = step.valid
        return finished, int(step.valid.sum())

    # ---------------------------------------------------------------- sampling
    def sample(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[SingleAgentEpisode]:
        """Episodes (chunks) collected in this call, per the batch mode (see the module docstring)."""
        if num_timesteps is not None and num_episodes is not None:
            raise ConfigError("pass 'num_timesteps' or 'num_episodes', not both")
        for name, value in (("num_timesteps", num_timesteps), ("num_episodes", num_episodes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"'{name}' must be an int >= 1 or None (got {value!r})")
        t0 = time.perf_counter()
        dropped = self._reset() if force_reset or not self._episodes else 0
        if num_episodes is not None:
            out = self._sample_episodes(num_episodes, explore, random_actions)
        else:
            per_env = self.config.rollout_fragment_length if num_timesteps is None else -(-num_timesteps // self.num_envs)
            target = per_env * self.num_envs
            if self.config.batch_mode is BatchMode.TRUNCATE_EPISODES:
                out = self._sample_truncate(target, explore, random_actions)
            else:
                out = self._sample_complete(target, explore, random_actions)
        self._record_metrics(out, time.perf_counter() - t0, dropped)
        return out

    def _sample_truncate(self, target: int, explore: bool, random_actions: bool) -> list[SingleAgentEpisode]:
        out, self._pending = self._pending, []
        steps = sum(len(ep) for ep in out) + sum(len(ep) for ep in self._episodes if not ep.is_done)
        while steps < target:
            finished, made = self._step(explore, random_actions)
            out += finished
            steps += made
        excess = steps - target
        # Only a NEXT_STEP vector env can overshoot (some sub-envs spent the step on a reset):
        # the last step of `excess` sub-envs moves to the next call.
        carry = set(np.flatnonzero(self._last_valid)[::-1][:excess].tolist()) if excess else set()
        h = self.config.episode_lookback_horizon
        for i, ep in enumerate(self._episodes):
            if i in carry:
                if ep.is_done:
                    out.remove(ep)
                    self._pending.append(ep.slice(slice(len(ep) - 1, None), len_lookback_buffer=h))
                    head = ep.slice(slice(0, len(ep) - 1))
                    cont = None
                else:
                    head = ep.slice(slice(0, len(ep) - 1))
                    cont = ep.slice(slice(len(ep) - 1, None), len_lookback_buffer=h)
                if len(head):
                    out.append(head)
                if cont is not None:
                    self._episodes[i] = cont
            elif not ep.is_done:
                if len(ep):
                    out.append(ep)
                self._episodes[i] = ep.cut(len_lookback_buffer=h)
        return out

    def _sample_complete(self, target: int, explore: bool, random_actions: bool) -> list[SingleAgentEpisode]:
        out, self._pending = self._pending, []
        steps = sum(len(ep) for ep in out)
        while steps < target:
            finished, _ = self._step(explore, random_actions)
            out += finished
            steps += sum(len(ep) for ep in finished)
        return out

    def _sample_episodes(self, num_episodes: int, explore: bool, random_actions: bool) -> list[SingleAgentEpisode]:
        out = [ep for ep in self._pending if ep.is_done and ep.t_started == 0 and not ep.len_lookback_buffer]
        self._pending = [ep for ep in self._pending if ep not in out]
        while len(out) < num_episodes:
            finished, _ = self._step(explore, random_actions)
            out += finished
        self._pending += out[num_episodes:]
        return out[:num_episodes]

    def sample_columnar(self, **kwargs: Any) -> tuple[ColumnarEpisodes | None, dict[str, Any]]:
        """``sample()`` packed as one columnar object (what a remote runner ships), with the metrics."""
        episodes = self.sample(**kwargs)
        return (episodes_to_columnar(episodes) if episodes else None), self.metrics

    # ---------------------------------------------------------------- metrics and state
    def _record_metrics(self, out: list[SingleAgentEpisode], duration_s: float, dropped: int) -> None:
        returns, lengths = [], []
        for ep in out:
            prev_return, prev_len = self._partial.pop(ep.id_, (0.0, 0))
            total_return, total_len = prev_return + ep.get_return(), prev_len + len(ep)
            if ep.is_done:
                returns.append(total_return)
                lengths.append(total_len)
            else:
                self._partial[ep.id_] = (total_return, total_len)
        steps = sum(len(ep) for ep in out)
        self.metrics = {
            "worker_index": self.worker_index,
            "num_env_steps": steps,
            "num_agent_steps": steps,
            "num_episodes": len(returns),
            "episode_returns": returns,
            "episode_lengths": lengths,
            "num_episodes_dropped_by_reset": dropped,
            "duration_s": duration_s,
            "num_env_steps_per_s": steps / duration_s if duration_s > 0 else 0.0,
            "weights_version": self.weights_version,
        }

    def get_metrics(self) -> dict[str, Any]:
        """Metrics of the last ``sample()`` call."""
        return self.metrics

    def get_state(self) -> dict[str, Any]:
        """Module weights, connector state and the weights version."""
        return {
            "module": self.module.get_state(),
            "env_to_module": self.env_to_module.get_state(),
            "module_to_env": self.module_to_env.get_state(),
            "weights_version": self.weights_version,
        }

    def set_state(self, state: dict[str, Any]) -> int:
        """Loads any of ``get_state()``'s keys; returns the weights version now in use."""
        if "module" in state:
            self.module.set_state(state["module"])
        if "env_to_module" in state:
            self.env_to_module.set_state(state["env_to_module"])
        if "module_to_env" in state:
            self.module_to_env.set_state(state["module_to_env"])
        if "weights_version" in state:
            self.weights_version = int(state["weights_version"])
        return self.weights_version

    def drain(self) -> list[SingleAgentEpisode]:
        """Unfinished episodes and held-back steps that no ``sample()`` returned yet (for scale-down).

        Chunks with steps only; each is not done. The runner starts fresh afterwards.
        """
        out = [ep for ep in self._pending if len(ep)]
        out += [ep for ep in self._episodes if len(ep) and not ep.is_done]
        self._pending, self._episodes = [], []
        return out

    def ping(self) -> int:
        """Cheap liveness check; returns the worker index."""
        return self.worker_index

    def stop(self) -> None:
        self.env.close()
