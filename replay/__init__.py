"""The episode replay buffer (storage, samplers, Parquet persistence), its rate limiter and the ReplayActor."""

from replay.actor import ReplayActor, ReplayConfig, create_replay_actor
from replay.buffer import BatchList, EpisodeReplayBuffer
from replay.metrics import AddAck, BufferMetrics, ReplayMetrics
from replay.n_step import n_step_transitions
from replay.persistence import Checkpoint, remove_stale_temp_files, restore_buffer, restore_checkpoint, save_buffer
from replay.prioritized import PrioritizedEpisodeReplayBuffer
from replay.prioritized_sampler import PrioritizedSampler
from replay.rate_limiter import RateLimiter
from replay.sampler import Draw, Sampler
from replay.segments import SegmentTable, SegmentView
from replay.state import ReplayState
from replay.storage import EpisodeStorage, StoredEpisode
from replay.sum_tree import SumTree
from replay.uniform import UniformSampler

__all__ = [
    "AddAck",
    "BatchList",
    "BufferMetrics",
    "Checkpoint",
    "Draw",
    "EpisodeReplayBuffer",
    "EpisodeStorage",
    "PrioritizedEpisodeReplayBuffer",
    "PrioritizedSampler",
    "RateLimiter",
    "ReplayActor",
    "ReplayConfig",
    "ReplayMetrics",
    "ReplayState",
    "Sampler",
    "SegmentTable",
    "SegmentView",
    "StoredEpisode",
    "SumTree",
    "UniformSampler",
    "create_replay_actor",
    "n_step_transitions",
    "remove_stale_temp_files",
    "restore_buffer",
    "restore_checkpoint",
    "save_buffer",
]
