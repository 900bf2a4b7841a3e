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

import dataclasses
import time
import uuid
from typing import Any

import numpy as np

from connectors.env_to_module import default_env_to_module
from connectors.module_to_env import default_module_to_env
from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, concat_columnar, episodes_to_columnar
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.modules import MLPModule, RandomModule
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig, VectorizationMode
from ray_sampler.sampling.env_creator import make_vector_env, sub_env_seeds
from ray_sampler.sampling.rollout import CursorBatch, StepRecord, harvest
from ray_sampler.sampling.vector import VectorStepper

__all__ = ["EnvRunner", "build_module"]


def build_module(config: EnvRunnerConfig, observation_space: Any, action_space: Any) -> Any:
    """The runner's module: ``module_class(observation_space, action_space, **module_config)``."""
    module_class = config.module_class or MLPModule
    kwargs = dict(config.module_config)
    if module_class is MLPModule:
        kwargs.setdefault("seed", config.seed)
    try:
        module = module_class(observation_space, action_space, **kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"'module_class' {getattr(module_class, '__name__', module_class)!r} with 'module_config' "
            f"{config.module_config!r} could not be built for {observation_space} / {action_space}: {e}"
        ) from e
    missing = [
        m
        for m in ("forward_inference", "forward_exploration", "get_state", "set_state")
        if not callable(getattr(module, m, None))
    ]
    if missing:
        raise ConfigError(f"'module_class' must build an RLModule; {type(module).__name__} lacks {missing}")
    return module


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
        seq = (
            np.random.SeedSequence([config.seed, worker_index]) if config.seed is not None else np.random.SeedSequence()
        )
        policy_seed, random_seed, id_seed = (int(s.generate_state(1)[0]) for s in seq.spawn(3))
        self.module = build_module(config, self.observation_space, self.action_space)
        self._random_module = RandomModule(self.observation_space, self.action_space, seed=random_seed)
        self.env_to_module = default_env_to_module(self.observation_space, config.env_to_module_connectors)
        self.module_to_env = default_module_to_env(
            self.action_space,
            config.module_to_env_connectors,
            seed=policy_seed,
            normalize_actions=config.normalize_actions,
        )
        # Episode ids: a per-runner random prefix (seeded, so reruns repeat it) and a counter.
        prefix = np.random.default_rng(id_seed).bytes(8).hex() if config.seed is not None else uuid.uuid4().hex[:16]
        self._id_prefix = f"{prefix}{worker_index:04x}"
        self._id_counter = 0
        # Each sub-env's ongoing episode: as SingleAgentEpisodes (episode path) or, after a columnar
        # call, as one CursorBatch; whichever path runs next converts them (rarely: on a switch).
        self._episodes: list[SingleAgentEpisode] = []
        self._cursors: CursorBatch | None = None
        self._is_started = False
        self._pending: list[SingleAgentEpisode] = []
        self._vector_obs: Any = None
        self._last_valid = np.ones(self.num_envs, dtype=bool)
        self._carry: StepRecord | None = None
        self._last_stepped: list[SingleAgentEpisode | None] = [None] * self.num_envs
        self._columnar = (
            config.columnar_sampling
            and config.batch_mode is BatchMode.TRUNCATE_EPISODES
            and not config.env_to_module_connectors
            and not config.module_to_env_connectors
        )
        self._partial: dict[str, tuple[float, int]] = {}
        self._abandoned: set[str] = set()
        self._is_seeded = False
        self.weights_version = 0
        self.metrics: dict[str, Any] = {}

    # ---------------------------------------------------------------- episodes
    def _new_id(self) -> str:
        self._id_counter += 1
        return f"{self._id_prefix}{self._id_counter:012x}"

    def _new_episode(self, obs: Any, infos: dict) -> SingleAgentEpisode:
        ep = SingleAgentEpisode(
            self._new_id(), observation_space=self.observation_space, action_space=self.action_space
        )
        ep.add_env_reset(obs, infos)
        return ep

    def _episode_cursors(self) -> None:
        """Makes the SingleAgentEpisode cursors current (after columnar calls)."""
        if self._cursors is not None:
            self._episodes, self._cursors = self._cursors.to_episodes(), None

    def _reset(self) -> int:
        """Resets every sub-env; returns how many unfinished episodes with steps were dropped."""
        self._replay_carry()
        dropped = sum(1 for ep in self._episodes if len(ep) and not ep.is_done)
        # These episodes never continue: their metric accumulators go after this call's results.
        self._abandoned = {ep.id_ for ep in self._episodes if not ep.is_done}
        if self.config.batch_mode is BatchMode.TRUNCATE_EPISODES:
            # Their steps go out as chunks with this call's result, so none is lost.
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
        self._is_started = True
        return dropped

    def _forward(self, explore: bool, random_actions: bool) -> tuple[Any, Any, dict[str, Any]]:
        """Connectors and module for the current observations: (actions, env actions, other outputs)."""
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
        return actions, out.pop(Columns.ACTIONS_FOR_ENV, actions), out

    def _record(self, explore: bool, random_actions: bool) -> StepRecord:
        """One vector step for the columnar path: no per-sub-env Python work."""
        actions, env_actions, extras = self._forward(explore, random_actions)
        step = self._stepper.step(env_actions)
        self._vector_obs = step.current_obs
        return StepRecord(step, actions, extras, step.valid)

    def _step(self, explore: bool, random_actions: bool) -> tuple[list[SingleAgentEpisode], int]:
        """One vector step for the episode path; returns (episodes it finished, transitions made)."""
        actions, env_actions, out = self._forward(explore, random_actions)
        return self._apply(self._stepper.step(env_actions), actions, out, None)

    def _apply(
        self,
        step: Any,
        actions: Any,
        out: dict[str, Any],
        only: np.ndarray | None,
    ) -> tuple[list[SingleAgentEpisode], int]:
        """Adds a vector step's transitions (those in ``only``, default all valid) to the episodes."""
        episodes = self._episodes
        valid = step.valid if only is None else only
        finished = []
        # Per-sub-env values are pulled out once per step (C-level list/zip), not per access.
        extras = [dict(zip(out, values)) for values in zip(*(list(v) for v in out.values()))] if out else None
        rows = zip(
            episodes,
            step.next_obs_rows(),
            list(actions),
            step.rewards.tolist(),
            step.info_rows(),
            step.terminated.tolist(),
            step.truncated.tolist(),
            valid.tolist(),
        )
        for i, (ep, obs, action, reward, infos, terminated, truncated, made_step) in enumerate(rows):
            if made_step:
                self._last_stepped[i] = ep
                ep.add_env_step(
                    obs,
                    action,
                    reward,
                    infos,
                    terminated=terminated,
                    truncated=truncated,
                    extra_model_outputs=extras[i] if extras else None,
                )
                if terminated or truncated:
                    finished.append(ep)
        for i, (obs, infos) in step.resets.items():
            episodes[i] = self._new_episode(obs, infos)
        if only is None:
            self._vector_obs = step.current_obs
            self._last_valid = step.valid
        return finished, int(valid.sum())

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
        result = self._sample(num_timesteps, num_episodes, explore, random_actions, force_reset)
        if isinstance(result, list):
            return result
        return columnar_to_episodes(result) if result is not None else []

    def sample_columnar(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> tuple[ColumnarEpisodes | None, dict[str, Any]]:
        """``sample()`` as one columnar object (what a remote runner ships), with the call's metrics."""
        result = self._sample(num_timesteps, num_episodes, explore, random_actions, force_reset)
        if isinstance(result, list):
            result = episodes_to_columnar(result) if result else None
        return result, self.metrics

    def sample_to(
        self,
        replay: Any,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> dict[str, Any]:
        """``sample_columnar()`` sent straight to a replay actor (or a local ReplayActor); returns the
        call's metrics with the replay's acknowledgement under ``"replay"``: the chunks count as
        delivered only once stored."""
        col, metrics = self.sample_columnar(num_timesteps, num_episodes, explore, random_actions, force_reset)
        if hasattr(replay.add, "remote"):
            import ray

            ack = ray.get(replay.add.remote(col))
        else:
            ack = replay.add(col)
        return {**metrics, "replay": ack}

    def _sample(
        self,
        num_timesteps: int | None,
        num_episodes: int | None,
        explore: bool,
        random_actions: bool,
        force_reset: bool,
    ) -> list[SingleAgentEpisode] | ColumnarEpisodes | None:
        if num_timesteps is not None and num_episodes is not None:
            raise ConfigError("pass 'num_timesteps' or 'num_episodes', not both")
        for name, value in (("num_timesteps", num_timesteps), ("num_episodes", num_episodes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"'{name}' must be an int >= 1 or None (got {value!r})")
        t0 = time.perf_counter()
        dropped = self._reset() if force_reset or not self._is_started else 0
        per_env = self.config.rollout_fragment_length if num_timesteps is None else -(-num_timesteps // self.num_envs)
        target = per_env * self.num_envs
        result: list[SingleAgentEpisode] | ColumnarEpisodes | None
        if num_episodes is None and self._columnar:
            result = self._sample_columnar(target, explore, random_actions)
        else:
            self._replay_carry()
            if num_episodes is not None:
                result = self._sample_episodes(num_episodes, explore, random_actions)
            elif self.config.batch_mode is BatchMode.TRUNCATE_EPISODES:
                result = self._sample_truncate(target, explore, random_actions)
            else:
                result = self._sample_complete(target, explore, random_actions)
        self._record_metrics(result, time.perf_counter() - t0, dropped)
        return result

    def _sample_columnar(self, target: int, explore: bool, random_actions: bool) -> ColumnarEpisodes | None:
        """Truncate mode, recording whole vector steps (see ray_sampler.sampling.rollout)."""
        h = self.config.episode_lookback_horizon
        flushed: list[SingleAgentEpisode] = []
        steps = 0
        if self._cursors is None or self._pending:  # the episode path (or an early return) left steps
            flushed, steps = self._take(self._leftovers(), target)
            if self._cursors is None:
                self._cursors, self._episodes = CursorBatch.from_episodes(self._episodes), []
            if steps == target:
                return episodes_to_columnar(flushed) if flushed else None
        records = [self._carry] if self._carry is not None else []
        self._carry = None
        steps += sum(int(r.valid.sum()) for r in records)
        while steps < target:
            records.append(self._record(explore, random_actions))
            steps += int(records[-1].valid.sum())
        excess = steps - target
        if excess:
            # A NEXT_STEP vector env made more steps than asked: the last step of `excess`
            # sub-envs waits for the next call (as a record of its own), never dropped.
            # A reset in the same step as a carried episode end belongs after it, so it goes along.
            last = records[-1]
            carried = set(np.flatnonzero(last.valid)[::-1][:excess].tolist())
            keep, carry = last.valid.copy(), np.zeros_like(last.valid)
            keep[list(carried)], carry[list(carried)] = False, True
            resets = last.step.resets
            records[-1] = StepRecord(
                dataclasses.replace(last.step, resets={i: r for i, r in resets.items() if i not in carried}),
                last.actions,
                last.extras,
                keep,
            )
            self._carry = StepRecord(
                dataclasses.replace(last.step, resets={i: r for i, r in resets.items() if i in carried}),
                last.actions,
                last.extras,
                carry,
            )
        parts = [episodes_to_columnar(flushed)] if flushed else []
        if records:
            col, self._cursors = harvest(records, self._cursors, lookback=h, new_id=self._new_id)
            if col is not None:
                parts.append(col)
        return concat_columnar(parts) if parts else None

    def _replay_carry(self) -> None:
        """Adds steps held back by the columnar path to the episodes, before the episode path runs."""
        self._episode_cursors()
        if self._carry is not None:
            record, self._carry = self._carry, None
            finished, _ = self._apply(record.step, record.actions, record.extras, record.valid)
            self._pending += finished

    def _leftovers(self) -> list[SingleAgentEpisode]:
        """Steps made but not returned yet, as chunks in order; running episodes become zero-step
        continuations (episode form only: after a columnar call none holds steps)."""
        out, self._pending = self._pending, []
        if self._cursors is None:
            for i, ep in enumerate(self._episodes):
                if len(ep) and not ep.is_done:
                    out.append(ep)
                    self._episodes[i] = ep.cut(len_lookback_buffer=self.config.episode_lookback_horizon)
        return out

    def _take(self, chunks: list[SingleAgentEpisode], target: int) -> tuple[list[SingleAgentEpisode], int]:
        """At most ``target`` steps of ``chunks`` in order, a chunk split at any step if needed; the
        rest waits for the next call."""
        out, steps = [], 0
        for k, ep in enumerate(chunks):
            if steps + len(ep) <= target:
                out.append(ep)
                steps += len(ep)
                continue
            keep = target - steps
            if keep:
                out.append(ep.slice(slice(0, keep)))
                steps += keep
                ep = ep.slice(slice(keep, None), len_lookback_buffer=self.config.episode_lookback_horizon)
            self._pending = [ep, *chunks[k + 1 :], *self._pending]
            break
        return out, steps

    def _sample_truncate(self, target: int, explore: bool, random_actions: bool) -> list[SingleAgentEpisode]:
        running = sum(len(ep) for ep in self._episodes if not ep.is_done)
        if sum(len(ep) for ep in self._pending) + running >= target:
            # Earlier calls left at least this call's worth (num_episodes calls can): no env step.
            return self._take(self._leftovers(), target)[0]
        out, self._pending = self._pending, []
        steps = sum(len(ep) for ep in out) + running
        while steps < target:
            finished, made = self._step(explore, random_actions)
            out += finished
            steps += made
        excess = steps - target
        # The last vector step can make more steps than asked (a NEXT_STEP env spent some on
        # resets, or the leftovers were no multiple of num_envs): the last step of `excess`
        # sub-envs moves to the next call.
        carry = set(np.flatnonzero(self._last_valid)[::-1][:excess].tolist()) if excess else set()
        h = self.config.episode_lookback_horizon
        for i, ep in enumerate(self._episodes):
            if i in carry:
                # The episode that took sub-env i's last step (under SAME_STEP autoreset a fresh
                # one may already hold its slot) gives that step to the next call.
                stepped = self._last_stepped[i]
                head = stepped.slice(slice(0, len(stepped) - 1))
                tail = stepped.slice(slice(len(stepped) - 1, None), len_lookback_buffer=h)
                if stepped.is_done:
                    out.remove(stepped)
                    self._pending.append(tail)
                else:
                    assert stepped is ep, "a running episode that stepped holds its sub-env's slot"
                    self._episodes[i] = tail
                if len(head):
                    out.append(head)
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
        """Exactly ``num_episodes`` whole episodes (reset to end). In truncate mode an episode whose
        first steps earlier calls returned finishes as a chunk: it goes out with the next call."""

        def is_whole(ep: SingleAgentEpisode) -> bool:
            return ep.is_done and ep.t_started == 0 and not ep.len_lookback_buffer

        out = [ep for ep in self._pending if is_whole(ep)]
        self._pending = [ep for ep in self._pending if not is_whole(ep)]
        while len(out) < num_episodes:
            finished, _ = self._step(explore, random_actions)
            for ep in finished:
                (out if is_whole(ep) else self._pending).append(ep)
        self._pending += out[num_episodes:]
        return out[:num_episodes]

    # ---------------------------------------------------------------- metrics and state
    def _record_metrics(
        self, result: list[SingleAgentEpisode] | ColumnarEpisodes | None, duration_s: float, dropped: int
    ) -> None:
        if isinstance(result, ColumnarEpisodes):
            sums = np.concatenate([[0.0], np.cumsum(result.data.rewards, dtype=np.float64)])
            offsets = result.step_offsets
            chunks = zip(
                result.ids,
                (sums[offsets[1:]] - sums[offsets[:-1]]).tolist(),
                result.lens.tolist(),
                (result.terminated | result.truncated).tolist(),
            )
        else:
            chunks = ((ep.id_, ep.get_return(), len(ep), ep.is_done) for ep in result or [])
        returns, lengths, steps = [], [], 0
        for id_, chunk_return, chunk_len, is_done in chunks:
            steps += chunk_len
            prev_return, prev_len = self._partial.pop(id_, (0.0, 0))
            total_return, total_len = prev_return + chunk_return, prev_len + chunk_len
            if is_done:
                returns.append(total_return)
                lengths.append(total_len)
            else:
                self._partial[id_] = (total_return, total_len)
        for id_ in self._abandoned:
            self._partial.pop(id_, None)
        self._abandoned = set()
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

    def drain(self) -> tuple[list[SingleAgentEpisode], int]:
        """What no ``sample()`` returned yet, for scale-down: (chunks to ship, episodes dropped).

        Truncate mode ships every step made (running episodes as unfinished chunks). Complete
        mode ships only whole finished episodes; running ones are dropped and counted, as that
        mode never returns part of an episode. The runner starts fresh afterwards.
        """
        self._replay_carry()
        out = [ep for ep in self._pending if len(ep)]
        running = [ep for ep in self._episodes if len(ep) and not ep.is_done]
        dropped = 0
        if self.config.batch_mode is BatchMode.TRUNCATE_EPISODES:
            out += running
        else:
            dropped = len(running)
        self._pending, self._episodes, self._is_started = [], [], False
        self._partial.clear()
        return out, dropped

    def ping(self) -> int:
        """Cheap liveness check; returns the worker index."""
        return self.worker_index

    def stop(self) -> None:
        self.env.close()
