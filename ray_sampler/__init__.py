"""ray-sampler: distributed experience collection for RL on Ray actors (RLlib new-API-stack names).

The public names load lazily, each from its layer (``ray_sampler.data``, ``.modules``,
``.sampling``), so ``import ray_sampler.data`` stays free of Ray and pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ray_sampler.errors import (
    ConfigError,
    DataFormatError,
    EnvCreatorError,
    EpisodeError,
    MultiAgentEnvError,
    RaySamplerError,
    ReplayError,
    SpaceError,
)

if TYPE_CHECKING:
    from ray_sampler.data import (
        SCHEMA_VERSION,
        ColumnarEpisodes,
        InfiniteLookbackBuffer,
        LookbackBuffer,
        MultiAgentEpisode,
        SingleAgentEpisode,
        arrow_to_columnar,
        columnar_to_arrow,
        columnar_to_episodes,
        episodes_to_columnar,
    )
    from ray_sampler.modules import MLPModule, QModule, RandomModule, RLModule
    from ray_sampler.sampling import (
        BatchMode,
        CountStepsBy,
        EnvContext,
        EnvRunner,
        EnvRunnerConfig,
        EnvRunnerGroup,
        EnvRunnerGroupConfig,
        MultiAgentConfig,
        MultiAgentEnv,
        MultiAgentEnvRunner,
        SampleTimeoutError,
        VectorizationMode,
        make_multi_agent,
        register_env,
    )

_LAYER_OF = {
    **dict.fromkeys(
        (
            "SCHEMA_VERSION",
            "ColumnarEpisodes",
            "InfiniteLookbackBuffer",
            "LookbackBuffer",
            "MultiAgentEpisode",
            "SingleAgentEpisode",
            "arrow_to_columnar",
            "columnar_to_arrow",
            "columnar_to_episodes",
            "episodes_to_columnar",
        ),
        "ray_sampler.data",
    ),
    **dict.fromkeys(("MLPModule", "QModule", "RLModule", "RandomModule"), "ray_sampler.modules"),
    **dict.fromkeys(
        (
            "BatchMode",
            "CountStepsBy",
            "EnvContext",
            "EnvRunner",
            "EnvRunnerConfig",
            "EnvRunnerGroup",
            "EnvRunnerGroupConfig",
            "MultiAgentConfig",
            "MultiAgentEnv",
            "MultiAgentEnvRunner",
            "SampleTimeoutError",
            "VectorizationMode",
            "make_multi_agent",
            "register_env",
        ),
        "ray_sampler.sampling",
    ),
}

__all__ = [
    "SCHEMA_VERSION",
    "BatchMode",
    "ColumnarEpisodes",
    "ConfigError",
    "CountStepsBy",
    "DataFormatError",
    "EnvContext",
    "EnvCreatorError",
    "EnvRunner",
    "EnvRunnerConfig",
    "EnvRunnerGroup",
    "EnvRunnerGroupConfig",
    "EpisodeError",
    "InfiniteLookbackBuffer",
    "LookbackBuffer",
    "MLPModule",
    "MultiAgentConfig",
    "MultiAgentEnv",
    "MultiAgentEnvError",
    "MultiAgentEnvRunner",
    "MultiAgentEpisode",
    "QModule",
    "RLModule",
    "RandomModule",
    "RaySamplerError",
    "ReplayError",
    "SampleTimeoutError",
    "SingleAgentEpisode",
    "SpaceError",
    "VectorizationMode",
    "arrow_to_columnar",
    "columnar_to_arrow",
    "columnar_to_episodes",
    "episodes_to_columnar",
    "make_multi_agent",
    "register_env",
]


def __getattr__(name: str) -> Any:
    layer = _LAYER_OF.get(name)
    if layer is None:
        raise AttributeError(f"module 'ray_sampler' has no attribute {name!r}")
    value = getattr(importlib.import_module(layer), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
