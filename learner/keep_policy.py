"""PolicyKeeper: every training loop's final policy, built and saved however the loop ends.

A loop hands it a function that builds the policy the runners act with now (its weights and
connector states). ``final()`` builds it once the loop has ended (its budget used, its target
reached, or Ctrl-C) and, with a ``policy_dir``, writes it there (``ray_sampler.policy``'s folder:
loadable with no Ray and no run config). A policy that cannot be built or written (a connector
piece without ``get_config()``, a space a saved policy cannot hold) is one log line, never a failed
run: the run's checkpoints still hold everything to resume it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray_sampler.data.state_files import StateFileError
from ray_sampler.errors import ConfigError, SpaceError

__all__ = ["BEST_POLICY_FOLDER", "PolicyKeeper", "best_policy_dir", "run_info"]

BEST_POLICY_FOLDER = "best_policy"
"""Beside the final policy: the policy of the best evaluation so far (runs that evaluate)."""


def best_policy_dir(policy_dir: Path | None) -> Path | None:
    """Where a run that evaluates keeps its best policy: ``best_policy/`` beside ``policy_dir`` (None: none)."""
    return None if policy_dir is None else Path(policy_dir).parent / BEST_POLICY_FOLDER


def run_info(
    algo: str, env: str, env_config: dict[str, Any], framework: str, *, iteration: int, env_steps: int
) -> dict:
    """What a saved policy says of its run (``Policy.info``): the env config only where JSON can hold it."""
    info: dict[str, Any] = {
        "algo": algo,
        "env": env,
        "framework": framework,
        "iteration": iteration,
        "env_steps": env_steps,
    }
    if _is_plain(env_config):
        info["env_config"] = dict(env_config)
    return info


def _is_plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


class PolicyKeeper:
    """Builds the loop's policy on demand (``make``), and writes the final one to ``policy_dir``."""

    def __init__(self, make: Callable[[], Any], *, policy_dir: Path | None, log: Callable[[str], None]) -> None:
        self._make = make
        self.policy_dir = None if policy_dir is None else Path(policy_dir)
        self._log = log

    def build(self) -> Any:
        """The policy now, or None (logged) if it cannot be built or saved (a connector piece without
        ``get_config()``, a space a saved policy cannot hold): checkpoints are then saved without it."""
        try:
            policy = self._make()
            policy.save_check()
            return policy
        except (ConfigError, SpaceError, StateFileError, TypeError, ValueError, KeyError) as e:
            self._log(f"no policy kept: {type(e).__name__}: {e}")
            return None

    def end(self, save_checkpoint: Callable[[], None] | None, *, is_saved: bool) -> Any:
        """The loop's end (its budget, its target or Ctrl-C): ``save_checkpoint()`` unless ``is_saved``
        (this iteration's checkpoint is written already; None: the loop keeps none), then ``final()``."""
        if save_checkpoint is not None and not is_saved:
            save_checkpoint()  # the run's end is kept, not only the last periodic checkpoint
        return self.final()

    def final(self) -> Any:
        """The policy now, written to ``policy_dir`` if one was given; None (logged) if it cannot be."""
        policy = self.build()
        if policy is not None and self.policy_dir is not None:
            try:
                policy.save(self.policy_dir)
            except (ConfigError, StateFileError, OSError) as e:
                self._log(f"the final policy was not written to {self.policy_dir}: {type(e).__name__}: {e}")
        return policy
