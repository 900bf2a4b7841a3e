"""Frozen, validated configs: EnvRunnerConfig (one runner) and EnvRunnerGroupConfig (the fleet).

Every field is checked in ``__post_init__``; a bad value raises ConfigError naming the field,
what is allowed and what came, before any actor starts.

>>> EnvRunnerConfig(env="CartPole-v1", rollout_fragment_length=0)
Traceback (most recent call last):
...
ray_sampler.errors.ConfigError: 'rollout_fragment_length' must be an int >= 1 (got 0)
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from ray_sampler.errors import ConfigError
from ray_sampler.resources import PlacementStrategy
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.sub_env_limits import check_num_envs_cap
from ray_sampler.validate import (
    check_bool,
    check_callable,
    check_dict,
    check_enum,
    check_int,
    check_number,
    check_optional,
    check_pieces,
    replace_field,
)

__all__ = [
    "BatchMode",
    "CountStepsBy",
    "EnvRunnerConfig",
    "EnvRunnerGroupConfig",
    "PlacementStrategy",
    "VectorizationMode",
]


class BatchMode(str, enum.Enum):
    """How ``EnvRunner.sample()`` cuts what it returns."""

    TRUNCATE_EPISODES = "truncate_episodes"
    COMPLETE_EPISODES = "complete_episodes"


class CountStepsBy(str, enum.Enum):
    """What ``rollout_fragment_length`` counts (equal for one agent)."""

    ENV_STEPS = "env_steps"
    AGENT_STEPS = "agent_steps"


class VectorizationMode(str, enum.Enum):
    """How sub-envs are vectorized: our SyncVectorEnv of single envs, or the env's own vector class."""

    SYNC = "sync"
    VECTOR_ENTRY_POINT = "vector_entry_point"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvRunnerConfig:
    """What one EnvRunner steps and how it samples."""

    env: str | Callable[..., Any]
    """A gymnasium id, a name given to ``register_env``, or a callable ``creator(env_config) -> gymnasium.Env``."""
    env_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Passed to the creator (with ``worker_index``, ``vector_index``, ``num_workers`` added), or as
    keyword arguments to ``gymnasium.make`` for a gymnasium id."""
    num_envs_per_env_runner: int = 1
    """Sub-envs each runner steps as one vector env: at most 65,536 in ``"sync"`` mode, and no more than
    the largest node's memory holds (checked before they are built; see ``sub_env_limits``)."""
    vectorization_mode: VectorizationMode | str = VectorizationMode.SYNC
    """``"sync"``: a SyncVectorEnv of single envs; ``"vector_entry_point"``: the env's native vector class."""
    rollout_fragment_length: int = 200
    """Steps per sub-env that one ``sample()`` collects by default."""
    batch_mode: BatchMode | str = BatchMode.TRUNCATE_EPISODES
    """``"truncate_episodes"``: exactly ``rollout_fragment_length x num_envs`` steps, cut with lookback;
    ``"complete_episodes"``: at least that many, finished episodes only."""
    count_steps_by: CountStepsBy | str = CountStepsBy.ENV_STEPS
    """``"env_steps"`` or ``"agent_steps"`` (the same for single-agent envs)."""
    episode_lookback_horizon: int | None = None
    """Steps of lookback each continuation chunk keeps (truncate mode). None (default): 1, or the most
    ``lookback_steps`` an env-to-module piece reads (``FrameStackingEnvToModule(num_frames=k)``
    reads k - 1); a smaller explicit value is refused."""
    max_episode_steps: int | None = None
    """Horizon: an episode reaching it ends with ``truncated=True`` and the env is reset (not with
    ``soft_horizon``); None keeps the env's own."""
    soft_horizon: bool = False
    """At ``max_episode_steps`` (required) the episode is cut (``truncated=True``) but the env is not
    reset: the next episode (new id) goes on from its last observation (see ``horizon``)."""
    no_done_at_end: bool = False
    """Record an env's ``terminated=True`` as ``truncated=True``, so learners bootstrap through every
    end (the env still ends and resets as usual; see ``horizon``)."""
    seed: int | None = 0
    """Base seed; sub-env ``(worker_index, vector_index)`` and the policy get distinct streams from it.
    None: unseeded."""
    module_class: type | None = None
    """RLModule class built as ``module_class(observation_space, action_space, **module_config)``;
    None: the built-in numpy MLP."""
    module_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the module class."""
    num_torch_threads: int = 1
    """Intra-op threads of a torch module's forward passes in each runner (``torch.set_num_threads``,
    set when the runner builds a torch module; a runner in the driver's process sets the driver's):
    one per runner, so runners on one node do not oversubscribe its cores."""
    env_to_module_connectors: tuple[Any, ...] = ()
    """User ConnectorV2 pieces that run before the default env-to-module pieces."""
    module_to_env_connectors: tuple[Any, ...] = ()
    """User ConnectorV2 pieces that run before the default module-to-env pieces."""
    normalize_actions: bool = False
    """Box actions: True treats module actions as in [-1, 1] and unsquashes them to the space's bounds;
    False clips them to the bounds. The episode keeps what the module produced either way."""
    columnar_sampling: bool = True
    """Truncate mode with the default connectors records whole vector steps as arrays and builds
    the chunks in bulk (same result, far less Python per step); False always builds episodes step by step."""
    restart_failed_sub_environments: bool = False
    """A sub-env raising in ``reset()``/``step()`` is rebuilt through the creator (same indices, fresh
    seed) and its running episode's unshipped steps are dropped and counted; False: ``sample()``
    raises ``EnvError`` and the next call starts every sub-env afresh."""
    check_env_data: bool = True
    """Refuse NaN or inf in rewards and observations at every step: ``sample()`` raises ``EnvError``
    naming the sub-env and its data is dropped and counted (see ``env_check``); False lets it through."""
    multi_agent: Any = None
    """A ``MultiAgentConfig``: the modules of a multi-agent env and which agent each acts for
    (``MultiAgentEnvRunner``); None: one module, ``"default_policy"``, for every agent (EnvRunnerGroup
    sets that itself for a multi-agent env). Single-agent runners ignore it. (Typed ``Any`` so that
    the command line, which has no form for mapping functions, leaves it out.)"""
    external: ExternalConfig | None = None
    """Serve simulators outside Ray instead of stepping ``env``: the group's runners are
    ``ExternalEnvRunner``s listening for clients (docs/external.md); ``env`` then only gives the spaces."""
    check_env_first_steps: int = 100
    """Check each sub-env's first calls (its resets included; a rebuilt sub-env starts again): an
    observation outside ``observation_space`` raises ``EnvError`` naming the sub-env and what the space
    holds (``space.contains``: a float64 array for a float32 Box is outside). 0 turns it off. Sync
    vector envs only (``vectorization_mode="sync"``); ``reset()``/``step()`` of the wrong form are
    refused always."""

    def __post_init__(self) -> None:
        if not (isinstance(self.env, str) and self.env):
            check_callable("env", self.env, "a gymnasium id, a registered env name or a callable creator")
        check_dict("env_config", self.env_config)
        check_int("num_envs_per_env_runner", self.num_envs_per_env_runner, minimum=1)
        check_int("rollout_fragment_length", self.rollout_fragment_length, minimum=1)
        check_int("check_env_first_steps", self.check_env_first_steps, minimum=0)
        for name in ("env_to_module_connectors", "module_to_env_connectors"):
            replace_field(self, name, check_pieces(name, getattr(self, name)))
        _set_lookback_horizon(self)
        check_optional(check_int, "max_episode_steps", self.max_episode_steps, minimum=1)
        check_bool("soft_horizon", self.soft_horizon)
        check_bool("no_done_at_end", self.no_done_at_end)
        if self.soft_horizon and self.max_episode_steps is None:
            raise ConfigError(
                "'soft_horizon' is True, which needs 'max_episode_steps' (the horizon it cuts at) to be an "
                "int >= 1 (got None)"
            )
        check_optional(check_int, "seed", self.seed, minimum=0)
        replace_field(
            self, "vectorization_mode", check_enum("vectorization_mode", VectorizationMode, self.vectorization_mode)
        )
        check_num_envs_cap(self.num_envs_per_env_runner, is_sync=self.vectorization_mode is VectorizationMode.SYNC)
        replace_field(self, "batch_mode", check_enum("batch_mode", BatchMode, self.batch_mode))
        replace_field(self, "count_steps_by", check_enum("count_steps_by", CountStepsBy, self.count_steps_by))
        check_optional(check_callable, "module_class", self.module_class)
        check_dict("module_config", self.module_config)
        check_int("num_torch_threads", self.num_torch_threads, minimum=1)
        check_bool("normalize_actions", self.normalize_actions)
        check_bool("columnar_sampling", self.columnar_sampling)
        check_bool("restart_failed_sub_environments", self.restart_failed_sub_environments)
        check_bool("check_env_data", self.check_env_data)
        if self.external is not None and not isinstance(self.external, ExternalConfig):
            raise ConfigError(f"'external' must be an ExternalConfig or None (got {self.external!r})")
        if self.multi_agent is not None and not isinstance(self.multi_agent, MultiAgentConfig):
            raise ConfigError(f"'multi_agent' must be a MultiAgentConfig or None (got {self.multi_agent!r})")


def _set_lookback_horizon(config: EnvRunnerConfig) -> None:
    """``episode_lookback_horizon``: derived from the env-to-module pieces when None, else checked
    against them (a smaller one would fill frames that exist with zeros after every cut)."""
    needs = [(int(p.lookback_steps), p) for p in config.env_to_module_connectors if hasattr(p, "lookback_steps")]
    need, piece = max(needs, key=lambda x: x[0]) if needs else (0, None)
    if config.episode_lookback_horizon is None:
        replace_field(config, "episode_lookback_horizon", max(1, need))
        return
    horizon = check_int("episode_lookback_horizon", config.episode_lookback_horizon, minimum=0)
    if horizon < need:
        raise ConfigError(
            f"'episode_lookback_horizon' must be an int >= {need} for {piece!r}, which reads {need} steps back "
            f"(got {horizon}); leave it None to derive it"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvRunnerGroupConfig:
    """The fleet of runner actors."""

    num_env_runners: int = 2
    """Remote runner actors to start."""
    num_cpus_per_env_runner: float = 1.0
    """CPUs each runner actor reserves."""
    custom_resources_per_env_runner: dict[str, float] = dataclasses.field(default_factory=dict)
    """Custom Ray resources each runner reserves beside its CPUs (e.g. ``{"env_node": 1}``)."""
    placement_strategy: PlacementStrategy = PlacementStrategy.SPREAD
    """How the runners' bundles (one placement group per ``scale()`` that adds runners) go over the
    nodes: ``SPREAD`` over as many as possible, ``PACK`` onto few, or Ray's ``STRICT_`` forms."""
    sample_timeout_s: float = 60.0
    """Deadline of one ``EnvRunnerGroup.sample()`` (and of weight syncs)."""
    actor_start_timeout_s: float = 120.0
    """Deadline for new runner actors to come up."""
    validate_env_locally: bool = True
    """Create the sub-envs once in the driver before any actor starts, to catch bad creators early."""
    check_env: bool = True
    """With ``validate_env_locally``, also check the env on the driver before any actor starts
    (gymnasium's env checker, then a few hundred seeded random steps refusing NaN or inf, observations
    outside the space, non-number rewards, non-bool flags: ``EnvCheckError``); see ``env_check``."""
    keep_sampling: bool = False
    """Send a runner its next ``sample()`` as soon as its result is collected, so it samples while the
    driver works. Runners are then one request ahead: a call's arguments apply from the next call
    on (each result's metrics carry the ``sample_kwargs`` it used; ``force_reset`` is never
    repeated), and a result may be one weights version behind (see ``max_policy_lag``)."""
    max_requests_in_flight_per_env_runner: int = 1
    """With ``keep_sampling``: requests each runner holds at once (RLlib's name). 2 queues the next
    request in the runner's actor behind the one it samples, so it starts at once, without waiting
    for the driver to collect the last; the answers it gives are then up to this many requests
    ahead (a weights version sent lands after the requests queued before it)."""
    restart_failed_env_runners: bool = True
    """Replace a runner whose actor dies or whose call raises by a new actor under the same
    ``worker_index``; False: the first failure raises ``EnvRunnerFailedError``."""
    max_num_env_runner_restarts: int = 1000
    """Replacements allowed over the group's life (all runners together); one more failure raises
    ``EnvRunnerFailedError``."""
    delay_between_env_runner_restarts_s: float = 0.1
    """Pause before each replacement starts, so that a runner failing at once again does not spin
    (bounded by the running call's deadline)."""

    def __post_init__(self) -> None:
        check_int("num_env_runners", self.num_env_runners, minimum=0)
        for name in ("num_cpus_per_env_runner", "sample_timeout_s", "actor_start_timeout_s"):
            check_number(name, getattr(self, name), minimum=0, exclusive_minimum=True)
        check_dict("custom_resources_per_env_runner", self.custom_resources_per_env_runner)
        for key, amount in self.custom_resources_per_env_runner.items():
            if not isinstance(key, str) or not key or key in ("CPU", "GPU"):
                raise ConfigError(
                    "'custom_resources_per_env_runner' keys must be custom resource names, not 'CPU' or 'GPU' "
                    f"(got {key!r})"
                )
            check_number(f"custom_resources_per_env_runner[{key!r}]", amount, minimum=0)
        replace_field(
            self, "placement_strategy", check_enum("placement_strategy", PlacementStrategy, self.placement_strategy)
        )
        check_bool("validate_env_locally", self.validate_env_locally)
        check_bool("check_env", self.check_env)
        check_bool("keep_sampling", self.keep_sampling)
        check_int("max_requests_in_flight_per_env_runner", self.max_requests_in_flight_per_env_runner, minimum=1)
        if self.max_requests_in_flight_per_env_runner > 1 and not self.keep_sampling:
            raise ConfigError(
                "'max_requests_in_flight_per_env_runner' > 1 needs 'keep_sampling' (requests are queued ahead); got "
                f"{self.max_requests_in_flight_per_env_runner} without it"
            )
        check_bool("restart_failed_env_runners", self.restart_failed_env_runners)
        check_int("max_num_env_runner_restarts", self.max_num_env_runner_restarts, minimum=0)
        check_number("delay_between_env_runner_restarts_s", self.delay_between_env_runner_restarts_s, minimum=0)
