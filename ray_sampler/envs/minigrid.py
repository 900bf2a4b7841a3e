"""MiniGrid and BabyAI ids (``MiniGrid-Empty-5x5-v0``, ``BabyAI-GoToLocal-v0``): the ``minigrid`` extra.

``minigrid`` registers its ids with gymnasium when it is imported, and its import takes about
0.2 s (it loads pygame), so it is imported only where an id of its namespaces is asked for
(``ensure_registered``): in the driver's checks and in each runner that makes one.

Their observations are a Dict with a ``mission`` string (a ``MissionSpace``): the runner stores
it whole; an MLP cannot take it, and ``FilterObservationKeys(["image", "direction"])`` drops it
before the module (examples/minigrid_ppo.py).
"""

from __future__ import annotations

import importlib
import importlib.util

import gymnasium as gym

__all__ = ["MINIGRID_INSTALL_LINE", "ensure_registered", "minigrid_install_hint"]

MINIGRID_PREFIXES = ("MiniGrid-", "BabyAI-")
MINIGRID_INSTALL_LINE = 'pip install "ray-sampler[minigrid]"'


def _is_minigrid_id(env: str) -> bool:
    return env.startswith(MINIGRID_PREFIXES)


def ensure_registered(env: str) -> None:
    """Imports ``minigrid`` (which registers its ids) when ``env`` is one of its ids, not yet
    registered, and the package is installed."""
    if _is_minigrid_id(env) and env not in gym.registry and importlib.util.find_spec("minigrid") is not None:
        importlib.import_module("minigrid")


def minigrid_install_hint(env: str) -> str:
    """A sentence with the install line where ``env`` names a MiniGrid/BabyAI id and minigrid is
    missing, else ``""``."""
    if not _is_minigrid_id(env) or importlib.util.find_spec("minigrid") is not None:
        return ""
    return f"; {env!r} is a MiniGrid/BabyAI id, which needs minigrid: {MINIGRID_INSTALL_LINE}"
