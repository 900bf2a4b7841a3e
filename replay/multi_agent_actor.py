"""MultiAgentReplayActor: the multi-agent replay buffer as a Ray actor that runners add to directly.

A plain class (the actor is ``ray.remote(MultiAgentReplayActor)``; ``create_multi_agent_replay_actor``
starts one). Multi-agent runners send their chunks straight to it
(``EnvRunnerGroup.sample_to_replay``); it copies them into its own storage, so what it stored
outlives the runner that sent it, and answers with the single-agent actor's ``AddAck`` (env steps
kept after eviction: only those count as delivered). ``save(path)`` writes a checkpoint
(replay.multi_agent_persistence); an actor started with ``checkpoint_path`` restores from it if it
exists. It has no rate limiter yet: adds never wait.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar
from replay.metrics import AddAck
from replay.multi_agent_buffer import MultiAgentEpisodeReplayBuffer
from replay.multi_agent_persistence import restore_multi_agent_buffer, save_multi_agent_buffer

__all__ = ["ModuleReplay", "MultiAgentReplayActor", "create_multi_agent_replay_actor"]


class MultiAgentReplayActor:
    """A MultiAgentEpisodeReplayBuffer behind one lock (see the module docstring)."""

    def __init__(
        self, *, capacity_env_steps: int = 10**6, seed: int | None = None, checkpoint_path: str | None = None
    ) -> None:
        self.checkpoint_path = checkpoint_path
        if checkpoint_path is not None and Path(checkpoint_path).exists():
            self.buffer = restore_multi_agent_buffer(checkpoint_path)
        else:
            self.buffer = MultiAgentEpisodeReplayBuffer(capacity_env_steps=capacity_env_steps, seed=seed)
        self._lock = threading.Lock()
        self.num_env_steps_received = 0

    def add(self, data: MultiAgentColumnar | list[Any] | None) -> AddAck:
        """Stores a runner's chunks (all or none); a small ack."""
        with self._lock:
            if data is None:
                return AddAck(
                    num_env_steps=0, num_env_steps_received=0, waited_s=0.0,
                    num_env_steps_stored=self.buffer.get_num_timesteps(),
                )  # fmt: skip
            received = data.num_env_steps if isinstance(data, MultiAgentColumnar) else sum(len(e) for e in data)
            skipped_before = self.buffer.num_duplicate_chunks_skipped
            kept = self.buffer.add(data)
            if self.buffer.num_duplicate_chunks_skipped > skipped_before:
                received = kept  # a re-sent chunk is no new step
            self.num_env_steps_received += received
            return AddAck(
                num_env_steps=kept, num_env_steps_received=received, waited_s=0.0,
                num_env_steps_stored=self.buffer.get_num_timesteps(),
            )  # fmt: skip

    def sample(self, batch_size_B: int, **kwargs: Any) -> dict[str, dict[str, Any]]:
        """``MultiAgentEpisodeReplayBuffer.sample``."""
        with self._lock:
            return self.buffer.sample(batch_size_B, **kwargs)

    def sample_batches(
        self, batch_size_B: int, num_batches: int, *, module_id: str, timeout_s: float | None = None, **kwargs: Any
    ) -> Any:
        """``MultiAgentEpisodeReplayBuffer.sample_batches`` (``timeout_s`` is taken for the single-agent
        actor's signature: with no rate limiter, a sample never waits)."""
        with self._lock:
            return self.buffer.sample_batches(batch_size_B, num_batches, module_id=module_id, **kwargs)

    def get_counts(self) -> dict[str, Any]:
        """Env steps and agent steps stored (per module too), episodes, evictions, steps received."""
        with self._lock:
            b = self.buffer
            return {
                "num_env_steps": b.get_num_timesteps(),
                "num_agent_steps": b.get_num_agent_timesteps(),
                "num_module_steps": {mid: m.get_num_timesteps() for mid, m in b.modules.items()},
                "num_episodes": b.get_num_episodes(),
                "num_episodes_evicted": b.num_episodes_evicted,
                "num_env_steps_received": self.num_env_steps_received,
            }

    def save(self, path: str | None = None) -> str:
        """Writes a checkpoint to ``path`` (default: ``checkpoint_path``); returns the path."""
        target = path or self.checkpoint_path
        if target is None:
            raise ValueError("save() needs a path: the actor was started without checkpoint_path")
        with self._lock:
            return str(save_multi_agent_buffer(self.buffer, target))

    def ping(self) -> bool:
        return True


def create_multi_agent_replay_actor(**kwargs: Any) -> Any:
    """A MultiAgentReplayActor started on this node's Ray (``num_cpus`` 0: it waits on its runners)."""
    import ray

    return ray.remote(MultiAgentReplayActor).options(num_cpus=0).remote(**kwargs)


class ModuleReplay:
    """One module's view of a MultiAgentReplayActor (a Ray handle or a local object): what a DQN
    learner pulls its batches from (``sample_batches`` with ``module_id`` filled in)."""

    def __init__(self, replay: Any, module_id: str) -> None:
        self.replay, self.module_id = replay, module_id

    @property
    def sample_batches(self) -> Any:
        return _WithModule(self.replay.sample_batches, self.module_id)


class _WithModule:
    """A replay method with ``module_id`` bound: called in place, or (an actor's method) ``.remote``."""

    def __init__(self, method: Any, module_id: str) -> None:
        self.method, self.module_id = method, module_id
        if callable(getattr(method, "remote", None)):  # ray_sampler.handles.call then submits it
            self.remote = self._remote

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.method(*args, module_id=self.module_id, **kwargs)

    def _remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.method.remote(*args, module_id=self.module_id, **kwargs)
