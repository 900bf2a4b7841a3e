"""The data layer: episodes, their lookback buffer, the columnar transfer form and its Arrow schema.

Nothing here imports Ray; pyarrow loads only when an Arrow name is first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ray_sampler.data.columnar import ColumnarEpisodes, columnar_to_episodes, concat_columnar, episodes_to_columnar
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.lookback import InfiniteLookbackBuffer, LookbackBuffer
from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar, pack_episodes, unpack_columnar
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode

if TYPE_CHECKING:
    from ray_sampler.data.arrow_format import SCHEMA_VERSION, arrow_to_columnar, columnar_to_arrow

__all__ = [
    "SCHEMA_VERSION",
    "ColumnarEpisodes",
    "Columns",
    "InfiniteLookbackBuffer",
    "LookbackBuffer",
    "MultiAgentColumnar",
    "MultiAgentEpisode",
    "SingleAgentEpisode",
    "arrow_to_columnar",
    "columnar_to_arrow",
    "columnar_to_episodes",
    "concat_columnar",
    "episodes_to_columnar",
    "pack_episodes",
    "unpack_columnar",
]

_ARROW_NAMES = frozenset({"SCHEMA_VERSION", "arrow_to_columnar", "columnar_to_arrow"})


def __getattr__(name: str) -> Any:
    if name in _ARROW_NAMES:
        return getattr(importlib.import_module("ray_sampler.data.arrow_format"), name)
    raise AttributeError(f"module 'ray_sampler.data' has no attribute {name!r}")
