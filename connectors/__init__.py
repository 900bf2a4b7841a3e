"""ConnectorV2 pieces and pipelines: env-to-module, module-to-env (and learner pieces, issue #5)."""

# ray_sampler's package imports these modules (its EnvRunner builds pipelines) and they import
# ray_sampler's helpers: loading ray_sampler first keeps one import order whichever comes first.
import ray_sampler  # noqa: F401  isort: skip
from connectors.connector_v2 import ConnectorV2
from connectors.learner import (
    DEFAULT_MODULE_ID,
    AddColumnsFromEpisodesToTrainBatch,
    AddNextObservationsFromEpisodesToTrainBatch,
    FrameStacking,
    GeneralAdvantageEstimation,
    NStepReturns,
    PrevActionsPrevRewards,
)
from connectors.mean_std_filter import MeanStdFilter
from connectors.env_to_module import (
    AddObservationsFromEpisodesToBatch,
    FlattenObservations,
    default_env_to_module,
    flatten_batch,
)
from connectors.module_to_env import GetActions, NormalizeAndClipActions, default_module_to_env
from connectors.pipeline import ConnectorPipelineV2

__all__ = [
    "DEFAULT_MODULE_ID",
    "AddColumnsFromEpisodesToTrainBatch",
    "AddNextObservationsFromEpisodesToTrainBatch",
    "AddObservationsFromEpisodesToBatch",
    "ConnectorPipelineV2",
    "ConnectorV2",
    "FlattenObservations",
    "FrameStacking",
    "GeneralAdvantageEstimation",
    "MeanStdFilter",
    "NStepReturns",
    "PrevActionsPrevRewards",
    "GetActions",
    "NormalizeAndClipActions",
    "default_env_to_module",
    "default_module_to_env",
    "flatten_batch",
]
