"""What an EnvRunner derives from its config: its module, its lookback, and which engine its calls take."""

from __future__ import annotations

from typing import Any

from connectors.connector_v2 import piece_name
from connectors.env_to_module import EnvToModulePiece
from ray_sampler.data.spaces import check_flattenable
from ray_sampler.errors import ConfigError
from ray_sampler.modules import MLPModule
from ray_sampler.modules.rl_module import initial_state, is_stateful
from ray_sampler.policy import Policy
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig

__all__ = [
    "build_module",
    "build_policy",
    "lookback_horizon",
    "set_torch_threads",
    "vectorized_fallback",
    "view_lookback_steps",
]


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


def build_policy(
    config: EnvRunnerConfig,
    observation_space: Any,
    action_space: Any,
    *,
    weights: Any = None,
    connector_state: Any = None,
    seed: int | None = None,
    info: dict[str, Any] | None = None,
) -> Policy:
    """The Policy a runner of ``config`` acts with on these (env) spaces: its module (built as
    ``build_module`` builds it) loaded with ``weights``, its env-to-module pieces (copies) with
    ``connector_state`` (the pipeline's ``get_state()``), its module-to-env pieces and settings."""
    module_class = config.module_class or MLPModule
    module_config = dict(config.module_config)
    if module_class is MLPModule:
        module_config.setdefault("seed", config.seed)
    return Policy.build(
        module_class,
        observation_space=observation_space,
        action_space=action_space,
        module_config=module_config,
        env_to_module_connectors=config.env_to_module_connectors,
        module_to_env_connectors=config.module_to_env_connectors,
        normalize_actions=config.normalize_actions,
        seed=seed,
        weights=weights,
        connector_state=connector_state,
        info=info,
    )


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


def set_torch_threads(module: Any, num_threads: int) -> None:
    """One runner's torch intra-op threads (``EnvRunnerConfig.num_torch_threads``), for a torch module."""
    if getattr(module, "framework", None) == "torch":
        import torch

        torch.set_num_threads(num_threads)
