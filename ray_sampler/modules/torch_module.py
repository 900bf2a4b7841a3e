"""TorchRLModule: the base of torch modules, numpy in and out for the runner, tensors for the learner.

A subclass implements ``_forward(batch) -> outputs`` on dicts of tensors (and may override
``_forward_inference``, ``_forward_exploration``, ``_forward_train`` and ``_compute_values``,
which default to it). The public side follows :mod:`ray_sampler.modules.rl_module`:
``forward_exploration`` / ``forward_inference`` / ``compute_values`` take and return numpy
(nested dicts too, such as ``state_in``) and run without autograd; ``forward_train`` takes and
returns tensors, with autograd, for a learner's loss. Weights travel as ``get_state()``: numpy
copies of the ``state_dict``.

A stateful subclass returns True from ``is_stateful()`` and one episode's state from
``get_initial_state()`` (numpy, no batch dim). Its forward batches carry ``state_in`` with a
leading [N] and its outputs ``state_out``; its train batches are [B, T, ...] with ``state_in``
[B, ...] (each sequence's first state), ``loss_mask`` [B, T] and ``seq_lens`` [B], and its
``forward_train`` outputs carry ``state_out`` [B, ...]: the state after the last of the T steps
(a sequence shorter than T has run through its zero padding by then; burn-in,
:func:`learner.torch_burn_in.burn_in_states`, reads it after real steps only).

Importing this module imports torch: only the torch modules and learners import it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ray_sampler.data.columns import Columns

__all__ = ["TorchRLModule", "load_weights", "to_numpy", "to_tensor", "weights_of"]


def to_tensor(tree: Any, *, float_dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> Any:
    """``tree`` (an array, or dicts of them) as tensors; float arrays become ``float_dtype``."""
    if isinstance(tree, dict):
        return {k: to_tensor(v, float_dtype=float_dtype, device=device) for k, v in tree.items()}
    if isinstance(tree, torch.Tensor):
        return tree.to(device=device, dtype=float_dtype if tree.is_floating_point() else tree.dtype)
    array = np.asarray(tree)
    if not array.flags.writeable:  # e.g. from the object store: torch shares memory only with writable arrays
        array = array.copy()
    tensor = torch.as_tensor(array, device=device)
    return tensor.to(float_dtype) if tensor.is_floating_point() else tensor


def to_numpy(tree: Any) -> Any:
    """``tree`` (a tensor, or dicts of them) as numpy arrays (detached, on the CPU)."""
    if isinstance(tree, dict):
        return {k: to_numpy(v) for k, v in tree.items()}
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().numpy()
    return np.asarray(tree)


def weights_of(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """The ``state_dict`` of ``module`` as numpy copies."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_weights(module: torch.nn.Module, weights: dict[str, Any], *, owner: str) -> None:
    """Loads ``weights`` (``weights_of`` output) into ``module``; ValueError naming ``owner`` and the key
    on missing or unexpected keys or a shape mismatch (nothing is loaded then)."""
    current = module.state_dict()
    if weights.keys() != current.keys():
        missing, extra = sorted(current.keys() - weights.keys()), sorted(weights.keys() - current.keys())
        raise ValueError(f"{owner}.set_state: keys differ (missing {missing}, unexpected {extra})")
    loaded = {}
    for k, v in weights.items():
        target = current[k]
        array = np.asarray(v)
        if array.shape != tuple(target.shape):
            raise ValueError(f"{owner}.set_state: {k!r} must have shape {tuple(target.shape)} (got {array.shape})")
        loaded[k] = torch.as_tensor(array.copy(), dtype=target.dtype, device=target.device)
    module.load_state_dict(loaded)


class TorchRLModule(torch.nn.Module):
    """The base of torch RL modules (see the module docstring)."""

    framework = "torch"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space

    # ---------------------------------------------------------------- what subclasses implement
    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Outputs for a batch of tensors; the default of the other ``_forward_*`` methods."""
        raise NotImplementedError(f"{type(self).__name__} must implement _forward(batch)")

    def _forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self._forward(batch)

    def _forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self._forward(batch)

    def _forward_train(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self._forward(batch)

    def _compute_values(self, batch: dict[str, Any]) -> torch.Tensor:
        values: torch.Tensor = self._forward(batch)[Columns.VF_PREDS]
        return values

    # ---------------------------------------------------------------- public
    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``forward_train`` (so ``module(batch)`` works as for any ``torch.nn.Module``)."""
        return self.forward_train(batch)

    def forward_train(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Outputs for a batch of tensors, with autograd (a learner's loss)."""
        return self._forward_train(batch)

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Outputs (numpy) for acting while exploring, from a numpy forward batch."""
        with torch.no_grad():
            return to_numpy(self._forward_exploration(self._tensors(batch)))

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Outputs (numpy) for acting greedily, from a numpy forward batch."""
        with torch.no_grad():
            return to_numpy(self._forward_inference(self._tensors(batch)))

    def compute_values(self, obs: Any) -> np.ndarray:
        """Value predictions (numpy) for observations ``obs[N, ...]``."""
        with torch.no_grad():
            values: np.ndarray = to_numpy(self._compute_values(self._tensors({Columns.OBS: obs})))
            return values

    def is_stateful(self) -> bool:
        """Whether the module is recurrent (False unless a subclass says otherwise)."""
        return False

    def get_initial_state(self) -> dict[str, np.ndarray]:
        """One episode's initial state (numpy arrays, no batch dim); empty for a stateless module."""
        return {}

    def get_state(self) -> dict[str, Any]:
        """The weights: the ``state_dict`` as numpy copies."""
        return weights_of(self)

    def set_state(self, state: dict[str, Any]) -> None:
        """Loads ``get_state()`` output; ValueError on missing or unexpected keys or a wrong shape."""
        load_weights(self, state, owner=type(self).__name__)

    def _tensors(self, batch: dict[str, Any]) -> Any:
        """``batch`` as tensors of this module's float dtype and device."""
        param = next(self.parameters(), None)
        if param is None:
            return to_tensor(batch)
        return to_tensor(batch, float_dtype=param.dtype, device=param.device)
