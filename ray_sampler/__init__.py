"""ray-sampler: distributed experience collection for RL on Ray actors (RLlib new-API-stack names)."""

from ray_sampler.arrow_format import SCHEMA_VERSION, arrow_to_columnar, columnar_to_arrow
from ray_sampler.columnar import ColumnarEpisodes, columnar_to_episodes, episodes_to_columnar
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

__all__ = [
    "SCHEMA_VERSION",
    "ColumnarEpisodes",
    "ConfigError",
    "DataFormatError",
    "EnvCreatorError",
    "EpisodeError",
    "LookbackBuffer",
    "RaySamplerError",
    "SingleAgentEpisode",
    "SpaceError",
    "arrow_to_columnar",
    "columnar_to_arrow",
    "columnar_to_episodes",
    "episodes_to_columnar",
]
