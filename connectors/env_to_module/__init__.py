"""Env-to-module pieces: history views of the running episodes, the latest observation, then flattening."""

from connectors.env_to_module.add_observations import AddObservationsFromEpisodesToBatch
from connectors.env_to_module.default_pipeline import default_env_to_module, env_to_module_observation_space
from connectors.env_to_module.filter_observation_keys import FilterObservationKeys
from connectors.env_to_module.flatten_observations import FlattenObservations, flatten_batch
from connectors.env_to_module.frame_stacking import FrameStackingEnvToModule, stacked_space
from connectors.env_to_module.prev_actions_prev_rewards import PrevActionsPrevRewardsEnvToModule
from connectors.env_to_module.running_view import RUNNING_VIEW_KEY, EnvToModulePiece, RunningEpisodesView

__all__ = [
    "RUNNING_VIEW_KEY",
    "AddObservationsFromEpisodesToBatch",
    "EnvToModulePiece",
    "FilterObservationKeys",
    "FlattenObservations",
    "FrameStackingEnvToModule",
    "PrevActionsPrevRewardsEnvToModule",
    "RunningEpisodesView",
    "default_env_to_module",
    "env_to_module_observation_space",
    "flatten_batch",
    "stacked_space",
]
