"""Torch twins of the built-in numpy modules: TorchMLPModule (as MLPModule) and TorchQModule (as QModule).

Parameters are named as the numpy ones' with torch's suffixes: layer ``i`` of head ``h`` is
``h.i.weight`` ([out, in], the numpy ``h.i.w`` transposed) and ``h.i.bias``; the Gaussian
log-std is ``pi.log_std``. A seed gives the same weights every time (and leaves torch's global
random state as it was).

Both mask as their numpy twins do where the observation space carries an ``action_mask``
(``ray_sampler/modules/action_masking.py``): the input is the whole flattened dict, and the actions
the mask forbids get ``MASKED_LOGIT`` as their logit (TorchMLPModule) or Q-value (TorchQModule) in
every forward, ``forward_train`` included, so a learner's log-probabilities, entropy and next-state
maxima see only the legal actions.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.action_masking import MASKED_LOGIT, action_mask_slice
from ray_sampler.modules.distributions import dist_input_size
from ray_sampler.modules.q_module import check_q_module_args, checked_epsilon, epsilon_greedy_logits
from ray_sampler.modules.torch_module import TorchRLModule

__all__ = [
    "Q_VALUES",
    "TorchMLPModule",
    "TorchQModule",
    "check_hidden_sizes",
    "masked",
    "mlp_layers",
    "run_mlp",
    "seeded",
]

Q_VALUES = "q_values"
"""TorchQModule's ``forward_train`` output: Q-values per action [N, num_actions]."""


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Torch's CPU generator seeded with ``seed`` inside, restored afterwards (None: not seeded)."""
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        yield


def mlp_layers(sizes: tuple[int, ...], out_gain: float) -> torch.nn.ModuleList:
    """Linear layers of ``sizes``: orthogonal weights (gain sqrt(2), the last ``out_gain``), zero biases."""
    layers = torch.nn.ModuleList()
    for layer, (a, b) in enumerate(itertools.pairwise(sizes)):
        linear = torch.nn.Linear(a, b)
        torch.nn.init.orthogonal_(linear.weight, gain=out_gain if layer == len(sizes) - 2 else math.sqrt(2))
        torch.nn.init.zeros_(linear.bias)
        layers.append(linear)
    return layers


def run_mlp(layers: torch.nn.ModuleList, x: torch.Tensor, activation: str) -> torch.Tensor:
    """``layers`` on ``x[..., in]``: ``activation`` (tanh or relu) between them, the last one linear."""
    for i, linear in enumerate(layers):
        x = linear(x)
        if i < len(layers) - 1:
            x = torch.tanh(x) if activation == "tanh" else torch.relu(x)
    return x


def masked(out: torch.Tensor, flat_obs: torch.Tensor, mask_slice: slice | None) -> torch.Tensor:
    """``out[N, n]`` with ``MASKED_LOGIT`` where the mask at ``mask_slice`` of ``flat_obs[N, D]`` is <= 0
    (``out`` itself where ``mask_slice`` is None)."""
    if mask_slice is None:
        return out
    return out.masked_fill(flat_obs[:, mask_slice] <= 0, MASKED_LOGIT)


def check_hidden_sizes(hidden_sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``hidden_sizes`` as a tuple; ConfigError unless it is a non-empty tuple of ints >= 1."""
    if not hidden_sizes or not all(isinstance(h, int) and h >= 1 for h in hidden_sizes):
        raise ConfigError(f"'hidden_sizes' must be a non-empty tuple of ints >= 1 (got {hidden_sizes!r})")
    return tuple(hidden_sizes)


class TorchMLPModule(TorchRLModule):
    """A tanh MLP policy (logits, or mean and a state-free log-std) and a separate MLP value head.

    The torch twin of :class:`ray_sampler.modules.mlp_module.MLPModule`: the same outputs
    (``action_dist_inputs``, ``vf_preds``) for the same weights, flat float observations, the same
    masking (see the module docstring).
    """

    action_mask_slice: slice | None = None
    """Where the action mask lies in the flat input (None: the observations carry none); set per
    instance from the spaces (``action_masking.action_mask_slice``)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        hidden_sizes: tuple[int, ...] = (64, 64),
        seed: int | None = 0,
        initial_log_std: float = 0.0,
    ) -> None:
        super().__init__(observation_space, action_space)
        self.hidden_sizes = check_hidden_sizes(hidden_sizes)
        pi_in, vf_in = self._input_sizes(observation_space)
        n_dist = dist_input_size(action_space)
        self.is_gaussian = isinstance(action_space, gym.spaces.Box)
        self.action_mask_slice = action_mask_slice(observation_space, action_space)
        with seeded(seed):
            self.pi = mlp_layers((pi_in, *self.hidden_sizes, n_dist // 2 if self.is_gaussian else n_dist), 0.01)
            self.vf = mlp_layers((vf_in, *self.hidden_sizes, 1), 1.0)
        if self.is_gaussian:  # registered on the pi head: its name is pi.log_std, as MLPModule's
            self.pi.log_std = torch.nn.Parameter(torch.full((n_dist // 2,), float(initial_log_std)))

    def _input_sizes(self, observation_space: gym.Space) -> tuple[int, int]:
        """The inputs of the policy and value heads: both read the flat observation here."""
        n_in = gym.spaces.flatdim(observation_space)
        return n_in, n_in

    def _policy_input(self, batch: dict[str, Any]) -> torch.Tensor:
        obs: torch.Tensor = batch[Columns.OBS]
        return obs.reshape(len(obs), -1)

    def _value_input(self, batch: dict[str, Any]) -> torch.Tensor:
        return self._policy_input(batch)

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        policy_input = self._policy_input(batch)
        out = masked(run_mlp(self.pi, policy_input, "tanh"), policy_input, self.action_mask_slice)
        if self.is_gaussian:
            out = torch.cat([out, self.pi.get_parameter("log_std").expand_as(out)], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: out, Columns.VF_PREDS: self._compute_values(batch)}

    def _compute_values(self, batch: dict[str, Any]) -> torch.Tensor:
        return run_mlp(self.vf, self._value_input(batch), "tanh")[:, 0]


class TorchQModule(TorchRLModule):
    """An MLP of Q-values per action; explores epsilon-greedily (``epsilon`` travels with the weights).

    The torch twin of :class:`ray_sampler.modules.q_module.QModule` (whose docstring has the
    semantics); ``forward_train`` gives the Q-values as ``q_values``.
    """

    action_mask_slice: slice | None = None
    """Where the action mask lies in the flat input (None: the observations carry none); set per
    instance from the spaces (``action_masking.action_mask_slice``)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        hidden_sizes: tuple[int, ...] = (64, 64),
        seed: int | None = 0,
        epsilon: float = 1.0,
        activation: str = "relu",
    ) -> None:
        discrete = check_q_module_args("TorchQModule", action_space, activation)
        super().__init__(observation_space, discrete)
        self.activation = activation
        self.num_actions, self.action_start = int(discrete.n), int(discrete.start)
        sizes = (gym.spaces.flatdim(observation_space), *check_hidden_sizes(hidden_sizes), self.num_actions)
        self.action_mask_slice = action_mask_slice(observation_space, discrete)
        with seeded(seed):
            self.q = mlp_layers(sizes, 1.0)
        self.epsilon = checked_epsilon(epsilon)

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        obs: torch.Tensor = batch[Columns.OBS]
        flat = obs.reshape(len(obs), -1)
        return {Q_VALUES: masked(run_mlp(self.q, flat, self.activation), flat, self.action_mask_slice)}

    def _greedy_and_dist(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        greedy = self._forward(batch)[Q_VALUES].argmax(dim=1)
        if self.action_mask_slice is not None:  # the masked twin of the plain path below: QModule's rule
            obs: torch.Tensor = batch[Columns.OBS]
            legal = (obs.reshape(len(obs), -1)[:, self.action_mask_slice] > 0).cpu().numpy()
            logits = epsilon_greedy_logits(greedy.cpu().numpy(), self.num_actions, self.epsilon, legal)
            return greedy, torch.as_tensor(logits)
        n = self.num_actions
        probs = torch.full((len(greedy), n), self.epsilon / n, dtype=torch.float64)
        probs[torch.arange(len(greedy)), greedy] += 1.0 - self.epsilon
        # A zero probability becomes the smallest float32 (logits stay finite; it is never drawn).
        return greedy, torch.log(probs.clamp_min(float(np.finfo(np.float32).tiny))).to(torch.float32)

    def _forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        greedy, dist = self._greedy_and_dist(batch)
        return {Columns.ACTIONS: greedy + self.action_start, Columns.ACTION_DIST_INPUTS: dist}

    def _forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._greedy_and_dist(batch)[1]}

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "epsilon": np.float64(self.epsilon)}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state({k: v for k, v in state.items() if k != "epsilon"})
        if "epsilon" in state:
            self.epsilon = checked_epsilon(state["epsilon"])
