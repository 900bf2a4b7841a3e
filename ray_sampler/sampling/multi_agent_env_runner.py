"""MultiAgentEnvRunner: steps a vector of multi-agent sub-envs with one module per policy, returning MultiAgentEpisodes.

A runner of its own rather than the single-agent ``EnvRunner`` taking a multi-agent env: that
runner's engines record a gymnasium vector env's fixed ``[num_envs]`` batch at every step, as
arrays, while here each sub-env's set of acting agents changes from step to step (turns, agents
joining and leaving) and the actions come from several modules. What the two share is shared:
the env creators and their ``EnvContext``, the seed streams, the module builder, the connector
pipelines, the config and its batch modes.

Each env step of the vector: the agents to act in every sub-env are grouped by the module their
episode maps them to (``policy_mapping_fn``, once per agent per episode), and each module runs
**one** batched forward pass over all its agents in all sub-envs (the env-to-module and
module-to-env pipelines of its spaces around it); then every sub-env steps with its agents'
actions and its episode records the step.

``sample()`` follows the batch mode, counting steps by ``count_steps_by``:

- ``env_steps``: one per sub-env step, however many agents act in it; truncate mode returns
  exactly ``rollout_fragment_length x num_envs`` (or ``num_timesteps`` rounded up to a multiple of
  ``num_envs``);
- ``agent_steps``: the agent steps that completed (each chunk's ``agent_steps()``), at least the
  target: the last vector step may complete several at once, so a call may go over by fewer than
  the agents of one vector step.

In ``truncate_episodes`` mode running episodes are cut (``episode_lookback_horizon`` env steps of
lookback) and continue in the next call; in ``complete_episodes`` mode only finished episodes
return and running ones go on; ``num_episodes=k`` returns exactly k finished episodes. Finished
episodes come first, then the cut chunks. A sub-env that raises is rebuilt with a fresh seed when
``restart_failed_sub_environments`` is on, its running episode dropped and counted; otherwise
``sample()`` raises ``EnvError`` and the next call starts every sub-env from a reset, dropping
(and counting) what was running.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
import uuid
from collections.abc import Hashable
from typing import Any

import gymnasium as gym
import numpy as np

from connectors.connector_v2 import piece_name
from connectors.env_to_module import default_env_to_module, env_to_module_observation_space
from connectors.module_to_env import default_module_to_env
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar, multi_agent_episodes_to_columnar, unpack_columnar
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError, EnvCreatorError, EnvError, MultiAgentEnvError, first_line
from ray_sampler.modules import MLPModule, MultiRLModule, RandomModule
from ray_sampler.modules.centralized_critic import CentralizedCriticMLPModule
from ray_sampler.modules.rl_module import initial_state, is_stateful
from ray_sampler.sampling.config import BatchMode, CountStepsBy, EnvRunnerConfig
from ray_sampler.sampling.env_creator import EnvContext, resolve_creator, sub_env_seeds
from ray_sampler.sampling.full_steps import FullSteps, fits
from ray_sampler.sampling.global_observation import GlobalObservationEnv
from ray_sampler.sampling.metrics import RunnerMetrics
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig, mapping_by_spaces
from ray_sampler.sampling.multi_agent_env import (
    ALL,
    check_multi_agent_output,
    is_multi_agent_env,
    missing_methods,
    reset_output,
)
from ray_sampler.sampling.pettingzoo_env import wrap_pettingzoo
from ray_sampler.sampling.recorder import checked_state_out
from ray_sampler.sampling.replay_outbox import ReplayOutbox
from ray_sampler.sampling.request import SampleRequest
from ray_sampler.sampling.runner_build import (
    build_module,
    set_torch_threads,
    vectorized_fallback,
    view_lookback_steps,
)

__all__ = [
    "ModulePolicy",
    "MultiAgentEnvRunner",
    "MultiAgentRunnerMetrics",
    "build_multi_rl_module",
    "effective_multi_agent",
    "make_multi_agent_sub_env",
    "module_build_config",
    "module_spaces",
    "probe_multi_agent",
    "resolve_multi_agent",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiAgentRunnerMetrics(RunnerMetrics):
    """A multi-agent runner's call: the single-agent fields (``episode_returns`` sums every agent of an
    episode), and per agent and per module."""

    agent_episode_returns: dict[Hashable, list[float]] = dataclasses.field(default_factory=dict)
    """Per agent id, its whole-episode return in each episode that ended (summed over every chunk)."""
    module_episode_returns: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Per module, in each episode that ended where it acted: the return of all its agents together."""
    num_module_steps: dict[str, int] = dataclasses.field(default_factory=dict)
    """Per module, the agent steps of its agents returned by the call."""


def make_multi_agent_sub_env(config: EnvRunnerConfig, *, worker_index: int, vector_index: int, num_workers: int) -> Any:
    """One multi-agent sub-env from the config's creator (a PettingZoo env wrapped in its adapter);
    EnvCreatorError naming the sub-env if the creator fails or returns something else."""
    creator = resolve_creator(config.env)
    ctx = EnvContext(
        config.env_config,
        worker_index=worker_index,
        vector_index=vector_index,
        num_workers=num_workers,
        num_envs=config.num_envs_per_env_runner,
    )
    try:
        env = wrap_pettingzoo(creator(ctx))
    except Exception as e:  # the user's creator failed: say which sub-env, keep the cause
        raise EnvCreatorError(
            f"env creator {config.env!r} failed for worker_index={worker_index}, vector_index={vector_index}: "
            f"{type(e).__name__}: {first_line(e)}"
        ) from e
    if not is_multi_agent_env(env):
        raise EnvCreatorError(
            f"a multi-agent run's env creator must return a MultiAgentEnv or a PettingZoo env (got "
            f"{type(env).__module__}.{type(env).__qualname__} for worker_index={worker_index}, "
            f"vector_index={vector_index})"
        )
    missing = missing_methods(env)
    if missing:
        raise EnvCreatorError(
            f"{type(env).__qualname__} (a MultiAgentEnv) must implement {' and '.join(missing)}: the base class's "
            "step is abstract, and its reset only seeds np_random"
        )
    ma = config.multi_agent
    if ma is not None and ma.centralized_critic:
        env = GlobalObservationEnv(env, ma.global_state)
    return env


def module_build_config(config: EnvRunnerConfig, ma_config: MultiAgentConfig, module_id: str) -> EnvRunnerConfig:
    """The runner config module ``module_id`` is built from: its ModuleSpec's class and config where
    given, the runner config's otherwise; the default MLP of the k-th module is seeded ``seed + k``
    (independent modules start apart), as is a seed in the runner config's ``module_config``."""
    spec = ma_config.spec(module_id)
    module_config = dict(config.module_config if spec.module_config is None else spec.module_config)
    module_class = spec.module_class or config.module_class
    position = ma_config.module_ids.index(module_id)
    if ma_config.centralized_critic:
        history = [piece_name(p) for p in config.env_to_module_connectors if getattr(p, "lookback_steps", 0)]
        if history:
            raise ConfigError(
                f"'centralized_critic' reads one step's {{own, global}} observation: it takes no history pieces "
                f"yet (got {history} in 'env_to_module_connectors')"
            )
        module_class = _critic_class(module_class)
    if spec.module_config is None and isinstance(module_config.get("seed"), int):
        module_config["seed"] += position  # the runner config's seed (a built-in MLP's, numpy or torch)
    elif module_class in (None, MLPModule) and config.seed is not None:
        module_config.setdefault("seed", config.seed + position)
    return dataclasses.replace(config, module_class=module_class, module_config=module_config)


def _critic_class(module_class: type | None) -> type | None:
    """The module class of a centralized-critic run: the built-in MLP (numpy or torch) becomes its
    centralized-critic form; a user's class is kept (it must read ``{"own", "global"}`` itself)."""
    if module_class in (None, MLPModule):
        return CentralizedCriticMLPModule
    if module_class.__name__ == "TorchMLPModule":  # the torch built-in: its twin (imports torch only here)
        from ray_sampler.modules.torch_centralized_critic import TorchCentralizedCriticModule

        return TorchCentralizedCriticModule
    return module_class


def module_spaces(
    env: Any, ma_config: MultiAgentConfig, module_ids: tuple[str, ...] | None = None
) -> dict[str, tuple[gym.Space, gym.Space]]:
    """The (observation, action) spaces of each of ``module_ids`` (None: all) on ``env``: its spec's,
    else those of the agents the mapping gives it on a probe episode, which must agree, else (no
    agent maps to it) the one space every agent shares. ConfigError naming the module otherwise."""
    probe = MultiAgentEpisode(agent_to_module_mapping_fn=ma_config.map_agent)
    possible = list(env.possible_agents)
    mapped: dict[str, list[Hashable]] = {mid: [] for mid in ma_config.module_ids}
    for aid in possible:
        mapped[probe.module_for(aid)].append(aid)
    out: dict[str, tuple[gym.Space, gym.Space]] = {}
    for mid in ma_config.module_ids if module_ids is None else module_ids:
        spec = ma_config.spec(mid)
        spaces = []
        for what, given, get in (
            ("observation", spec.observation_space, env.get_observation_space),
            ("action", spec.action_space, env.get_action_space),
        ):
            if given is not None:
                spaces.append(given)
                continue
            candidates = {aid: get(aid) for aid in (mapped[mid] or possible)}
            first = next(iter(candidates.values()))
            differ = [aid for aid, s in candidates.items() if s != first]
            if differ:
                raise ConfigError(
                    f"module {mid!r} acts for agents {sorted(map(str, candidates))} whose {what} spaces differ "
                    f"({first} for {next(iter(candidates))!r}, {candidates[differ[0]]} for {differ[0]!r}): "
                    f"map them to different modules (the default modules do: one per distinct pair of spaces; "
                    f"--policy-mapping by-spaces from the command line) or give ModuleSpec({what}_space=...)"
                )
            spaces.append(first)
        out[mid] = (spaces[0], spaces[1])
    return out


def probe_multi_agent(config: EnvRunnerConfig) -> tuple[list[Hashable], dict[str, tuple[gym.Space, gym.Space]]]:
    """The env's possible agents and each module's (observation, action) spaces (``module_spaces``)
    in a multi-agent run of ``config``, from one sub-env built as a runner builds its first."""
    env = make_multi_agent_sub_env(config, worker_index=0, vector_index=0, num_workers=0)
    try:
        return list(env.possible_agents), module_spaces(env, effective_multi_agent(config, env))
    finally:
        env.close()


def effective_multi_agent(config: EnvRunnerConfig, env: Any) -> MultiAgentConfig:
    """The modules a run of ``config`` uses on ``env``: ``config.multi_agent``, or where that is the
    default (``MultiAgentConfig.is_default``) and the agents' spaces differ, a module per distinct
    pair of spaces (``mapping_by_spaces``)."""
    ma = config.multi_agent or MultiAgentConfig()
    if not ma.is_default:
        return ma
    spaces = {aid: (env.get_observation_space(aid), env.get_action_space(aid)) for aid in env.possible_agents}
    return mapping_by_spaces(spaces, ma) or ma


def resolve_multi_agent(config: EnvRunnerConfig) -> EnvRunnerConfig:
    """``config`` with its modules made explicit (``effective_multi_agent``, on one probe sub-env
    where the modules are the default), so that every runner and learner builds the same ones."""
    ma = config.multi_agent or MultiAgentConfig()
    if ma.is_default:
        env = make_multi_agent_sub_env(config, worker_index=0, vector_index=0, num_workers=0)
        try:
            ma = effective_multi_agent(config, env)
        finally:
            env.close()
    return config if ma is config.multi_agent else dataclasses.replace(config, multi_agent=ma)


def build_multi_rl_module(
    config: EnvRunnerConfig, spaces: dict[str, tuple[gym.Space, gym.Space]] | None = None
) -> MultiRLModule:
    """The modules a MultiAgentEnvRunner of ``config`` builds, as a MultiRLModule (what a learner
    trains), on ``spaces`` (None: ``probe_multi_agent``'s)."""
    if spaces is None:
        config = resolve_multi_agent(config)
        spaces = probe_multi_agent(config)[1]
    ma_config = config.multi_agent or MultiAgentConfig()
    pieces = config.env_to_module_connectors  # the module sees what they make of the observations (e.g. a stack)
    return MultiRLModule(
        {
            mid: build_module(
                module_build_config(config, ma_config, mid),
                env_to_module_observation_space(spaces[mid][0], pieces),
                spaces[mid][1],
            )
            for mid in ma_config.module_ids
        },
        policies_to_train=ma_config.trained_module_ids,
    )


def _same_ref(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are ObjectRefs to the same object (weights given inline never are)."""
    import ray

    return isinstance(a, ray.ObjectRef) and isinstance(b, ray.ObjectRef) and a.binary() == b.binary()


def _resolve(weights: Any) -> Any:
    """Weights, fetched from the object store if they came as an ObjectRef."""
    import ray

    return ray.get(weights) if isinstance(weights, ray.ObjectRef) else weights


_MAX_RESTARTS_PER_CALL = 100
"""Sub-env rebuilds in one call after which it raises: steps of the failed episodes do not count
toward the call's target, so an env that always fails would otherwise keep the call going forever."""


class ModulePolicy:
    """One module with its pipelines, random twin and, for a stateful module, its initial state."""

    def __init__(self, config: EnvRunnerConfig, obs_space: gym.Space, act_space: gym.Space, seed: int) -> None:
        pieces = tuple(copy.deepcopy(p) for p in config.env_to_module_connectors)  # a copy per module
        self.module = build_module(config, env_to_module_observation_space(obs_space, pieces), act_space)
        self.random = RandomModule(obs_space, act_space, seed=seed)
        if type(self.module) is RandomModule and "seed" not in config.module_config:
            self.module = self.random  # a random player given no seed takes the runner's stream: seeded runs replay
        self.env_to_module = default_env_to_module(obs_space, pieces)
        self.module_to_env = default_module_to_env(act_space, seed=seed + 1, normalize_actions=config.normalize_actions)
        self.observation_space, self.action_space = obs_space, act_space
        self.initial_state: dict[str, np.ndarray] | None = (
            initial_state(self.module) if is_stateful(self.module) else None
        )

    def act(
        self, obs: Any, episodes: list[Any], states: Any, *, explore: bool, random_actions: bool
    ) -> tuple[Any, Any, dict[str, Any]]:
        """(actions to record, actions for the envs, other outputs) for a batch of observations;
        ``episodes``: the acting agents' own episodes (the history pieces read), ``states`` their
        ``state_in`` (None for a stateless module)."""
        module = self.module
        # The current observations go in first: a piece that reads history (a frame stack, previous
        # actions) reads the agents' episodes; the MeanStdFilter normalizes what is in the batch.
        batch: dict[str, Any] = {Columns.OBS: obs} if states is None else {Columns.OBS: obs, Columns.STATE_IN: states}
        batch = self.env_to_module(rl_module=module, batch=batch, episodes=episodes, explore=explore, shared_data={})
        out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
        if random_actions:
            out[Columns.ACTIONS] = self.random.forward_inference({Columns.OBS: obs})[Columns.ACTIONS]
        out = self.module_to_env(rl_module=module, batch=out, episodes=[], explore=explore, shared_data={})
        actions = out.pop(Columns.ACTIONS)
        return actions, out.pop(Columns.ACTIONS_FOR_ENV, actions), out

    def state_outs(self, out: dict[str, Any]) -> list[dict[str, np.ndarray]]:
        """A stateful module's ``state_out`` per row of a forward pass (ConfigError if it gave none)."""
        assert self.initial_state is not None, "only for a stateful module"
        rows: list[dict[str, np.ndarray]] = tree.unstack(checked_state_out(out, self.initial_state))
        return rows


class MultiAgentEnvRunner:
    """Samples MultiAgentEpisodes from ``config.num_envs_per_env_runner`` multi-agent sub-envs (see
    the module docstring). ``config.multi_agent`` names the modules and the mapping."""

    def __init__(self, config: EnvRunnerConfig, *, worker_index: int = 0, num_workers: int = 0) -> None:
        if config.max_episode_steps is not None or config.soft_horizon:
            raise ConfigError(
                "'max_episode_steps' and 'soft_horizon' are single-agent options: give a multi-agent env its "
                "own time limit (truncateds['__all__'])"
            )
        if config.module_to_env_connectors:
            got = [piece_name(p) for p in config.module_to_env_connectors]
            raise ConfigError(f"multi-agent runs take no 'module_to_env_connectors' pieces yet (got {got})")
        self.config = config
        self.worker_index, self.num_workers = worker_index, num_workers
        self.num_envs = config.num_envs_per_env_runner
        self.envs = [self._make_env(i) for i in range(self.num_envs)]
        self.ma_config = effective_multi_agent(config, self.envs[0])
        self.config = dataclasses.replace(config, multi_agent=self.ma_config)
        self.possible_agents = list(self.envs[0].possible_agents)
        self._seed_seq = np.random.SeedSequence([config.seed, worker_index]) if config.seed is not None else None
        self.policies: dict[str, ModulePolicy] = {}
        self._pending: dict[str, Any] = {}  # module id -> weights (or their ObjectRef) not loaded yet
        self._loaded: dict[str, Any] = {}  # module id -> the weights (or ObjectRef) it loaded last
        self.num_weight_loads: dict[str, int] = {}
        """Per module, how many weight updates this runner loaded (a module none of its agents maps to
        never loads what the group sends: its ObjectRef is never fetched)."""
        self._add_policies(self.module_ids)
        self.agent_lookback = self._agent_lookback()
        """Each running agent's own steps a continuation chunk keeps as lookback, at least (however many
        env steps they span): what the history pieces read, and a stateful module's last ``state_out``."""
        self._states: list[dict[Hashable, dict[str, np.ndarray]]] = [{} for _ in range(self.num_envs)]
        self._id_prefix = f"{uuid.uuid4().hex[:16]}-{worker_index}-"
        self._num_ids = 0
        self._num_resets = 0
        self._episodes: list[MultiAgentEpisode | None] = [None] * self.num_envs
        self.uses_full_steps = (
            config.columnar_sampling
            and not view_lookback_steps(config.env_to_module_connectors)
            and vectorized_fallback(dataclasses.replace(config, batch_mode=BatchMode.TRUNCATE_EPISODES)) is None
        )
        """Whether sub-envs whose agents all act at every step take the fast engine (``full_steps``):
        ``columnar_sampling`` on, and no env-to-module piece reads the episodes' history."""
        self._full: list[FullSteps | None] = [None] * self.num_envs
        self.num_full_steps = 0
        """Env steps the fast engine recorded (since the runner was built); the rest went the general way."""
        self._done_returns: list[dict[Hashable, float]] = [{} for _ in range(self.num_envs)]
        self._env_steps_checked = [0] * self.num_envs
        self._needs_reset = True
        self._held: list[MultiAgentEpisode] = []
        self._outbox = ReplayOutbox()  # chunks a dead replay actor did not take, oldest first
        self._finished_sums: dict[str, dict[Hashable, float]] = {}
        self.weights_version = 0
        self._metrics = MultiAgentRunnerMetrics(worker_index=worker_index)

    @property
    def module_ids(self) -> tuple[str, ...]:
        return self.ma_config.module_ids

    @property
    def modules(self) -> MultiRLModule:
        """The modules by id (the weights sent last loaded), those that do not learn marked so."""
        for mid in list(self._pending):
            self._policy(mid)
        return MultiRLModule(
            {mid: p.module for mid, p in self.policies.items()}, policies_to_train=self.ma_config.trained_module_ids
        )

    def _make_env(self, vector_index: int) -> Any:
        return make_multi_agent_sub_env(
            self.config, worker_index=self.worker_index, vector_index=vector_index, num_workers=self.num_workers
        )

    def _add_policies(self, module_ids: tuple[str, ...]) -> None:
        """Builds the modules ``module_ids`` (with their pipelines), each seeded from the runner's seed
        stream and its position among the config's modules."""
        config = self.config
        spaces = module_spaces(self.envs[0], self.ma_config, module_ids)
        for mid in module_ids:
            obs_space, act_space = spaces[mid]
            position = self.module_ids.index(mid)
            seq = self._seed_seq or np.random.SeedSequence()
            seed = int(np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, position)).generate_state(1)[0])
            self.policies[mid] = ModulePolicy(
                module_build_config(config, self.ma_config, mid), obs_space, act_space, seed
            )
            set_torch_threads(self.policies[mid].module, config.num_torch_threads)

    def _agent_lookback(self) -> int:
        history = view_lookback_steps(self.config.env_to_module_connectors) or 0
        return max(history, int(any(p.initial_state is not None for p in self.policies.values())))

    def _policy(self, module_id: str) -> ModulePolicy:
        """The module ``module_id``, with the newest weights sent to it loaded (fetched now if they
        came as an ObjectRef)."""
        pending = self._pending.pop(module_id, None)
        if pending is not None:
            self.policies[module_id].module.set_state(_resolve(pending))
            self._loaded[module_id] = pending
            self.num_weight_loads[module_id] = self.num_weight_loads.get(module_id, 0) + 1
        return self.policies[module_id]

    def set_multi_agent(self, ma_config: MultiAgentConfig) -> None:
        """Takes a new module set and mapping between calls (``add_module`` / ``remove_module``):
        new modules are built, removed ones dropped. Episodes keep the mapping they started with;
        if one maps an agent to a removed module, every sub-env starts afresh at the next call (the
        cut chunks hold no unshipped step, so nothing is lost)."""
        removed = set(self.policies) - set(ma_config.module_ids)
        self.ma_config = ma_config
        for mid in removed:
            del self.policies[mid]
            self._pending.pop(mid, None)
            self._loaded.pop(mid, None)
        self._add_policies(tuple(mid for mid in ma_config.module_ids if mid not in self.policies))
        self.agent_lookback = self._agent_lookback()
        for ep in self._episodes:
            if ep is None:
                continue
            ep.agent_to_module_mapping_fn = ma_config.map_agent  # for agents that join from now on
            if removed & set(ep.agent_to_module_mapping.values()):
                self._needs_reset = True

    # ---------------------------------------------------------------- weights and state
    def get_weights(self) -> dict[str, dict[str, Any]]:
        return self.modules.get_state()

    def set_weights(self, weights: dict[str, Any], version: int | None = None) -> None:
        """Takes ``{module_id: weights}`` for any of its modules; each module loads its weights when
        one of its agents next acts (a weights ObjectRef is fetched then: a module none of this
        runner's agents maps to never fetches its weights)."""
        unknown = set(weights) - set(self.policies)
        if unknown:
            raise ConfigError(f"weights for unknown modules {sorted(unknown)} (modules: {sorted(self.policies)})")
        # A module whose object is the one it loaded last (the group resends every module's ref) keeps its weights.
        self._pending.update({mid: w for mid, w in weights.items() if not _same_ref(w, self._loaded.get(mid))})
        self.weights_version = self.weights_version + 1 if version is None else version

    def get_metrics(self) -> MultiAgentRunnerMetrics:
        """The last call's metrics."""
        return self._metrics

    # ---------------------------------------------------------------- sampling
    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[MultiAgentEpisode]:
        """Episodes as the module docstring says; metrics of the call in ``get_metrics()``."""
        if num_timesteps is not None and num_episodes is not None:
            raise ConfigError("sample() takes 'num_timesteps' or 'num_episodes', not both")
        for name, value in (("num_timesteps", num_timesteps), ("num_episodes", num_episodes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"'{name}' must be None or an int >= 1 (got {value!r})")
        start = time.perf_counter()
        self._tally = _Tally()
        if force_reset or self._needs_reset:
            self._reset_all()
        truncate = self.config.batch_mode is BatchMode.TRUNCATE_EPISODES and num_episodes is None
        by_agent = self.config.count_steps_by is CountStepsBy.AGENT_STEPS
        target = num_timesteps or self.config.rollout_fragment_length * self.num_envs
        if not by_agent:
            target = math.ceil(target / self.num_envs) * self.num_envs
        done, self._held = self._held, []  # finished episodes a num_episodes call left over go first
        counted = 0
        while True:
            if num_episodes is not None:
                if len(done) >= num_episodes:
                    break
            elif truncate:
                if counted >= target:
                    break
            elif sum(ep.agent_steps() if by_agent else len(ep) for ep in done) >= target:
                break  # complete mode counts the steps of the finished episodes it returns
            counted += self._vector_step(done, explore=explore, random_actions=random_actions, by_agent=by_agent)
        if num_episodes is not None:
            done, self._held = done[:num_episodes], done[num_episodes:]
        out = list(done)
        if truncate:
            self._flush_full_steps()
            for i, ep in enumerate(self._episodes):
                assert ep is not None, "every sub-env runs an episode between calls"
                if len(ep) or ep.agent_steps():
                    out.append(ep)
                    horizon = self.config.episode_lookback_horizon or 0
                    self._episodes[i] = cut = ep.cut(len_lookback_buffer=horizon, agent_lookback=self.agent_lookback)
                    self._full[i] = FullSteps.of(cut) if self.uses_full_steps else None
        for ep in done:
            self._tally.finish(ep, self._finished_sums.pop(ep.id_))
        self._finish_metrics(out, time.perf_counter() - start)
        return out

    def _vector_step(
        self, done: list[MultiAgentEpisode], *, explore: bool, random_actions: bool, by_agent: bool
    ) -> int:
        """One step of every sub-env; returns the steps it counts (env steps, or agent steps completed)."""
        episodes, full = self._episodes, self._full
        groups: dict[str, list[tuple[int, Hashable]]] = {}
        for i, ep in enumerate(episodes):
            assert ep is not None
            held = full[i]
            if held is not None:
                for aid, mid in held.mapping:
                    groups.setdefault(mid, []).append((i, aid))
                continue
            for aid in ep.get_agents_to_act():
                groups.setdefault(ep.module_for(aid), []).append((i, aid))
        actions: list[dict[Hashable, Any]] = [{} for _ in episodes]
        env_actions: list[dict[Hashable, Any]] = [{} for _ in episodes]
        extras: list[dict[Hashable, dict[str, Any]]] = [{} for _ in episodes]
        for mid, pairs in groups.items():
            policy = self._policy(mid)
            obs = tree.stack([self._last_obs[i][aid] for i, aid in pairs])
            agent_eps = [episodes[i].agent_episodes[aid] for i, aid in pairs]  # type: ignore[union-attr]
            initial = policy.initial_state
            states = None if initial is None else tree.stack([self._states[i].get(aid, initial) for i, aid in pairs])
            acts, env_acts, outs = policy.act(obs, agent_eps, states, explore=explore, random_actions=random_actions)
            if initial is not None:  # each agent's next state_in: the state_out it just gave
                for (i, aid), state in zip(pairs, policy.state_outs(outs), strict=True):
                    self._states[i][aid] = state
            act_rows, env_rows = tree.unstack(acts), tree.unstack(env_acts)
            out_rows = {key: tree.unstack(v) for key, v in outs.items()}
            for k, (i, aid) in enumerate(pairs):
                actions[i][aid] = act_rows[k]
                env_actions[i][aid] = env_rows[k]
                if out_rows:
                    extras[i][aid] = {key: rows[k] for key, rows in out_rows.items()}
        counted = 0
        for i, env in enumerate(self.envs):
            ep = episodes[i]
            assert ep is not None
            held = full[i]
            try:
                out = env.step(env_actions[i])
            except Exception as e:  # the env's own failure: rebuilt, or EnvError
                self._leave_full_steps(i)
                # The dropped steps were made in this call (since the last cut): they count no more.
                counted -= ep.agent_steps() if by_agent else len(ep)
                self._env_failed(i, e)
                continue
            checked = False
            if held is not None:
                try:
                    self._check(i, ep.env_t + len(held) + 1, out)
                except MultiAgentEnvError:
                    self._leave_full_steps(i)  # the steps before it are the episode's; this one is refused below
                else:
                    checked = True
                    obs, rewards, terms, truncs, infos = out
                    if fits(held.agent_set, obs, rewards, terms, truncs, infos):
                        counted += self._full_step(i, held, out, actions[i], extras[i], done, by_agent=by_agent)
                        continue
                    self._leave_full_steps(i)  # an agent ends alone, joins or skips: the general way from here
            before = ep.agent_steps() if by_agent else 0
            try:
                if not checked:
                    self._check(i, ep.env_t + 1, out)
                obs, rewards, terms, truncs, infos = out
                ep.add_env_step(
                    obs, actions[i], rewards, infos, terminateds=terms, truncateds=truncs, extra_model_outputs=extras[i]
                )
            except MultiAgentEnvError as e:  # the env broke its contract: a bug to fix, not to restart
                self._needs_reset = True
                raise MultiAgentEnvError(f"sub-env worker_index={self.worker_index}, vector_index={i}: {e}") from e
            self._last_obs[i].update(obs)
            self._add_rewards(i, obs, rewards)
            self._tally.env_steps += 1
            counted += (ep.agent_steps() - before) if by_agent else 1
            if self.uses_full_steps and not ep.is_done and ep.get_agents_to_act() == actions[i].keys():
                self._full[i] = FullSteps.of(ep)  # the same agents act again: the fast way from here
            if ep.is_done:
                self._finished_sums[ep.id_] = self._done_returns[i]
                done.append(ep)
                self._start_episode(i, seed=None)
        return counted

    def _full_step(
        self,
        i: int,
        held: FullSteps,
        out: Any,
        actions: Any,
        extras: Any,
        done: list[MultiAgentEpisode],
        *,
        by_agent: bool,
    ) -> int:
        """Holds a full step of sub-env ``i`` (the episode gets it when it ends or is cut); the steps it counts."""
        obs, rewards, terms, truncs, infos = out
        held.add(obs, actions, rewards, infos, extras)
        self.num_full_steps += 1
        self._last_obs[i].update(obs)
        self._add_rewards(i, obs, rewards)
        self._tally.env_steps += 1
        if terms.get(ALL) or truncs.get(ALL):
            ep = self._episodes[i]
            assert ep is not None
            held.flush(ep, terms, truncs)
            self._finished_sums[ep.id_] = self._done_returns[i]
            done.append(ep)
            self._start_episode(i, seed=None)
        return len(held.agents) if by_agent else 1

    def _leave_full_steps(self, i: int) -> None:
        """Records sub-env ``i``'s held steps in its episode; it goes on the general way."""
        held, ep = self._full[i], self._episodes[i]
        if held is not None:
            assert ep is not None
            held.flush(ep)
            self._full[i] = None

    def _flush_full_steps(self) -> None:
        """Records every sub-env's held steps in its episode, keeping the fast engine where it was on."""
        for held, ep in zip(self._full, self._episodes, strict=True):
            if held is not None:
                assert ep is not None
                held.flush(ep)

    def _check(self, i: int, env_step: int, out: Any) -> None:
        if not isinstance(out, tuple) or len(out) != 5:
            got = f"{len(out)} values" if isinstance(out, tuple) else type(out).__name__
            raise MultiAgentEnvError(
                f"step() at env step {env_step} must return (obs, rewards, terminateds, truncateds, infos) (got {got})"
            )
        if self._env_steps_checked[i] >= self.config.check_env_first_steps:
            if ALL in out[2] and ALL in out[3]:  # past the first steps, only what the episode needs to end
                return
        else:
            self._env_steps_checked[i] += 1
        check_multi_agent_output(self.envs[i], env_step, *out, check_spaces=self.config.check_env_data)

    def _env_failed(self, i: int, error: Exception) -> None:
        ep = self._episodes[i]
        assert ep is not None
        if not self.config.restart_failed_sub_environments:
            self._needs_reset = True
            raise EnvError(
                f"sub-env worker_index={self.worker_index}, vector_index={i} failed: "
                f"{type(error).__name__}: {first_line(error)}"
            ) from error
        self._tally.dropped_episodes += 1
        self._tally.dropped_steps += len(ep)
        self._tally.restarts += 1
        if self._tally.restarts >= _MAX_RESTARTS_PER_CALL:  # the dropped steps do not count: it would never end
            self._needs_reset = True
            raise EnvError(
                f"sub-envs failed {self._tally.restarts} times in one sample() call; the last: vector_index={i} "
                f"of worker_index={self.worker_index}: {type(error).__name__}: {first_line(error)}"
            ) from error
        with contextlib.suppress(Exception):  # the broken env's close may fail too; it is replaced either way
            self.envs[i].close()
        self.envs[i] = self._make_env(i)
        self._env_steps_checked[i] = 0
        self._num_resets += 1
        seeds = sub_env_seeds(self.config.seed, self.worker_index, self.num_envs, restart=self._num_resets)
        self._start_episode(i, seed=None if seeds is None else seeds[i])

    def _reset_all(self) -> None:
        self._flush_full_steps()
        for ep in self._episodes:
            if ep is not None and not ep.is_done and (len(ep) or ep.agent_steps()):
                self._tally.dropped_episodes += 1
                self._tally.dropped_steps += len(ep)
        seeds = sub_env_seeds(self.config.seed, self.worker_index, self.num_envs, restart=self._num_resets)
        self._num_resets += 1
        self._last_obs: list[dict[Hashable, Any]] = [{} for _ in range(self.num_envs)]
        for i in range(self.num_envs):
            self._start_episode(i, seed=None if seeds is None else seeds[i])
        self._needs_reset = False

    def _start_episode(self, i: int, *, seed: int | None) -> None:
        env = self.envs[i]
        obs, infos = reset_output(env, env.reset(seed=seed))
        check_multi_agent_output(env, 0, obs, infos=infos, check_spaces=self.config.check_env_data)
        self._num_ids += 1
        ep = MultiAgentEpisode(
            f"{self._id_prefix}{self._num_ids}",
            observation_space={a: env.get_observation_space(a) for a in self.possible_agents},
            action_space={a: env.get_action_space(a) for a in self.possible_agents},
            agent_to_module_mapping_fn=self.ma_config.map_agent,
        )
        ep.add_env_reset(observations=obs, infos=infos)
        self._episodes[i] = ep
        self._full[i] = FullSteps.of(ep) if self.uses_full_steps else None
        self._states[i] = {}  # every agent starts from its module's initial state
        self._done_returns[i] = dict.fromkeys(obs, 0.0)
        self._last_obs[i] = dict(obs)

    def _add_rewards(self, i: int, obs: dict[Hashable, Any], rewards: dict[Hashable, Any]) -> None:
        """Every reward the env hands an agent, summed for the metrics: those that belong to no step
        too (before the agent's first observation: a poker player whose opponent folds at once wins
        without acting). An agent that got an observation is in the sums, with 0.0 if nothing more."""
        sums = self._done_returns[i]
        for aid, reward in rewards.items():
            sums[aid] = sums.get(aid, 0.0) + float(reward)
        if not obs.keys() <= sums.keys():
            for aid in obs:
                sums.setdefault(aid, 0.0)

    def _finish_metrics(self, out: list[MultiAgentEpisode], duration_s: float) -> None:
        t = self._tally
        module_steps: dict[str, int] = {}
        for ep in out:
            for aid, sa in ep.agent_episodes.items():
                mid = ep.module_for(aid)
                module_steps[mid] = module_steps.get(mid, 0) + len(sa)
        env_steps = sum(len(ep) for ep in out)
        self._metrics = MultiAgentRunnerMetrics(
            worker_index=self.worker_index,
            num_env_steps=env_steps,
            num_agent_steps=sum(ep.agent_steps() for ep in out),
            num_episodes=len(t.returns),
            episode_returns=t.returns,
            episode_lengths=t.lengths,
            agent_episode_returns=t.agent_returns,
            module_episode_returns=t.module_returns,
            num_module_steps=module_steps,
            num_episodes_dropped_env_error=t.dropped_episodes,
            num_env_steps_dropped=t.dropped_steps,
            num_sub_env_restarts=t.restarts,
            duration_s=duration_s,
            num_env_steps_per_s=env_steps / duration_s if duration_s > 0 else 0.0,
            weights_version=self.weights_version,
        )

    # ---------------------------------------------------------------- what EnvRunnerGroup calls
    def sample_columnar(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool = True,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> tuple[MultiAgentColumnar | None, MultiAgentRunnerMetrics]:
        """``sample()`` as one columnar object (what a remote runner ships), with the call's metrics."""
        request = SampleRequest(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        return self.collect(request)

    def collect(self, request: SampleRequest) -> tuple[MultiAgentColumnar | None, MultiAgentRunnerMetrics]:
        """``sample_columnar()`` for a request (what ``EnvRunnerGroup`` sends)."""
        episodes = self.sample(
            num_timesteps=request.num_timesteps,
            num_episodes=request.num_episodes,
            explore=request.explore,
            random_actions=request.random_actions,
            force_reset=request.force_reset,
        )
        return (multi_agent_episodes_to_columnar(episodes) if episodes else None), self._metrics

    def collect_to(self, replay: Any, request: SampleRequest) -> RunnerMetrics:
        """``collect()`` sent straight to a multi-agent replay actor; the metrics carry its ack (the
        chunks count as delivered only once stored). Chunks a dead replay did not take are held, in
        order, and go first to the replay of the next call."""
        col, metrics = self.collect(request)
        if col is not None:
            self._outbox.hold(col)
        ack = self._outbox.send(replay)
        running = sorted(ep.id_ for ep in self._episodes if ep is not None and not ep.is_done and ep.env_t > 0)
        return dataclasses.replace(
            metrics,
            replay=ack,
            num_env_steps_held_for_replay=self._outbox.num_env_steps,
            running_episode_ids=running,
        )

    def get_state(self) -> dict[str, Any]:
        """Every module's weights (``{"module": {module_id: state}}``), each module's env-to-module
        connector states (``{"env_to_module": {module_id: state}}``: its MeanStdFilter's moments) and
        the weights version."""
        return {
            "module": self.get_weights(),
            "env_to_module": {mid: p.env_to_module.get_state() for mid, p in self.policies.items()},
            "module_to_env": {},
            "weights_version": self.weights_version,
        }

    def set_state(self, state: dict[str, Any]) -> int:
        """Loads any of ``get_state()``'s keys, and ``multi_agent`` (a new MultiAgentConfig: see
        ``set_multi_agent``); returns the weights version now in use."""
        if "multi_agent" in state:
            self.set_multi_agent(state["multi_agent"])
        for mid, pipeline_state in state.get("env_to_module", {}).items():
            if mid in self.policies:
                self.policies[mid].env_to_module.set_state(pipeline_state)
        if "module" in state:
            self.set_weights(state["module"], version=self.weights_version)
        if "weights_version" in state:
            self.weights_version = int(state["weights_version"])
        return self.weights_version

    def drain(self) -> tuple[list[MultiAgentEpisode], int]:
        """What no ``sample()`` returned yet, for scale-down: (chunks to ship, episodes dropped). Truncate
        mode ships the running episodes' unshipped steps as chunks; complete mode ships the finished
        episodes held back and drops (and counts) the running ones. The runner starts afresh afterwards."""
        out = [ep for col in self._outbox.take() for ep in unpack_columnar(col)]
        out += self._held
        self._held = []
        self._flush_full_steps()
        dropped = 0
        truncate = self.config.batch_mode is BatchMode.TRUNCATE_EPISODES
        for ep in self._episodes:
            if ep is None or ep.is_done or not (len(ep) or ep.agent_steps()):
                continue
            if truncate:
                out.append(ep)
            else:
                dropped += 1
        self._needs_reset = True
        self._episodes = [None] * self.num_envs
        self._full = [None] * self.num_envs
        return out, dropped

    def ping(self) -> int:
        """Cheap liveness check; returns the worker index."""
        return self.worker_index

    def stop(self) -> None:
        for env in self.envs:
            env.close()


@dataclasses.dataclass
class _Tally:
    """One call's sums: finished episodes' returns (whole, per agent, per module) and what was dropped."""

    env_steps: int = 0
    returns: list[float] = dataclasses.field(default_factory=list)
    lengths: list[int] = dataclasses.field(default_factory=list)
    agent_returns: dict[Hashable, list[float]] = dataclasses.field(default_factory=dict)
    module_returns: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    dropped_episodes: int = 0
    dropped_steps: int = 0
    restarts: int = 0

    def finish(self, ep: MultiAgentEpisode, agent_sums: dict[Hashable, float]) -> None:
        self.returns.append(float(sum(agent_sums.values())))
        self.lengths.append(ep.env_t)
        per_module: dict[str, float] = {}
        for aid, r in agent_sums.items():
            self.agent_returns.setdefault(aid, []).append(r)
            mid = ep.module_for(aid)
            per_module[mid] = per_module.get(mid, 0.0) + r
        for mid, r in per_module.items():
            self.module_returns.setdefault(mid, []).append(r)
