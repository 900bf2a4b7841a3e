"""The RLModule protocol: what an EnvRunner needs of a module, and the stateful-module helpers.

A module maps a forward batch (``{"obs": array[N, ...]}``, built by the env-to-module pipeline)
to outputs for the module-to-env pipeline: ``action_dist_inputs`` (and ``vf_preds``), or
``actions`` directly. Weights travel as ``get_state()`` dicts of numpy arrays, so a module of
another framework fits as long as its state does.

A *stateful* (recurrent) module also has ``is_stateful()`` returning True and
``get_initial_state()``: one episode's initial state, a dict of numpy arrays without a batch
dimension. Its forward batch then carries ``state_in`` (that dict, each array with a leading
[N]) and its outputs carry ``state_out`` (the same structure): the runner stores ``state_out``
per step in the episode's ``extra_model_outputs``, and the next step's ``state_in`` is the
previous step's ``state_out``, or the initial state at an episode's first step.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

__all__ = ["RLModule", "initial_state", "is_stateful"]


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


def is_stateful(module: Any) -> bool:
    """Whether ``module`` declares a recurrent state (``is_stateful()`` returning True)."""
    method = getattr(module, "is_stateful", None)
    return bool(method()) if callable(method) else False


def initial_state(module: Any) -> dict[str, Any]:
    """A stateful module's ``get_initial_state()``: one episode's state, numpy arrays, no batch dim."""
    import numpy as np

    return {k: np.asarray(v) for k, v in module.get_initial_state().items()}
