"""PrioritizedEpisodeReplayBuffer: the episode replay buffer with the prioritized sampler.

Steps are drawn in proportion to their priorities (see :mod:`replay.prioritized_sampler`);
``sample`` adds ``weights`` (importance weights for its ``beta``, by default the buffer's) to the
batch, and ``update_priorities`` takes new priorities for the sampled steps, by their ``keys`` or,
as RLlib's, for the last sampled batch in its order. The n-step walk is the uniform buffer's:
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

from typing import Any, overload

import numpy as np
from numpy.typing import ArrayLike

from ray_sampler.errors import ReplayError
from replay.buffer import EpisodeReplayBuffer
from replay.prioritized_sampler import PrioritizedSampler
from replay.sampler import Draw

__all__ = ["PrioritizedEpisodeReplayBuffer"]


class PrioritizedEpisodeReplayBuffer(EpisodeReplayBuffer):
    """An EpisodeReplayBuffer sampling in proportion to priorities (see the module docstring)."""

    def __init__(
        self,
        capacity: int | None = None,
        *,
        capacity_env_steps: int | None = None,
        capacity_bytes: int | None = None,
        batch_size_B: int = 16,
        batch_length_T: int = 1,
        seed: int | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        epsilon: float = 1e-6,
    ) -> None:
        self._prioritized = PrioritizedSampler(alpha=alpha, beta=beta, epsilon=epsilon)
        self._last_keys: np.ndarray | None = None
        self._compose(
            self._prioritized,
            capacity=capacity,
            capacity_env_steps=capacity_env_steps,
            capacity_bytes=capacity_bytes,
            batch_size_B=batch_size_B,
            batch_length_T=batch_length_T,
            seed=seed,
        )

    @property
    def alpha(self) -> float:
        return self._prioritized.alpha

    @property
    def beta(self) -> float:
        """The default ``beta`` of ``sample`` (a call may pass its own)."""
        return self._prioritized.beta

    @property
    def epsilon(self) -> float:
        return self._prioritized.epsilon

    @property
    def max_priority(self) -> float:
        """The largest priority given so far (new steps get it)."""
        return self._prioritized.max_priority

    def priority_mass(self) -> tuple[float, float]:
        """(sum, smallest) of the stored steps' priorities, each ``priority ** alpha``: what sampling
        draws in proportion to, and what the importance weights are normalized by."""
        return self._prioritized.mass(self.storage)

    def _draw(self, batch_size_B: int, beta: float | None) -> Draw:
        return self._prioritized.draw(self.storage, batch_size_B, self.rng, beta=beta)

    def _remember_keys(self, keys: np.ndarray | None) -> None:
        self._last_keys = keys

    @overload
    def update_priorities(self, priorities: ArrayLike, /) -> None: ...

    @overload
    def update_priorities(self, keys: ArrayLike, priorities: ArrayLike) -> None: ...

    @overload
    def update_priorities(self, *, priorities: ArrayLike, keys: ArrayLike | None = None) -> None: ...

    def update_priorities(self, *args: ArrayLike, keys: ArrayLike | None = None, priorities: Any = None) -> None:
        """New priorities (e.g. |TD error|) for sampled steps: ``update_priorities(priorities)`` for
        the transitions of the last ``sample`` (or ``sample_batches``), in their order, once (as
        RLlib); ``update_priorities(keys, priorities)`` for the steps of sampling ``keys`` from any
        batch. Keys of evicted steps are skipped."""
        given_by_keyword = keys is not None or priorities is not None
        if len(args) > 2 or (len(args) == 2 and given_by_keyword):
            raise ReplayError(
                "update_priorities takes (priorities) for the last sampled batch or (keys, priorities) "
                f"(got {len(args)} positional arguments{' and keywords' if given_by_keyword else ''})"
            )
        if len(args) == 2 and isinstance(args[1], str):  # RLlib's helper passes a module_id second
            raise ReplayError(
                f"update_priorities takes (priorities) or (keys, priorities); this single-agent buffer has no "
                f"module_id (got {args[1]!r} second)"
            )
        if len(args) == 2:
            keys, priorities = args
        elif len(args) == 1 and priorities is None:
            priorities = args[0]
        elif len(args) == 1:
            if keys is not None:
                raise ReplayError("update_priorities got 'keys' twice (positionally and by keyword)")
            keys = args[0]
        if priorities is None:
            raise ReplayError("update_priorities needs 'priorities' (got none)")
        if keys is None:
            keys = self._last_batch_keys(priorities)
        self._prioritized.update_priorities(self.storage, keys, priorities)

    def _last_batch_keys(self, priorities: Any) -> np.ndarray:
        """The last sampled batch's keys for ``priorities`` (used once, as RLlib's last indices)."""
        if self._last_keys is None:
            raise ReplayError(
                "update_priorities(priorities) needs a sampled batch of transitions since the last such update "
                "(or pass its keys: update_priorities(batch['keys'], priorities))"
            )
        n = np.shape(priorities)[0] if np.ndim(priorities) else None
        if n != len(self._last_keys):
            raise ReplayError(
                f"'priorities' must have one value per transition of the last sampled batch "
                f"({len(self._last_keys)}) (got {'a scalar' if n is None else n})"
            )
        keys, self._last_keys = self._last_keys, None
        return keys

    def get_priorities(self, keys: np.ndarray | list[int]) -> np.ndarray:
        """The priorities (after ``alpha``) of the steps of sampling ``keys``; 0 where not stored.
        A restored buffer gives every step the same priority (priorities are not saved)."""
        return self._prioritized.priorities_of(self.storage, keys)
