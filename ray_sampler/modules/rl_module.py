"""The RLModule protocol: what an EnvRunner needs of a module.

A module maps a forward batch (``{"obs": array[N, ...]}``, built by the env-to-module pipeline)
to outputs for the module-to-env pipeline: ``action_dist_inputs`` (and ``vf_preds``), or
``actions`` directly. Weights travel as ``get_state()`` dicts of numpy arrays, so a module of
another framework fits as long as its state does.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

__all__ = ["RLModule"]


@runtime_checkable
class RLModule(Protocol):
    """What an EnvRunner needs of a module."""

    observation_space: gym.Space
    action_space: gym.Space

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Outputs for acting greedily."""

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Outputs for acting while exploring (and for training: value predictions)."""

    def get_state(self) -> dict[str, Any]:
        """The weights (numpy arrays, copies)."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Loads weights from ``get_state()`` output."""
