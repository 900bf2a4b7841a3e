"""ray-sampler: distributed experience collection for RL on Ray actors (RLlib new-API-stack names)."""

from ray_sampler.arrow_format import SCHEMA_VERSION, arrow_to_columnar, columnar_to_arrow
from ray_sampler.columnar import ColumnarEpisodes, columnar_to_episodes, episodes_to_columnar
from ray_sampler.config import BatchMode, CountStepsBy, EnvRunnerConfig, EnvRunnerGroupConfig, VectorizationMode
from ray_sampler.env_creator import EnvContext, register_env
from ray_sampler.env_runner import EnvRunner
from ray_sampler.env_runner_group import EnvRunnerGroup, SampleTimeoutError
from ray_sampler.episode import SingleAgentEpisode
from ray_sampler.errors import (
    ConfigError,
    DataFormatError,
    EnvCreatorError,
    EpisodeError,
    RaySamplerError,
    SpaceError,
)
from ray_sampler.lookback import LookbackBuffer
from ray_sampler.module import MLPModule, RandomModule, RLModule

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
    "LookbackBuffer",
    "MLPModule",
    "RLModule",
    "RandomModule",
    "RaySamplerError",
    "SampleTimeoutError",
    "SingleAgentEpisode",
    "SpaceError",
    "VectorizationMode",
    "register_env",
    "arrow_to_columnar",
    "columnar_to_arrow",
    "columnar_to_episodes",
    "episodes_to_columnar",
]
