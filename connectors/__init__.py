"""ConnectorV2 pieces and pipelines: env-to-module, module-to-env, learner, and pieces common to several."""

from connectors.common import MeanStdFilter
from connectors.connector_v2 import ConnectorV2
from connectors.env_to_module import (
    AddObservationsFromEpisodesToBatch,
    EnvToModulePiece,
    FilterObservationKeys,
    FlattenObservations,
    FrameStackingEnvToModule,
    PrevActionsPrevRewardsEnvToModule,
    RunningEpisodesView,
    default_env_to_module,
    flatten_batch,
)
from connectors.learner import (
    DEFAULT_MODULE_ID,
    AddColumnsFromEpisodesToTrainBatch,
    AddNextObservationsFromEpisodesToTrainBatch,
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    FrameStacking,
    GeneralAdvantageEstimation,
    NStepReturns,
    PrevActionsPrevRewards,
)
from connectors.module_to_env import GetActions, NormalizeAndClipActions, default_module_to_env
from connectors.pipeline import ConnectorPipelineV2

__all__ = [
    "DEFAULT_MODULE_ID",
    "AddColumnsFromEpisodesToTrainBatch",
    "AddNextObservationsFromEpisodesToTrainBatch",
    "AddObservationsFromEpisodesToBatch",
    "AddStatesFromEpisodesToBatch",
    "AddTimeDimToBatchAndZeroPad",
    "ConnectorPipelineV2",
    "ConnectorV2",
    "EnvToModulePiece",
    "FilterObservationKeys",
    "FlattenObservations",
    "FrameStacking",
    "FrameStackingEnvToModule",
    "GeneralAdvantageEstimation",
    "GetActions",
    "MeanStdFilter",
    "NStepReturns",
    "NormalizeAndClipActions",
    "PrevActionsPrevRewards",
    "PrevActionsPrevRewardsEnvToModule",
    "RunningEpisodesView",
    "default_env_to_module",
    "default_module_to_env",
    "flatten_batch",
]
