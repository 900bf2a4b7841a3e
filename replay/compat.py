"""RLlib's argument forms for the replay buffers: what ``add`` takes, aliases, n-step ranges.

RLlib's ``EpisodeReplayBuffer`` takes ``capacity`` (env steps), ``add(episode)`` as well as
``add([episodes])``, ``sample(num_items=...)`` beside ``batch_size_B=`` and ``n_step`` as an int or
a ``(low, high)`` range drawn per sampled item. These helpers turn each form into ours, once, with
one-line errors naming the argument, what is accepted and what was given.

>>> n_step_range((2, 4))
(2, 4)
>>> draw_n_step((2, 4), 6, np.random.default_rng(0)).tolist()
[4, 3, 3, 2, 2, 2]
>>> resolve_alias("capacity_env_steps", None, "capacity", 1000, default=10)
1000
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ray_sampler.data.columnar import ColumnarEpisodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from ray_sampler.validate import check_int

__all__ = ["NStep", "as_columnar", "draw_n_step", "n_step_range", "resolve_alias"]

NStep = int | tuple[int, int]
"""An n-step: one int, or an inclusive ``(low, high)`` range drawn per sampled item."""

_ADD_ACCEPTS = "a SingleAgentEpisode, a list (or tuple) of them, or a ColumnarEpisodes"


def as_columnar(data: Any) -> ColumnarEpisodes | None:
    """What ``add`` takes, as one ColumnarEpisodes (None: nothing to add). A single episode is a
    list of one (as RLlib's ``force_list``); anything else raises a one-line ReplayError."""
    if isinstance(data, ColumnarEpisodes):
        return data
    if isinstance(data, SingleAgentEpisode):
        return episodes_to_columnar([data])
    if data is None:
        return None
    if not isinstance(data, (list, tuple)):
        raise ReplayError(f"add takes {_ADD_ACCEPTS} (got {type(data).__name__})")
    for i, ep in enumerate(data):
        if not isinstance(ep, SingleAgentEpisode):
            raise ReplayError(f"add takes {_ADD_ACCEPTS} (got {type(data).__name__} with {type(ep).__name__} at [{i}])")
    return episodes_to_columnar(list(data)) if data else None


def resolve_alias(
    name: str, value: Any, alias: str, alias_value: Any, *, default: Any, error: type[Exception] = ReplayError
) -> Any:
    """``value`` or (RLlib's name) ``alias_value``, whichever is given, else ``default``; both given
    and different raises ``error`` (a constructor's ConfigError, a request's ReplayError)."""
    if value is not None and alias_value is not None and value != alias_value:
        raise error(f"'{name}' and '{alias}' name the same setting; give one (got {value!r} and {alias_value!r})")
    if value is not None:
        return value
    return default if alias_value is None else alias_value


def n_step_range(n_step: Any) -> NStep:
    """``n_step`` checked: an int >= 1 (None: 1, as RLlib), or a ``(low, high)`` pair of ints with
    ``1 <= low <= high`` (a list too), returned as a tuple."""
    if n_step is None:
        return 1
    if isinstance(n_step, (tuple, list)):
        ok = len(n_step) == 2 and all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in n_step)
        if not ok or not 1 <= n_step[0] <= n_step[1]:
            raise ReplayError(
                f"'n_step' must be an int >= 1 or a (low, high) pair of ints with 1 <= low <= high (got {n_step!r})"
            )
        return int(n_step[0]), int(n_step[1])
    return check_int("n_step", n_step, minimum=1, error=ReplayError)


def draw_n_step(n_step: NStep, batch_size_B: int, rng: np.random.Generator) -> int | np.ndarray:
    """The n-step of each of ``batch_size_B`` items: the int itself (no draw), or one uniform draw
    per item from ``low .. high`` inclusive (RLlib's documented closed interval)."""
    if isinstance(n_step, Sequence):
        low, high = n_step
        return rng.integers(low, high + 1, batch_size_B)
    return n_step
