"""LocalPolicy: the server's built-in MLP, rebuilt from the weights it sends, acting in the client.

The weights are the module's own (``pi.{layer}.w`` / ``.b``, tanh hidden layers, a linear last
layer; ``pi.log_std`` for a Box action). Discrete actions are drawn from the softmax of the
logits (shifted by the space's ``start``), Box actions from a normal with that mean and log-std;
each comes with its log-probability, which the server's learner needs. Only numpy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .protocol import ProtocolError, decode_array

__all__ = ["LocalPolicy"]

_LOG_2PI = math.log(2 * math.pi)


class LocalPolicy:
    """Acts with the weights of a ``weights`` message (see the module docstring)."""

    def __init__(
        self, weights_message: dict[str, Any], action_space: dict[str, Any], *, seed: int | None = None
    ) -> None:
        form = weights_message.get("module") or {}
        if form.get("kind") != "mlp" or form.get("activation") != "tanh":
            raise ProtocolError(f"local inference needs the built-in tanh MLP (the server sent {form!r})")
        self.version = int(weights_message["weights_version"])
        self.params = {k: decode_array(v, np.float64) for k, v in weights_message["weights"].items()}
        self.depth = sum(1 for k in self.params if k.startswith("pi.") and k.endswith(".w"))
        self.is_gaussian = bool(form.get("gaussian"))
        spec = action_space["spec"]
        self._start = int(spec.get("start", 0)) if spec["type"] == "Discrete" else 0
        self._bounds = None
        if spec["type"] == "Box":
            arrays = action_space["arrays"]
            self._bounds = (decode_array(arrays[spec["low"]]), decode_array(arrays[spec["high"]]))
        self._rng = np.random.default_rng(seed)

    def for_env(self, action: Any) -> Any:
        """What the simulator gets for a drawn action: a Box action clipped to the space's bounds
        (the drawn one is what is recorded, as a runner records it)."""
        if self._bounds is None:
            return action
        return np.clip(action, *self._bounds).astype(np.float32)

    def compute(self, observation: Any, *, explore: bool = True) -> tuple[Any, float]:
        """(the action drawn for ``observation``, its log-probability); ``for_env`` gives what the
        simulator gets."""
        x = np.asarray(observation, np.float64).reshape(-1)
        for layer in range(self.depth):
            x = x @ self.params[f"pi.{layer}.w"] + self.params[f"pi.{layer}.b"]
            if layer < self.depth - 1:
                x = np.tanh(x)
        if self.is_gaussian:
            log_std = self.params["pi.log_std"]
            action = x + np.exp(log_std) * self._rng.standard_normal(x.shape) if explore else x
            z = (action - x) / np.exp(log_std)
            return action.astype(np.float32), float((-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum())
        log_probs = x - x.max()
        log_probs -= math.log(float(np.exp(log_probs).sum()))
        index = int(self._rng.choice(len(log_probs), p=np.exp(log_probs))) if explore else int(log_probs.argmax())
        return index + self._start, float(log_probs[index])
