"""ReplayOutbox: chunks held for a dead replay actor, in order, until a replay takes them.

A dead replay actor (Ray's ``RayActorError``) is not the sender's failure: the chunks it did not
take stay held, unchanged, so the episodes go on and reach the restored actor whole
(learner/replay_recovery.py). A runner holds them across its ``sample_to`` calls, the group those
it adds from the driver across its ``sample_to_replay`` calls.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar
from ray_sampler.handles import call

__all__ = ["ReplayOutbox", "is_actor_death", "replay_for", "shard_index"]


class ReplayOutbox:
    """Chunks a replay did not take, oldest first."""

    def __init__(self) -> None:
        self._held: list[ColumnarEpisodes | MultiAgentColumnar] = []

    @property
    def is_empty(self) -> bool:
        return not self._held

    @property
    def num_env_steps(self) -> int:
        """Env steps held."""
        return sum(c.num_env_steps for c in self._held)

    def hold(self, col: ColumnarEpisodes | MultiAgentColumnar) -> None:
        """Holds ``col`` after the chunks held already."""
        self._held.append(col)

    def take(self) -> list[ColumnarEpisodes | MultiAgentColumnar]:
        """Every held chunk, in order; the outbox is empty afterwards."""
        held, self._held = self._held, []
        return held

    def send(self, replay: Any) -> Any:
        """Adds the held chunks to ``replay`` in order; one ack summing those it took (None: none).

        A dead replay takes no more: the rest stay held (other errors go up)."""
        acks = []
        try:
            if not self._held:
                return call(replay.add, None)
            while self._held:
                acks.append(call(replay.add, self._held[0]))
                self._held.pop(0)
        except Exception as e:
            if not is_actor_death(e):
                raise
        if not acks:
            return None
        return dataclasses.replace(
            acks[-1],
            num_env_steps=sum(a.num_env_steps for a in acks),
            num_env_steps_received=sum(a.num_env_steps_received for a in acks),
            waited_s=sum(a.waited_s for a in acks),
        )

    def flush(self, replay: Any) -> None:
        """Adds the held chunks to ``replay``, in order; those it does not take stay held (its error,
        ``RayActorError`` for a dead replay, goes up)."""
        while self._held:
            call(replay.add, self._held[0])
            self._held.pop(0)


def shard_index(worker_index: int | None, num_shards: int) -> int:
    """The replay shard runner ``worker_index`` sends its chunks to: ``(worker_index - 1) % num_shards``
    (the first for chunks no runner owns any more: a stopped runner's, or the local runner's)."""
    return 0 if not worker_index else (worker_index - 1) % num_shards


def replay_for(replay: Any, worker_index: int | None) -> Any:
    """The replay actor that runner ``worker_index``'s chunks go to: ``replay`` itself, or one of a
    list of replay shards (``shard_index``)."""
    if isinstance(replay, list | tuple):
        return replay[shard_index(worker_index, len(replay))]
    return replay


def is_actor_death(error: BaseException) -> bool:
    """Whether ``error`` says the called actor died or cannot be reached (Ray's RayActorError)."""
    import ray

    return isinstance(error, ray.exceptions.RayActorError)
