"""Torch learners: TorchPPOLearner and TorchDQNLearner (autograd losses, torch's Adam), and TorchAdam.

TorchPPOLearner is :class:`learner.learner.Learner` with the numpy parts swapped: the learner
pipeline, batches, minibatch plans, update loop and metrics are the Learner's own; the loss is
``ppo_loss.py``'s (clipped surrogate, value loss with optional ``vf_clip_param``, entropy
bonus; categorical or diagonal Gaussian), computed with autograd. Gradients and state cross
the learner's boundary as numpy (``compute_gradients`` returns a dict of arrays, so a
LearnerGroup averages them unchanged; ``get_state`` holds only arrays and plain Python values,
so a checkpoint saves it without pickle).

TorchDQNLearner is :class:`learner.dqn.DQNLearner` the same way: the loss is
:func:`learner.dqn.dqn_loss_and_grads`'s (double Q, a target network, Huber, n-step discount,
prioritized-replay weights) with gradients from autograd; replay pulls, priority pushes and
``update_from_batch`` are DQNLearner's own.

A stateful module (``is_stateful()``) trains on time-dimension batches: each row of the batch
is a sequence ([B, T, ...] columns, ``state_in`` [B, ...], ``loss_mask`` [B, T]), minibatches
are rows of sequences (``minibatch_size`` counts sequences then), and every mean of the loss is
over the real steps only (RLlib's ``possibly_masked_mean``): padded steps change nothing.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from learner.dqn import DQNConfig, DQNLearner, check_dqn_observation_space, flat_observations
from learner.learner import Learner, PolicyLoss, PPOConfig
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.distributions import dist_class_for
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.modules.torch_mlp import Q_VALUES, TorchQModule
from ray_sampler.modules.torch_module import TorchRLModule, load_weights, to_tensor, weights_of
from ray_sampler.validate import check_number, check_optional, check_type

__all__ = ["TorchAdam", "TorchDQNLearner", "TorchPPOLearner", "dqn_loss", "ppo_loss", "take_rows"]

_LOG_2PI = math.log(2 * math.pi)
_PPO_KEYS = (Columns.OBS, Columns.ACTIONS, Columns.ACTION_LOGP, Columns.ADVANTAGES, Columns.VALUE_TARGETS)
_SEQUENCE_KEYS = (Columns.STATE_IN, Columns.LOSS_MASK, Columns.SEQ_LENS)


def take_rows(tree: Any, rows: np.ndarray) -> Any:
    """``tree[rows]`` for an array or (nested) dicts of arrays."""
    if isinstance(tree, dict):
        return {k: take_rows(v, rows) for k, v in tree.items()}
    return np.asarray(tree)[rows]


class TorchAdam:
    """``torch.optim.Adam`` over a module's parameters with a global gradient-norm clip, taking
    gradients as numpy and holding its state as numpy, in the shape of :class:`learner.optim.Adam`'s
    (``{"t", "m", "v"}``, moments keyed by parameter name)."""

    def __init__(self, module: torch.nn.Module, *, lr: float, grad_clip: float | None = None) -> None:
        check_number("lr", lr, minimum=0, exclusive_minimum=True)
        check_optional(check_number, "grad_clip", grad_clip, minimum=0, exclusive_minimum=True)
        self.grad_clip = grad_clip
        self.params = dict(module.named_parameters())
        self.optimizer = torch.optim.Adam(list(self.params.values()), lr=lr)

    def gradients(self) -> dict[str, np.ndarray]:
        """The parameters' ``.grad`` as numpy copies (zeros where a parameter has none)."""
        return {
            k: np.zeros(tuple(p.shape), np.float32) if p.grad is None else p.grad.detach().cpu().numpy().copy()
            for k, p in self.params.items()
        }

    def zero_gradients(self) -> dict[str, np.ndarray]:
        """Zero gradients of every parameter (a learner's share of an empty minibatch)."""
        return {k: np.zeros(tuple(p.shape), np.float32) for k, p in self.params.items()}

    def step(self, grads: dict[str, np.ndarray]) -> float:
        """Sets every parameter's gradient from ``grads``, clips and steps; returns the global norm
        before clipping."""
        if grads.keys() != self.params.keys():
            raise ValueError(f"TorchAdam.step: gradients for {sorted(grads)}, parameters {sorted(self.params)}")
        for k, p in self.params.items():
            p.grad = torch.as_tensor(np.array(grads[k]), dtype=p.dtype, device=p.device).reshape(p.shape)
        max_norm = math.inf if self.grad_clip is None else self.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(list(self.params.values()), max_norm)
        self.optimizer.step()
        return float(norm)

    def get_state(self) -> dict[str, Any]:
        t, m, v = 0, {}, {}
        for k, p in self.params.items():
            state = self.optimizer.state.get(p)
            if state:
                t = int(state["step"])
                m[k] = state["exp_avg"].detach().cpu().numpy().copy()
                v[k] = state["exp_avg_sq"].detach().cpu().numpy().copy()
        return {"t": t, "m": m, "v": v}

    def set_state(self, state: dict[str, Any]) -> None:
        unknown = sorted((state["m"].keys() | state["v"].keys()) - self.params.keys())
        if unknown or state["m"].keys() != state["v"].keys():
            raise ValueError(f"TorchAdam.set_state: moments for {sorted(state['m'])} (unknown {unknown})")
        per_param: dict[int, dict[str, torch.Tensor]] = {}
        for i, (k, p) in enumerate(self.params.items()):
            if k in state["m"]:
                per_param[i] = {
                    "step": torch.tensor(float(state["t"])),
                    "exp_avg": torch.as_tensor(np.array(state["m"][k]), dtype=p.dtype).reshape(p.shape),
                    "exp_avg_sq": torch.as_tensor(np.array(state["v"][k]), dtype=p.dtype).reshape(p.shape),
                }
        groups = self.optimizer.state_dict()["param_groups"]
        self.optimizer.load_state_dict({"state": per_param, "param_groups": groups})


def _logp_and_entropy(
    action_space: gym.Space, dist_inputs: torch.Tensor, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` and entropy, per step, under the built-in distribution of
    ``action_space`` (categorical over logits; diagonal Gaussian over mean and log-std)."""
    if isinstance(action_space, gym.spaces.Discrete):
        log_probs = torch.log_softmax(dist_inputs, dim=-1)
        logp = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        return logp, -(log_probs.exp() * log_probs).sum(dim=-1)
    mean, log_std = dist_inputs.chunk(2, dim=-1)
    z = (actions.reshape(mean.shape) - mean) / log_std.exp()
    logp = (-0.5 * z * z - log_std - 0.5 * _LOG_2PI).sum(dim=-1)
    return logp, (log_std + 0.5 * (1.0 + _LOG_2PI)).sum(dim=-1)


def ppo_loss(module: TorchRLModule, batch: dict[str, Any], config: PPOConfig) -> tuple[dict[str, float], torch.Tensor]:
    """PPO's loss terms and total loss (a tensor to differentiate) on a batch of tensors; with
    ``loss_mask`` in the batch, every mean is over the masked-in steps only."""
    mask = batch.get(Columns.LOSS_MASK)
    mask = None if mask is None else mask.bool()

    def mean(x: torch.Tensor) -> torch.Tensor:
        return x.mean() if mask is None else x[mask].mean()

    # Padded inputs are zeroed first, so no value there (however large) reaches a gradient.
    advantages, targets, logp_old = (
        batch[k] if mask is None else torch.where(mask, batch[k], torch.zeros_like(batch[k]))
        for k in (Columns.ADVANTAGES, Columns.VALUE_TARGETS, Columns.ACTION_LOGP)
    )
    dist_class_for(module.action_space)  # raises for an action space the built-in loss does not cover
    out = module.forward_train(batch)
    logp, entropy = _logp_and_entropy(module.action_space, out[Columns.ACTION_DIST_INPUTS], batch[Columns.ACTIONS])
    ratio = torch.exp(logp - logp_old)
    clipped = ratio.clamp(1.0 - config.clip_param, 1.0 + config.clip_param)
    if config.policy_loss is PolicyLoss.CLIPPED:
        policy_loss = -mean(torch.minimum(ratio * advantages, clipped * advantages))
    else:  # the plain policy gradient (IMPALA's on V-trace advantages)
        policy_loss = -mean(logp * advantages)
    vf_sq = (out[Columns.VF_PREDS] - targets) ** 2
    vf_loss = mean(vf_sq if config.vf_clip_param is None else vf_sq.clamp(max=config.vf_clip_param))
    entropy_mean = mean(entropy)
    total = policy_loss + config.vf_coeff * vf_loss - config.entropy_coeff * entropy_mean
    with torch.no_grad():
        terms = {
            "policy_loss": policy_loss.item(),
            "vf_loss": vf_loss.item(),
            "entropy": entropy_mean.item(),
            "mean_kl_approx": mean(logp_old - logp).item(),
            "clip_fraction": mean(((ratio - 1.0).abs() > config.clip_param).to(ratio.dtype)).item(),
        }
    terms["total_loss"] = (
        terms["policy_loss"] + config.vf_coeff * terms["vf_loss"] - config.entropy_coeff * terms["entropy"]
    )
    return terms, total


class TorchPPOLearner(Learner):
    """PPO on a TorchRLModule; the same constructor and methods as :class:`learner.learner.Learner`
    (see the module docstring)."""

    optimizer: Any  # a TorchAdam here; the numpy Learner annotates its own Adam
    trains_stateful_modules = True

    def __init__(
        self,
        module: TorchRLModule,
        config: PPOConfig | None = None,
        *,
        user_pieces: tuple[Any, ...] = (),
        view_pieces: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(module, config, user_pieces=user_pieces, view_pieces=view_pieces)
        torch.set_num_threads(self.config.num_torch_threads)
        self.optimizer = TorchAdam(module, lr=self.config.lr, grad_clip=self.config.grad_clip)

    def compute_gradients(self, minibatch_index: int) -> tuple[dict[str, float], dict[str, np.ndarray], int]:
        """Loss terms, gradients (numpy, by parameter name) and row count of minibatch
        ``minibatch_index`` of the current plan (rows are sequences for a stateful module)."""
        if self._batch is None:
            raise ConfigError("compute_gradients: call set_batch first")
        rows = self._plan[minibatch_index]
        if not len(rows):
            return {}, self.optimizer.zero_gradients(), 0
        keys = _PPO_KEYS + (_SEQUENCE_KEYS if is_stateful(self.module) else ())
        missing = [k for k in keys if k not in self._batch]
        if missing:
            raise ConfigError(f"compute_gradients: the train batch lacks {missing} (it has {sorted(self._batch)})")
        param = next(self.module.parameters())
        minibatch = to_tensor(
            {k: take_rows(self._batch[k], rows) for k in keys}, float_dtype=param.dtype, device=param.device
        )
        self.module.zero_grad(set_to_none=True)
        terms, loss = ppo_loss(self.module, minibatch, self.config)
        loss.backward()
        return terms, self.optimizer.gradients(), len(rows)

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> float:
        """One optimizer step with ``grads`` (numpy, by parameter name); returns their global norm."""
        return self.optimizer.step(grads)


def dqn_loss(
    module: TorchQModule, target: TorchQModule, batch: dict[str, Any], config: DQNConfig
) -> tuple[dict[str, float], torch.Tensor, np.ndarray]:
    """Loss terms, the loss (a tensor to differentiate) and the TD errors of a batch of tensors."""
    q_all = module.forward_train({Columns.OBS: batch[Columns.OBS]})[Q_VALUES]
    actions = batch[Columns.ACTIONS].long()
    q = q_all.gather(1, actions[:, None])[:, 0]
    n = len(q)
    with torch.no_grad():
        next_obs = {Columns.OBS: batch[Columns.NEXT_OBS]}
        q_next_target = target.forward_train(next_obs)[Q_VALUES]
        best = (module.forward_train(next_obs)[Q_VALUES] if config.double_q else q_next_target).argmax(dim=1)
        n_step = batch.get(Columns.N_STEP, torch.ones(n, dtype=q.dtype))
        not_done = 1.0 - batch[Columns.TERMINATEDS].to(q.dtype)
        bootstrap = q_next_target.gather(1, best[:, None])[:, 0]
        td_target = batch[Columns.REWARDS] + config.gamma ** n_step.to(q.dtype) * not_done * bootstrap
    td = q - td_target
    weights = batch.get(Columns.WEIGHTS, torch.ones(n, dtype=q.dtype))
    huber = torch.nn.functional.huber_loss(td, torch.zeros_like(td), reduction="none", delta=config.huber_delta)
    loss = (weights * huber).mean()
    td_np = td.detach().cpu().numpy().astype(np.float64)
    terms = {"loss": loss.item(), "q_mean": q.mean().item(), "td_abs_mean": float(np.abs(td_np).mean())}
    return terms, loss, td_np


class TorchDQNLearner(DQNLearner):
    """A TorchQModule, its target network and torch's Adam; DQNLearner's methods (see its docstring)."""

    module: Any  # a TorchQModule here; DQNLearner annotates the numpy QModule
    optimizer: Any  # a TorchAdam here; DQNLearner annotates the numpy Adam

    def __init__(self, module: TorchQModule, config: DQNConfig | None = None) -> None:
        # Not DQNLearner.__init__: it builds a numpy target network and optimizer from ``module.params``.
        check_dqn_observation_space("TorchDQNLearner", module)
        self.module = module
        self.config: DQNConfig = DQNConfig() if config is None else check_type("config", config, DQNConfig)
        torch.set_num_threads(self.config.num_torch_threads)
        self.target = copy.deepcopy(module).requires_grad_(False)
        self.optimizer = TorchAdam(module, lr=self.config.lr, grad_clip=self.config.grad_clip)
        self.num_updates = 0
        self._batches = []
        self._td = {}

    def compute_gradients(self, batch_index: int | dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray], int]:
        """Loss terms (and ``td_errors``), gradients (numpy, by parameter name) and row count of a batch
        (pulled batch ``batch_index``, or given)."""
        batch = self._batches[batch_index] if isinstance(batch_index, int) else batch_index
        n = len(tree.first_leaf(batch[Columns.OBS]))
        if not n:
            return {}, self.optimizer.zero_gradients(), 0
        batch = flat_observations(self.module.observation_space, batch)  # its Q-values mask the next argmax
        keys = [Columns.OBS, Columns.NEXT_OBS, Columns.ACTIONS, Columns.REWARDS, Columns.TERMINATEDS]
        keys += [k for k in (Columns.N_STEP, Columns.WEIGHTS) if k in batch]
        columns = {k: np.asarray(batch[k]) for k in keys}
        # Env actions of Discrete(n, start) are Q columns 0..n-1.
        columns[Columns.ACTIONS] = columns[Columns.ACTIONS] - self.module.action_start
        columns[Columns.TERMINATEDS] = columns[Columns.TERMINATEDS].astype(np.float32)
        param = next(self.module.parameters())
        tensors = to_tensor(columns, float_dtype=param.dtype, device=param.device)
        self.module.zero_grad(set_to_none=True)
        loss_terms, loss, td = dqn_loss(self.module, self.target, tensors, self.config)
        loss.backward()
        if isinstance(batch_index, int):
            self._td[batch_index] = td
        return {**loss_terms, "td_errors": td}, self.optimizer.gradients(), n

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> float:
        """One optimizer step (and the target copy when due); returns the gradients' global norm."""
        norm: float = self.optimizer.step(grads)
        self.num_updates += 1
        if self.num_updates % self.config.target_update_every == 0:
            self.target.load_state_dict(self.module.state_dict())
        return norm

    def get_state(self) -> dict[str, Any]:
        return {
            "module": self.module.get_state(),
            "target": weights_of(self.target),
            "num_updates": self.num_updates,
            "optimizer": self.optimizer.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.module.set_state(state["module"])
        load_weights(self.target, state["target"], owner="TorchDQNLearner.target")
        self.num_updates = int(state["num_updates"])
        self.optimizer.set_state(state["optimizer"])
