"""The numpy MLP of the built-in modules: initialization, forward and backward passes.

``forward(params, head, x)`` returns the head's output and what ``backward`` needs;
``backward(params, head, cache, grad_out)`` returns the gradients of the parameters of that
head (``{head}.{layer}.w`` / ``.b``), given the gradient of the loss with respect to its output.
Hidden layers are tanh (as in :class:`ray_sampler.modules.mlp_module.MLPModule`) or ReLU
(``activation="relu"``, as in :class:`learner.dqn.QModule`); the last layer is linear.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ACTIVATIONS", "backward", "forward", "init_layer", "num_layers"]


def init_layer(rng: np.random.Generator, n_in: int, n_out: int, gain: float) -> tuple[np.ndarray, np.ndarray]:
    """Orthogonal weights scaled by ``gain`` (the PPO default), zero bias; float32."""
    a = rng.standard_normal((max(n_in, n_out), min(n_in, n_out)))
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    w = q if n_in >= n_out else q.T
    return np.ascontiguousarray(gain * w[:n_in, :n_out], dtype=np.float32), np.zeros(n_out, np.float32)


def num_layers(params: dict[str, np.ndarray], head: str) -> int:
    return sum(1 for k in params if k.startswith(f"{head}.") and k.endswith(".w"))


ACTIVATIONS = ("tanh", "relu")


def forward(
    params: dict[str, np.ndarray],
    head: str,
    x: np.ndarray,
    activation: str = "tanh",
    *,
    depth: int | None = None,
) -> tuple[np.ndarray, list[Any]]:
    """The head's output for inputs ``x`` and the layer inputs ``backward`` needs; ``depth`` (the
    number of layers) saves counting them per call where the caller knows it (the acting path)."""
    cache = []
    n = num_layers(params, head) if depth is None else depth
    for layer in range(n):
        w, b = params[f"{head}.{layer}.w"], params[f"{head}.{layer}.b"]
        cache.append(x)
        x = x @ w
        x += b  # in place on the new product: the same values as ``x @ w + b``, one array fewer
        if layer < n - 1:
            x = np.tanh(x, out=x) if activation == "tanh" else np.maximum(x, 0.0, out=x)
    return x, cache


def backward(
    params: dict[str, np.ndarray], head: str, cache: list[Any], grad_out: np.ndarray, activation: str = "tanh"
) -> dict[str, np.ndarray]:
    grads: dict[str, np.ndarray] = {}
    n = num_layers(params, head)
    grad = grad_out
    for layer in range(n - 1, -1, -1):
        x_in = cache[layer]
        w = params[f"{head}.{layer}.w"]
        grads[f"{head}.{layer}.w"] = x_in.T @ grad
        grads[f"{head}.{layer}.b"] = grad.sum(axis=0)
        if layer:  # x_in is the activation output of the layer below
            grad = grad @ w.T
            grad *= (1.0 - x_in * x_in) if activation == "tanh" else (x_in > 0)
    return grads
