"""RunnerTally: a runner's episodes across its calls (return and length sums, the ids shipped
unfinished that still run) and the ``RunnerMetrics`` of each call."""

from __future__ import annotations

from ray_sampler.sampling.engines import Collected
from ray_sampler.sampling.metrics import EpisodeTotals, RunnerMetrics, chunk_totals

__all__ = ["RunnerTally"]


class RunnerTally:
    """Sums an episode's chunks until the one that ends it, and tracks what was shipped unfinished."""

    def __init__(self, worker_index: int) -> None:
        self.worker_index = worker_index
        self._totals = EpisodeTotals()
        self._shipped_running: set[str] = set()
        """Ids of the episodes shipped unfinished that still run."""

    @property
    def running_episode_ids(self) -> list[str]:
        """The episodes shipped unfinished that still run (``RunnerMetrics.running_episode_ids``), sorted."""
        return sorted(self._shipped_running)

    def clear(self) -> None:
        """Forgets every episode (none of them continues)."""
        self._totals.clear()
        self._shipped_running.clear()

    def record(
        self,
        result: Collected,
        duration_s: float,
        dropped: int,
        abandoned: set[str],
        env_dropped: tuple[int, int, list[str]],
        restarts: int,
        *,
        weights_version: int,
        fallback: str | None,
    ) -> RunnerMetrics:
        """The call's metrics. ``env_dropped``: (episodes, steps, ids) a sub-env failure dropped;
        ``fallback``: why the call took the per-step engine (None: it did not fall back)."""
        chunks = list(chunk_totals(result))
        returns, lengths, steps = self._totals.add(chunks)
        # Episodes a reset or a sub-env failure ended never continue: their sums go once this call's chunks are in.
        ended = abandoned | set(env_dropped[2])
        self._totals.forget(ended)
        self._shipped_running |= {id_ for id_, _, _, is_done in chunks if not is_done}
        self._shipped_running -= {id_ for id_, _, _, is_done in chunks if is_done} | ended
        return RunnerMetrics(
            worker_index=self.worker_index,
            num_env_steps=steps,
            num_agent_steps=steps,
            num_episodes=len(returns),
            episode_returns=returns,
            episode_lengths=lengths,
            num_episodes_dropped_by_reset=dropped,
            num_episodes_dropped_env_error=env_dropped[0],
            num_env_steps_dropped=env_dropped[1],
            num_sub_env_restarts=restarts,
            ended_episode_ids=list(env_dropped[2]),
            duration_s=duration_s,
            num_env_steps_per_s=steps / duration_s if duration_s > 0 else 0.0,
            weights_version=weights_version,
            vectorized_fallback=fallback,
        )
