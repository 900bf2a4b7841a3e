"""The episode replay buffer (storage, sampling, Parquet persistence), its rate limiter and the ReplayActor."""

from replay.actor import ReplayActor, ReplayConfig, create_replay_actor
from replay.buffer import EpisodeReplayBuffer
from replay.persistence import restore_buffer, save_buffer
from replay.prioritized import PrioritizedEpisodeReplayBuffer, SumTree
from replay.rate_limiter import RateLimiter
from replay.storage import EpisodeStorage, StoredEpisode

__all__ = [
    "EpisodeReplayBuffer",
    "EpisodeStorage",
    "PrioritizedEpisodeReplayBuffer",
    "RateLimiter",
    "ReplayActor",
    "ReplayConfig",
    "StoredEpisode",
    "SumTree",
    "create_replay_actor",
    "restore_buffer",
    "save_buffer",
]
