"""The PPO loss (clipped surrogate, value loss, entropy bonus) and its exact gradients, in numpy.

For the built-in MLPModule with a Discrete action space (a categorical head over logits) or a
1-D Box action space (a diagonal Gaussian: the head gives the mean, ``pi.log_std`` is a learned
state-independent log-std vector, RLlib's ``free_log_std``):

    loss = -mean(min(r * A, clip(r, 1 - eps, 1 + eps) * A))
           + vf_coeff * mean(min((V(s) - value_target)^2, vf_clip_param))
           - entropy_coeff * mean(H(pi(.|s)))

with ``r = exp(logp_new - logp_old)`` (``logp`` of the action the runner sampled, before any
clipping to the env's bounds). ``vf_clip_param`` None leaves the squared error unclipped. With
``clipped=False`` the policy term is the plain policy gradient ``-mean(logp_new * A)`` (IMPALA's on
V-trace advantages, which carry the clipped ratios already; A2C's on GAE's).
Returns the loss terms and the gradients of every parameter; a finite-difference test pins them.

With ``action_mask_slice`` (the module's, where its observations carry an ``action_mask``), the
logits of the actions the mask forbids become ``MASKED_LOGIT`` before the categorical, as in the
module's forward: they get zero probability in the ratio and the entropy, and zero gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.modules.action_masking import legal_actions, mask_logits
from ray_sampler.modules.mlp import backward, forward

__all__ = ["ppo_loss_and_grads"]

_LOG_2PI = float(np.log(2 * np.pi))

# (logp[N], entropy[N], backward): backward(d_logp[N], d_entropy[N]) gives the loss gradient with
# respect to the head's output and the gradients of the distribution's own parameters.
_Policy = tuple[np.ndarray, np.ndarray, Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, dict[str, np.ndarray]]]]


def _categorical(logits: np.ndarray, actions: Any) -> _Policy:
    n = len(logits)
    actions = np.asarray(actions, np.int64)
    z = logits - logits.max(axis=1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    probs = np.exp(log_probs)
    entropy = -(probs * log_probs).sum(axis=1)

    def grads(d_logp: np.ndarray, d_entropy: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        onehot = np.zeros_like(probs)
        onehot[np.arange(n), actions] = 1.0
        # dH/d logits = -p * (log p + H)
        return d_logp[:, None] * (onehot - probs) - d_entropy[:, None] * probs * (log_probs + entropy[:, None]), {}

    return log_probs[np.arange(n), actions], entropy, grads


def _diag_gaussian(mean: np.ndarray, log_std: np.ndarray, actions: Any) -> _Policy:
    actions = np.asarray(actions, np.float64).reshape(mean.shape)
    std = np.exp(log_std)
    z = (actions - mean) / std
    logp = (-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum(axis=1)
    entropy = np.full(len(mean), (log_std + 0.5 * (1.0 + _LOG_2PI)).sum())

    def grads(d_logp: np.ndarray, d_entropy: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        # d logp / d mean = z / std; d logp / d log_std = z^2 - 1; dH / d log_std = 1.
        d_log_std = (d_logp[:, None] * (z * z - 1.0)).sum(axis=0) + d_entropy.sum()
        return d_logp[:, None] * z / std, {"pi.log_std": d_log_std}

    return logp, entropy, grads


def ppo_loss_and_grads(
    params: dict[str, np.ndarray],
    batch: dict[str, np.ndarray],
    *,
    clip_param: float = 0.2,
    vf_coeff: float = 0.5,
    entropy_coeff: float = 0.0,
    vf_clip_param: float | None = None,
    clipped: bool = True,
    action_mask_slice: slice | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Loss terms and gradients for ``batch`` (obs, actions, action_logp, advantages, value_targets);
    a Gaussian policy where ``params`` has ``pi.log_std``, else a categorical one. Observations that
    are ``{"own", "global"}`` dicts (CentralizedCriticMLPModule) feed the policy ``own`` and the
    value head ``global``. ``action_mask_slice``: where the policy input holds the action mask (None:
    no masking)."""
    raw = batch[Columns.OBS]
    if isinstance(raw, dict):  # a centralized critic's {"own", "global"}: the policy on own, the value on global
        obs = np.asarray(raw["own"], np.float64).reshape(len(raw["own"]), -1)
        vf_in = np.asarray(raw["global"], np.float64).reshape(len(raw["global"]), -1)
    else:
        obs = vf_in = np.asarray(raw, np.float64).reshape(len(raw), -1)
    advantages = np.asarray(batch[Columns.ADVANTAGES], np.float64)
    targets = np.asarray(batch[Columns.VALUE_TARGETS], np.float64)
    logp_old = np.asarray(batch[Columns.ACTION_LOGP], np.float64)
    n = len(obs)
    p64 = {k: v.astype(np.float64) for k, v in params.items()}

    head_out, pi_cache = forward(p64, "pi", obs)
    legal: np.ndarray | None = None
    if "pi.log_std" in p64:
        logp, entropy, policy_grads = _diag_gaussian(head_out, p64["pi.log_std"], batch[Columns.ACTIONS])
    else:
        legal = None if action_mask_slice is None else legal_actions(obs, action_mask_slice)
        logits = head_out if legal is None else mask_logits(head_out, legal)
        logp, entropy, policy_grads = _categorical(logits, batch[Columns.ACTIONS])
    ratio = np.exp(logp - logp_old)
    clipped_ratio = np.clip(ratio, 1.0 - clip_param, 1.0 + clip_param)
    surrogate = np.minimum(ratio * advantages, clipped_ratio * advantages) if clipped else logp * advantages

    values, vf_cache = forward(p64, "vf", vf_in)
    vf_err = values[:, 0] - targets
    vf_sq = vf_err**2
    vf_active = np.ones(n, bool) if vf_clip_param is None else vf_sq < vf_clip_param
    vf_loss = vf_sq if vf_clip_param is None else np.minimum(vf_sq, vf_clip_param)

    terms = {
        "policy_loss": float(-surrogate.mean()),
        "vf_loss": float(vf_loss.mean()),
        "entropy": float(entropy.mean()),
        "mean_kl_approx": float((logp_old - logp).mean()),
        "clip_fraction": float((np.abs(ratio - 1.0) > clip_param).mean()),
    }
    terms["total_loss"] = terms["policy_loss"] + vf_coeff * terms["vf_loss"] - entropy_coeff * terms["entropy"]

    if clipped:  # d(-mean(surrogate))/d logp: the unclipped term carries the gradient where it is the minimum
        d_logp = -(advantages * ratio * (ratio * advantages <= clipped_ratio * advantages)) / n
    else:
        d_logp = -advantages / n
    d_head, grads = policy_grads(d_logp, np.full(n, -entropy_coeff / n))
    if legal is not None:  # a masked logit is a constant: no gradient reaches the head's output there
        d_head = np.where(legal, d_head, 0.0)
    grads.update(backward(p64, "pi", pi_cache, d_head))
    grads.update(backward(p64, "vf", vf_cache, (vf_coeff * 2.0 * vf_err * vf_active / n)[:, None]))
    return terms, {k: g.astype(params[k].dtype) for k, g in grads.items()}
