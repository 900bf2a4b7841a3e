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

The runner builds its parts and orchestrates them: a ``StepRecorder`` (connectors, module and
vector env), the ``OngoingEpisodes`` it keeps between calls, and two engines (``engines``), the
vectorized one for plain truncate-mode calls (default connectors, and env-to-module pieces that
keep the ``EnvToModulePiece`` contract), the per-step one otherwise (a config whose pieces break
that contract is named in ``vectorized_fallback``, logged and counted in ``num_fallback_calls``);
every call's arguments travel as one ``SampleRequest``. What it derives from its config (module,
lookback, engine choice) is in ``runner_build``; its episodes' sums across calls and each call's
metrics in ``RunnerTally``; the chunks a dead replay actor did not take in ``ReplayOutbox``.

Episode ids are a random per-runner prefix (uuid4, never seeded), the worker index and a counter,
so two runs with the same seed never share an id in one replay; a seeded rerun gives the same
data, ids aside.

Sub-env failures (``restart_failed_sub_environments``): with restarts on, the vector env rebuilds
what raised (one sub-env in sync mode, the whole native vector env otherwise; see ``vector``) and
the engines drop the ended episodes' unshipped steps, counted in ``num_episodes_dropped_env_error``
and ``num_env_steps_dropped``. With restarts off, ``sample()`` raises ``EnvError``; the vector env
is then half-stepped, so the next call closes it, builds a new one (fresh seed streams), drops
everything the runner held or made in the failed call (counted in that next call's metrics) and
starts every sub-env from a reset: nothing from before the failure is ever shipped after it.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import Any

import numpy as np

from connectors.env_to_module import default_env_to_module, env_to_module_observation_space
from connectors.module_to_env import default_module_to_env
from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.spaces import check_space
from ray_sampler.errors import EnvError
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.engines import Collected, PerStepEngine, SamplingEngine, VectorizedEngine
from ray_sampler.sampling.env_creator import make_vector_env, sub_env_seeds
from ray_sampler.sampling.horizon import EpisodeEnds
from ray_sampler.sampling.metrics import RunnerMetrics
from ray_sampler.sampling.ongoing import OngoingEpisodes
from ray_sampler.sampling.recorder import StepRecorder
from ray_sampler.sampling.replay_outbox import ReplayOutbox
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.runner_build import (
    build_module,
    lookback_horizon,
    set_torch_threads,
    vectorized_fallback,
    view_lookback_steps,
)
from ray_sampler.sampling.runner_calls import RunnerCalls, pipeline_state, set_pipeline_state
from ray_sampler.sampling.runner_tally import RunnerTally
from ray_sampler.sampling.sub_envs import SubEnvVector
from ray_sampler.sampling.vector import VectorStepper

__all__ = ["EnvRunner", "build_module", "lookback_horizon", "vectorized_fallback", "view_lookback_steps"]

logger = logging.getLogger(__name__)


class EnvRunner(RunnerCalls):
    """Samples episodes from ``config.num_envs_per_env_runner`` sub-envs (see the module docstring)."""

    def __init__(self, config: EnvRunnerConfig, *, worker_index: int = 0, num_workers: int = 0) -> None:
        self.config = config
        self.worker_index = worker_index
        self.num_workers = num_workers
        env = make_vector_env(config, worker_index=worker_index, num_workers=num_workers)
        self.is_native_vector_env = not isinstance(env, SubEnvVector)
        """A vector env of gymnasium's or a vector-env creator's (one seed for all sub-envs, rebuilt
        whole), not the runner's own vector of single envs."""
        self.num_envs = env.num_envs
        self.observation_space = check_space(env.single_observation_space)
        self.action_space = env.single_action_space
        seq = (
            np.random.SeedSequence([config.seed, worker_index]) if config.seed is not None else np.random.SeedSequence()
        )
        policy_seed, random_seed, _ = (int(s.generate_state(1)[0]) for s in seq.spawn(3))
        self.module_observation_space = env_to_module_observation_space(
            self.observation_space, config.env_to_module_connectors
        )
        """What the module sees: the env's observation space after the user's env-to-module pieces."""
        self.module = build_module(config, self.module_observation_space, self.action_space)
        set_torch_threads(self.module, config.num_torch_threads)
        random_module = RandomModule(self.module_observation_space, self.action_space, seed=random_seed)
        self.env_to_module = default_env_to_module(self.observation_space, config.env_to_module_connectors)
        self.module_to_env = default_module_to_env(
            self.action_space,
            config.module_to_env_connectors,
            seed=policy_seed,
            normalize_actions=config.normalize_actions,
        )
        self._num_rebuilds = 0
        self.recorder = StepRecorder(
            self._stepper(env),
            module=self.module,
            random_module=random_module,
            env_to_module=self.env_to_module,
            module_to_env=self.module_to_env,
        )
        # Episode ids: a per-runner random prefix (never seeded: reruns must not repeat it) and a counter.
        prefix = uuid.uuid4().hex[:16]
        self.ongoing = OngoingEpisodes(
            lookback=lookback_horizon(config),
            id_prefix=f"{prefix}{worker_index:04x}",
            observation_space=self.observation_space,
            action_space=self.action_space,
        )
        self._is_truncating = config.batch_mode is BatchMode.TRUNCATE_EPISODES
        self.vectorized_fallback = vectorized_fallback(config)
        """Why a runner asked for ``columnar_sampling`` takes the per-step engine for every call (None: it
        does not); logged once when the runner is built."""
        self.is_vectorized = config.columnar_sampling and self._is_truncating and self.vectorized_fallback is None
        """Whether plain (step-counting) calls take the vectorized engine."""
        self.num_fallback_calls = 0
        """``sample()`` calls that took the per-step engine because of ``vectorized_fallback``."""
        if self.vectorized_fallback is not None:
            logger.warning("EnvRunner %d: %s", worker_index, self.vectorized_fallback)
        self._per_step = PerStepEngine(self.recorder, self.ongoing, truncate=self._is_truncating)
        self._vectorized = VectorizedEngine(
            self.recorder, self.ongoing, view_lookback_steps=view_lookback_steps(config.env_to_module_connectors)
        )
        self._tally = RunnerTally(worker_index)
        self._is_seeded = False
        self._lost_in_failed_call: int | None = None
        """Steps an ``EnvError`` call held or made (None: no failure to recover from)."""
        self._recovered_steps = 0
        """Steps the last recovery dropped (reported by the call that recovered)."""
        self.weights_version = 0
        self.metrics = RunnerMetrics(worker_index=worker_index)
        """Metrics of the last ``sample()`` call."""
        self._outbox = ReplayOutbox()  # chunks a dead replay actor did not take

    @property
    def env(self) -> Any:
        """The vector env stepped now (a rebuild replaces it)."""
        return self.recorder.stepper.env

    def _stepper(self, env: Any) -> VectorStepper:
        native = not isinstance(env, SubEnvVector)
        rebuild = self._rebuild_native if native and self.config.restart_failed_sub_environments else None
        return VectorStepper(
            env,
            worker_index=self.worker_index,
            rebuild=rebuild,
            check_data=self.config.check_env_data,
            ends=EpisodeEnds.from_config(self.config, env.num_envs),
        )

    def _new_seeds(self) -> Any:
        """Fresh seed streams for the vector env's next rebuild (None when unseeded)."""
        self._num_rebuilds += 1
        seeds = sub_env_seeds(self.config.seed, self.worker_index, self.num_envs, restart=self._num_rebuilds)
        if seeds is not None and self.is_native_vector_env:
            return seeds[0]
        return seeds

    def _rebuild_native(self) -> tuple[Any, Any]:
        """A new native vector env and the seeds of its first reset (after the old one raised)."""
        return make_vector_env(
            self.config, worker_index=self.worker_index, num_workers=self.num_workers
        ), self._new_seeds()

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
        request = SampleRequest(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        result = self._collect(request)
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
    ) -> tuple[ColumnarEpisodes | None, RunnerMetrics]:
        """``sample()`` as one columnar object (what a remote runner ships), with the call's metrics."""
        request = SampleRequest(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        return self.collect(request)

    def sample_to(
        self,
        replay: Any,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> RunnerMetrics:
        """``sample_columnar()`` sent straight to a replay actor (or a local ReplayActor); returns the
        call's metrics with the replay's acknowledgement in ``replay``: the chunks count as delivered
        only once stored."""
        request = SampleRequest(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        return self.collect_to(replay, request)

    def _collect(self, request: SampleRequest) -> Collected:
        t0 = time.perf_counter()
        is_recovering = self._lost_in_failed_call is not None
        seeds = self._recover() if is_recovering else None
        stepper = self.recorder.stepper
        restarts_before, made_before, held = (
            stepper.num_restarts,
            stepper.num_transitions,
            self.ongoing.num_held_steps(),
        )
        try:
            dropped, abandoned = 0, set[str]()
            if request.force_reset or not self.ongoing.is_started:
                dropped, abandoned = self._reset(seeds=seeds)
            num_steps = request.num_env_steps(
                rollout_fragment_length=self.config.rollout_fragment_length, num_envs=self.num_envs
            )
            engine: SamplingEngine = (
                self._vectorized if self.is_vectorized and request.num_episodes is None else self._per_step
            )
            fell_back = self.vectorized_fallback is not None and request.num_episodes is None
            self.num_fallback_calls += fell_back
            result = engine.collect(request, num_steps)
        except EnvError:
            # Everything held or made since the last return is dropped: the next call recovers.
            self._lost_in_failed_call = held + self.recorder.stepper.num_transitions - made_before
            raise
        num_episodes, num_steps_dropped, ended_ids = self.ongoing.take_drops()
        restarts = self.recorder.stepper.num_restarts - restarts_before
        if is_recovering:
            num_episodes, num_steps_dropped, restarts = (
                num_episodes + self.num_envs,
                num_steps_dropped + self._recovered_steps,
                restarts + 1,
            )
        duration_s = time.perf_counter() - t0
        self.metrics = self._tally.record(
            result,
            duration_s,
            dropped,
            abandoned,
            (num_episodes, num_steps_dropped, ended_ids),
            restarts,
            weights_version=self.weights_version,
            fallback=self.vectorized_fallback if fell_back else None,
        )
        return result

    def _recover(self) -> Any:
        """After an ``EnvError``: closes the half-stepped vector env, builds a new one and forgets all
        the runner held (the episodes never continue); returns the new env's first reset seeds."""
        with contextlib.suppress(Exception):  # the failed env may fail to close; it is replaced either way
            self.env.close()
        stepper = self._stepper(
            make_vector_env(self.config, worker_index=self.worker_index, num_workers=self.num_workers)
        )
        self.recorder.stepper = stepper
        self.ongoing.drain(ship_running=False)
        self.ongoing.take_drops()
        self._tally.clear()
        self._recovered_steps = self._lost_in_failed_call or 0
        self._lost_in_failed_call = None
        return self._new_seeds()

    def _reset(self, *, seeds: Any = None) -> tuple[int, set[str]]:
        """Resets every sub-env (seeded on the first reset, or with ``seeds`` after a rebuild):
        (episodes dropped, ids that never continue)."""
        if not self._is_seeded:
            seeds = sub_env_seeds(self.config.seed, self.worker_index, self.num_envs)
            if seeds is not None and self.is_native_vector_env:
                seeds = seeds[0]  # native vector envs take one seed and derive their sub-envs' from it
        self._is_seeded = True
        obs_rows, infos = self.recorder.reset(seeds)
        # Truncate mode ships the running episodes' steps as chunks with this call, so none is lost.
        return self.ongoing.restart(obs_rows, infos, ship_running=self._is_truncating)

    # ---------------------------------------------------------------- metrics and state
    def get_state(self) -> dict[str, Any]:
        """Module weights, connector state and the weights version."""
        return {
            **pipeline_state(self.module, self.env_to_module, self.module_to_env),
            "weights_version": self.weights_version,
        }

    def set_state(self, state: dict[str, Any]) -> int:
        """Loads any of ``get_state()``'s keys; returns the weights version now in use."""
        set_pipeline_state(state, self.module, self.env_to_module, self.module_to_env)
        if "weights_version" in state:
            self.weights_version = int(state["weights_version"])
        return self.weights_version

    def drain(self) -> tuple[list[SingleAgentEpisode], int]:
        """What no ``sample()`` returned yet, for scale-down: (chunks to ship, episodes dropped).

        First the chunks held for a dead replay actor (see ``sample_to``), in order, then what the
        runner keeps: truncate mode ships every step made (running episodes as unfinished chunks);
        complete mode ships only whole finished episodes, running ones are dropped and counted, as
        that mode never returns part of an episode. The runner starts fresh afterwards.
        """
        held = self._take_outbox()
        out, dropped = self.ongoing.drain(ship_running=self._is_truncating)
        self._tally.clear()
        return held + out, dropped

    def stop(self) -> None:
        self.env.close()
