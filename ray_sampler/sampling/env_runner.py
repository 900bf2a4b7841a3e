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
every call's arguments travel as one ``SampleRequest``.

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
import dataclasses
import logging
import time
import uuid
from typing import Any

import numpy as np

from connectors.connector_v2 import piece_name
from connectors.env_to_module import EnvToModulePiece, default_env_to_module, env_to_module_observation_space
from connectors.module_to_env import default_module_to_env
from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.spaces import check_flattenable, check_space
from ray_sampler.errors import ConfigError, EnvError
from ray_sampler.handles import call
from ray_sampler.modules import MLPModule, RandomModule
from ray_sampler.modules.rl_module import initial_state, is_stateful
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig, VectorizationMode
from ray_sampler.sampling.engines import Collected, PerStepEngine, SamplingEngine, VectorizedEngine
from ray_sampler.sampling.env_creator import make_vector_env, sub_env_seeds
from ray_sampler.sampling.horizon import EpisodeEnds
from ray_sampler.sampling.metrics import EpisodeTotals, RunnerMetrics, chunk_totals
from ray_sampler.sampling.ongoing import OngoingEpisodes
from ray_sampler.sampling.recorder import StepRecorder
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.vector import VectorStepper

__all__ = ["EnvRunner", "build_module", "lookback_horizon", "vectorized_fallback", "view_lookback_steps"]

logger = logging.getLogger(__name__)


def build_module(config: EnvRunnerConfig, observation_space: Any, action_space: Any) -> Any:
    """The runner's module: ``module_class(observation_space, action_space, **module_config)``."""
    module_class = config.module_class or MLPModule
    if getattr(module_class, "needs_flat_observations", True):  # the default MLP's kind: floats in
        check_flattenable(observation_space, getattr(module_class, "__name__", str(module_class)))
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
    if is_stateful(module):
        _check_stateful(config, module)
    return module


def _check_stateful(config: EnvRunnerConfig, module: Any) -> None:
    """A stateful module needs an initial state of arrays, and continuation chunks that keep the
    previous step's ``state_out`` (the learner starts a chunk's first sequence from it)."""
    name = type(module).__name__
    try:
        state = initial_state(module)
    except Exception as e:
        raise ConfigError(f"stateful module {name}: get_initial_state() failed: {e}") from e
    if not state or not all(isinstance(k, str) for k in state):
        raise ConfigError(f"stateful module {name}: get_initial_state() must return a non-empty dict of arrays")
    if config.batch_mode is BatchMode.TRUNCATE_EPISODES and lookback_horizon(config) < 1:
        raise ConfigError(
            f"'episode_lookback_horizon' must be >= 1 for the stateful module {name} in truncate mode "
            f"(got {config.episode_lookback_horizon}): a chunk's first state_in is its lookback's last state_out"
        )


def lookback_horizon(config: EnvRunnerConfig) -> int:
    """``config.episode_lookback_horizon``, which ``EnvRunnerConfig`` has resolved to an int."""
    assert config.episode_lookback_horizon is not None, "EnvRunnerConfig.__post_init__ derives it"
    return config.episode_lookback_horizon


def vectorized_fallback(config: EnvRunnerConfig) -> str | None:
    """Why a truncate-mode runner with ``columnar_sampling`` cannot take the vectorized engine: user
    pieces outside its contract (None: it can, or the config does not ask for it).

    Env-to-module pieces must subclass ``EnvToModulePiece`` (they read history from the view the
    engine keeps, never from episode objects); user module-to-env pieces always fall back (they
    get no episodes on that engine)."""
    if not (config.columnar_sampling and config.batch_mode is BatchMode.TRUNCATE_EPISODES):
        return None
    others = [piece_name(p) for p in config.env_to_module_connectors if not isinstance(p, EnvToModulePiece)]
    others += [piece_name(p) for p in config.module_to_env_connectors]
    if not others:
        return None
    return (
        f"connector pieces {others} do not keep the vectorized engine's contract (env-to-module pieces "
        "subclassing EnvToModulePiece; no module-to-env pieces): sampling falls back to the per-step engine"
    )


def view_lookback_steps(pieces: tuple[Any, ...]) -> int | None:
    """Steps of history the env-to-module pieces read (None: no piece reads the running episodes' view)."""
    steps = [p.lookback_steps for p in pieces if isinstance(p, EnvToModulePiece)]
    return max(steps) if steps else None


def _set_torch_threads(module: Any, num_threads: int) -> None:
    """One runner's torch intra-op threads (``EnvRunnerConfig.num_torch_threads``), for a torch module."""
    if getattr(module, "framework", None) == "torch":
        import torch

        torch.set_num_threads(num_threads)


class EnvRunner:
    """Samples episodes from ``config.num_envs_per_env_runner`` sub-envs (see the module docstring)."""

    def __init__(self, config: EnvRunnerConfig, *, worker_index: int = 0, num_workers: int = 0) -> None:
        self.config = config
        self.worker_index = worker_index
        self.num_workers = num_workers
        env = make_vector_env(config, worker_index=worker_index, num_workers=num_workers)
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
        _set_torch_threads(self.module, config.num_torch_threads)
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
        self._totals = EpisodeTotals()
        self._shipped_running: set[str] = set()
        """Ids of the episodes shipped unfinished that still run (``running_episode_ids``)."""
        self._is_seeded = False
        self._lost_in_failed_call: int | None = None
        """Steps an ``EnvError`` call held or made (None: no failure to recover from)."""
        self._recovered_steps = 0
        """Steps the last recovery dropped (reported by the call that recovered)."""
        self.weights_version = 0
        self.metrics = RunnerMetrics(worker_index=worker_index)
        """Metrics of the last ``sample()`` call."""
        self._held_for_replay: list[ColumnarEpisodes] = []  # chunks a dead replay actor did not take

    @property
    def env(self) -> Any:
        """The vector env stepped now (a rebuild replaces it)."""
        return self.recorder.stepper.env

    def _stepper(self, env: Any) -> VectorStepper:
        native = self.config.vectorization_mode is VectorizationMode.VECTOR_ENTRY_POINT
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
        if seeds is not None and self.config.vectorization_mode is VectorizationMode.VECTOR_ENTRY_POINT:
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

    def collect(self, request: SampleRequest) -> tuple[ColumnarEpisodes | None, RunnerMetrics]:
        """``sample_columnar()`` for a request (what ``EnvRunnerGroup`` sends)."""
        result = self._collect(request)
        if isinstance(result, list):
            result = episodes_to_columnar(result) if result else None
        return result, self.metrics

    def collect_to(self, replay: Any, request: SampleRequest) -> RunnerMetrics:
        """``sample_to()`` for a request (what ``EnvRunnerGroup`` sends)."""
        col, metrics = self.collect(request)
        if col is not None:
            self._held_for_replay.append(col)
        ack = self._send_held(replay)
        held = sum(c.num_env_steps for c in self._held_for_replay)
        return dataclasses.replace(
            metrics,
            replay=ack,
            num_env_steps_held_for_replay=held,
            running_episode_ids=sorted(self._shipped_running),
        )

    def _send_held(self, replay: Any) -> Any:
        """Adds the held chunks to ``replay`` in order; one ack summing those it took (None: none).

        A dead replay actor is not this runner's failure: the chunks it did not take stay held,
        unchanged, so the episodes go on and reach the restored actor whole (learner/replay_recovery.py)."""
        acks = []
        try:
            if not self._held_for_replay:
                return call(replay.add, None)
            while self._held_for_replay:
                acks.append(call(replay.add, self._held_for_replay[0]))
                self._held_for_replay.pop(0)
        except Exception as e:
            if not _is_actor_death(e):
                raise
        if not acks:
            return None
        return dataclasses.replace(
            acks[-1],
            num_env_steps=sum(a.num_env_steps for a in acks),
            num_env_steps_received=sum(a.num_env_steps_received for a in acks),
            waited_s=sum(a.waited_s for a in acks),
        )

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
        self._record_metrics(
            result,
            duration_s,
            dropped,
            abandoned,
            (num_episodes, num_steps_dropped, ended_ids),
            restarts,
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
        self._totals.clear()
        self._shipped_running.clear()
        self._recovered_steps = self._lost_in_failed_call or 0
        self._lost_in_failed_call = None
        return self._new_seeds()

    def _reset(self, *, seeds: Any = None) -> tuple[int, set[str]]:
        """Resets every sub-env (seeded on the first reset, or with ``seeds`` after a rebuild):
        (episodes dropped, ids that never continue)."""
        if not self._is_seeded:
            seeds = sub_env_seeds(self.config.seed, self.worker_index, self.num_envs)
            if seeds is not None and self.config.vectorization_mode is VectorizationMode.VECTOR_ENTRY_POINT:
                seeds = seeds[0]  # native vector envs take one seed and derive their sub-envs' from it
        self._is_seeded = True
        obs_rows, infos = self.recorder.reset(seeds)
        # Truncate mode ships the running episodes' steps as chunks with this call, so none is lost.
        return self.ongoing.restart(obs_rows, infos, ship_running=self._is_truncating)

    # ---------------------------------------------------------------- metrics and state
    def _record_metrics(
        self,
        result: Collected,
        duration_s: float,
        dropped: int,
        abandoned: set[str],
        env_dropped: tuple[int, int, list[str]],
        restarts: int,
        *,
        fallback: str | None,
    ) -> None:
        """``env_dropped``: (episodes, steps, ids) a sub-env failure dropped; ``fallback``: why the call
        took the per-step engine (None: it did not fall back)."""
        chunks = list(chunk_totals(result))
        returns, lengths, steps = self._totals.add(chunks)
        # Episodes a reset or a sub-env failure ended never continue: their sums go once this call's chunks are in.
        ended = abandoned | set(env_dropped[2])
        self._totals.forget(ended)
        self._shipped_running |= {id_ for id_, _, _, is_done in chunks if not is_done}
        self._shipped_running -= {id_ for id_, _, _, is_done in chunks if is_done} | ended
        self.metrics = RunnerMetrics(
            worker_index=self.worker_index,
            num_env_steps=steps,
            num_agent_steps=steps,
            num_episodes=len(returns),
            episode_returns=returns,
            episode_lengths=lengths,
            num_episodes_dropped_by_reset=dropped,
            num_episodes_dropped_env_error=env_dropped[0],
            num_env_steps_dropped=env_dropped[1],
            num_sub_env_restarts=restarts,
            ended_episode_ids=list(env_dropped[2]),
            duration_s=duration_s,
            num_env_steps_per_s=steps / duration_s if duration_s > 0 else 0.0,
            weights_version=self.weights_version,
            vectorized_fallback=fallback,
        )

    def get_metrics(self) -> RunnerMetrics:
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

        First the chunks held for a dead replay actor (see ``sample_to``), in order, then what the
        runner keeps: truncate mode ships every step made (running episodes as unfinished chunks);
        complete mode ships only whole finished episodes, running ones are dropped and counted, as
        that mode never returns part of an episode. The runner starts fresh afterwards.
        """
        held = [ep for col in self._held_for_replay for ep in columnar_to_episodes(col)]
        self._held_for_replay = []
        out, dropped = self.ongoing.drain(ship_running=self._is_truncating)
        self._totals.clear()
        self._shipped_running.clear()
        return held + out, dropped

    def ping(self) -> int:
        """Cheap liveness check; returns the worker index."""
        return self.worker_index

    def stop(self) -> None:
        self.env.close()


def _is_actor_death(error: BaseException) -> bool:
    """Whether ``error`` says the called actor died or cannot be reached (Ray's RayActorError)."""
    import ray

    return isinstance(error, ray.exceptions.RayActorError)
