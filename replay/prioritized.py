"""PrioritizedEpisodeReplayBuffer: the episode replay buffer with the prioritized sampler.

Steps are drawn in proportion to their priorities (see :mod:`replay.prioritized_sampler`);
``sample`` adds ``weights`` (importance weights) to the batch, and ``update_priorities`` takes
new priorities for the sampled steps by their ``keys``. The n-step walk is the uniform buffer's:
never across episodes, never through a terminal. ``sample_episodes`` draws uniformly.

>>> from ray_sampler import SingleAgentEpisode
>>> buf = PrioritizedEpisodeReplayBuffer(capacity_env_steps=10, alpha=1.0, seed=0)
>>> buf.add([SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 0], rewards=[0.0, 0.0])])
2
>>> batch = buf.sample(2)
>>> buf.update_priorities(batch["keys"], [3.0 if o == 0 else 1.0 for o in batch["obs"].tolist()])
>>> frequent = buf.sample(4000)["obs"]
>>> 0.7 < float((frequent == 0).mean()) < 0.8  # 3 / (3 + 1)
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replay.buffer import EpisodeReplayBuffer
from replay.prioritized_sampler import PrioritizedSampler

__all__ = ["PrioritizedEpisodeReplayBuffer"]


class PrioritizedEpisodeReplayBuffer(EpisodeReplayBuffer):
    """An EpisodeReplayBuffer sampling in proportion to priorities (see the module docstring)."""

    def __init__(
        self,
        *,
        capacity_env_steps: int = 1_000_000,
        capacity_bytes: int | None = None,
        seed: int | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
    ) -> None:
        self._prioritized = PrioritizedSampler(alpha=alpha, beta=beta, epsilon=epsilon)
        self._compose(
            self._prioritized, capacity_env_steps=capacity_env_steps, capacity_bytes=capacity_bytes, seed=seed
        )

    @property
    def alpha(self) -> float:
        return self._prioritized.alpha

    @property
    def beta(self) -> float:
        return self._prioritized.beta

    @property
    def epsilon(self) -> float:
        return self._prioritized.epsilon

    @property
    def max_priority(self) -> float:
        """The largest priority given so far (new steps get it)."""
        return self._prioritized.max_priority

    def sample(
        self, batch_size_B: int, *, n_step: int = 1, gamma: float = 0.99, beta: float | None = None
    ) -> dict[str, Any]:
        """Transitions drawn in proportion to priority, with importance ``weights`` and ``keys``."""
        self._check_sample_args(batch_size_B, n_step, gamma)
        draw = self._prioritized.draw(self.storage, batch_size_B, self.rng, beta=beta)
        return self._transitions(draw, n_step, gamma)

    def update_priorities(self, keys: np.ndarray | list[int], priorities: np.ndarray | list[float]) -> None:
        """New priorities (e.g. |TD error|) for sampled steps; keys of evicted steps are skipped."""
        self._prioritized.update_priorities(self.storage, keys, priorities)

    def get_priorities(self, keys: np.ndarray | list[int]) -> np.ndarray:
        """The priorities (after ``alpha``) of the steps of sampling ``keys``; 0 where not stored.
        A restored buffer gives every step the same priority (priorities are not saved)."""
        return self._prioritized.priorities_of(self.storage, keys)
