"""Adam over a dict of numpy parameters (the optimizer of the built-in numpy learners)."""

from __future__ import annotations

import numpy as np

__all__ = ["Adam"]


class Adam:
    """Adam (Kingma & Ba) with optional global gradient-norm clipping."""

    def __init__(self, lr: float = 3e-4, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 grad_clip: float | None = None) -> None:
        self.lr, self.betas, self.eps, self.grad_clip = lr, betas, eps, grad_clip
        self.m: dict[str, np.ndarray] = {}
        self.v: dict[str, np.ndarray] = {}
        self.t = 0

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> float:
        """Updates ``params`` in place; returns the gradients' global norm (before clipping)."""
        norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values())))
        scale = self.grad_clip / norm if self.grad_clip is not None and norm > self.grad_clip else 1.0
        self.t += 1
        b1, b2 = self.betas
        for k, g in grads.items():
            g = g * scale
            m = self.m[k] = b1 * self.m.get(k, np.zeros_like(g)) + (1 - b1) * g
            v = self.v[k] = b2 * self.v.get(k, np.zeros_like(g)) + (1 - b2) * g * g
            m_hat, v_hat = m / (1 - b1**self.t), v / (1 - b2**self.t)
            params[k] -= (self.lr * m_hat / (np.sqrt(v_hat) + self.eps)).astype(params[k].dtype)
        return norm
