"""Adam over a dict of numpy parameters (the optimizer of the built-in numpy learners)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.validate import check_number, check_optional

__all__ = ["Adam"]


class Adam:
    """Adam (Kingma & Ba) with optional global gradient-norm clipping."""

    def __init__(
        self,
        lr: float = 3e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        grad_clip: float | None = None,
    ) -> None:
        check_number("lr", lr, minimum=0, exclusive_minimum=True)
        check_number("eps", eps, minimum=0, exclusive_minimum=True)
        check_optional(check_number, "grad_clip", grad_clip, minimum=0, exclusive_minimum=True)
        self.lr, self.betas, self.eps, self.grad_clip = lr, betas, eps, grad_clip
        self.m: dict[str, np.ndarray] = {}
        self.v: dict[str, np.ndarray] = {}
        self.t = 0

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> float:
        """Updates ``params`` in place; returns the gradients' global norm (before clipping)."""
        flat = [g.reshape(-1).astype(np.float64) for g in grads.values()]
        norm = float(np.sqrt(sum(float(f @ f) for f in flat)))
        scale = self.grad_clip / norm if self.grad_clip is not None and norm > self.grad_clip else 1.0
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for k, g in grads.items():
            g = g * scale
            if k not in self.m:
                self.m[k], self.v[k] = np.zeros_like(g), np.zeros_like(g)
            m, v = self.m[k], self.v[k]
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * (g * g)
            denom = np.sqrt(v / c2)
            denom += self.eps
            params[k] -= (self.lr / c1) * m / denom
        return norm

    def get_state(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "m": {k: v.copy() for k, v in self.m.items()},
            "v": {k: v.copy() for k, v in self.v.items()},
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.t = state["t"]
        self.m = {k: v.copy() for k, v in state["m"].items()}  # updated in place from here on
        self.v = {k: v.copy() for k, v in state["v"].items()}
