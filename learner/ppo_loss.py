"""The PPO loss (clipped surrogate, value loss, entropy bonus) and its exact gradients, in numpy.

For the built-in MLPModule with a Discrete action space (categorical head over logits):

    loss = -mean(min(r * A, clip(r, 1 - eps, 1 + eps) * A))
           + vf_coeff * mean((V(s) - value_target)^2)
           - entropy_coeff * mean(H(pi(.|s)))

with ``r = exp(logp_new - logp_old)``. Returns the loss terms and the gradients of every
parameter; a finite-difference test pins them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.modules.mlp import backward, forward

__all__ = ["ppo_loss_and_grads"]


def ppo_loss_and_grads(
    params: dict[str, np.ndarray],
    batch: dict[str, np.ndarray],
    *,
    clip_param: float = 0.2,
    vf_coeff: float = 0.5,
    entropy_coeff: float = 0.0,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Loss terms and gradients for ``batch`` (obs, actions, action_logp, advantages, value_targets)."""
    obs = np.asarray(batch[Columns.OBS], np.float64).reshape(len(batch[Columns.OBS]), -1)
    actions = np.asarray(batch[Columns.ACTIONS], np.int64)
    advantages = np.asarray(batch[Columns.ADVANTAGES], np.float64)
    targets = np.asarray(batch[Columns.VALUE_TARGETS], np.float64)
    logp_old = np.asarray(batch[Columns.ACTION_LOGP])
    n = len(obs)
    p64 = {k: v.astype(np.float64) for k, v in params.items()}

    logits, pi_cache = forward(p64, "pi", obs)
    z = logits - logits.max(axis=1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    probs = np.exp(log_probs)
    logp = log_probs[np.arange(n), actions]
    ratio = np.exp(logp - logp_old.astype(np.float64))
    clipped = np.clip(ratio, 1.0 - clip_param, 1.0 + clip_param)
    surrogate = np.minimum(ratio * advantages, clipped * advantages)
    entropy = -(probs * log_probs).sum(axis=1)

    values, vf_cache = forward(p64, "vf", obs)
    values = values[:, 0]
    vf_err = values - targets

    terms = {
        "policy_loss": float(-surrogate.mean()),
        "vf_loss": float((vf_err**2).mean()),
        "entropy": float(entropy.mean()),
        "mean_kl_approx": float((logp_old - logp).mean()),
        "clip_fraction": float((np.abs(ratio - 1.0) > clip_param).mean()),
    }
    terms["total_loss"] = terms["policy_loss"] + vf_coeff * terms["vf_loss"] - entropy_coeff * terms["entropy"]

    # d(-mean(surrogate))/d logp: the unclipped term carries the gradient where it is the minimum.
    active = ratio * advantages <= clipped * advantages
    d_logp = -(advantages * ratio * active) / n
    onehot = np.zeros_like(probs)
    onehot[np.arange(n), actions] = 1.0
    d_logits = d_logp[:, None] * (onehot - probs)
    # d(-c * mean(H))/d logits = c/n * p * (log p + H)
    d_logits += entropy_coeff / n * probs * (log_probs + entropy[:, None])
    grads: dict[str, Any] = backward(p64, "pi", pi_cache, d_logits)
    grads.update(backward(p64, "vf", vf_cache, (vf_coeff * 2.0 * vf_err / n)[:, None]))
    return terms, {k: g.astype(params[k].dtype) for k, g in grads.items()}
