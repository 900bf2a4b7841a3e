"""Env-to-module pieces: the latest observation of each episode into a forward batch, then flattening."""

from connectors.env_to_module.add_observations import AddObservationsFromEpisodesToBatch
from connectors.env_to_module.default_pipeline import default_env_to_module
from connectors.env_to_module.flatten_observations import FlattenObservations, flatten_batch

__all__ = ["AddObservationsFromEpisodesToBatch", "FlattenObservations", "default_env_to_module", "flatten_batch"]
