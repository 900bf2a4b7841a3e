"""The episode replay buffer (storage + sampling); the ReplayActor and Parquet persistence follow (issue #4)."""

from replay.buffer import EpisodeReplayBuffer
from replay.storage import EpisodeStorage, StoredEpisode

__all__ = ["EpisodeReplayBuffer", "EpisodeStorage", "StoredEpisode"]
