"""Torch CNN modules for image observations: TorchCNNModule (PPO) and TorchCNNQModule (DQN).

Observations are uint8 frames, channels first: ``obs[N, C, H, W]``, or ``obs[N, H, W]`` for one
channel (the ``ray_sampler/<Game>-v5`` Atari envs give [84, 84] grayscale frames; a frame-stacking
connector gives [k, 84, 84]). Frames stay uint8 up to the module, which converts them to float
and divides by 255 inside its forward pass: episodes, replay and train batches hold one byte per
pixel. The module sets ``needs_flat_observations = False``, so the runner's default
``FlattenObservations`` hands it the frames unflattened.

The network is the Nature-DQN encoder (Mnih et al. 2015): conv 32 8x8/4, conv 64 4x4/2, conv
64 3x3/1, a 512-unit dense layer, all ReLU, then linear heads; weights orthogonal (gain sqrt(2),
the policy head 0.01, the value and Q heads 1), biases zero. A seed gives the same weights every
time (and leaves torch's global random state as it was).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules.distributions import dist_input_size
from ray_sampler.modules.q_module import check_q_module_args, checked_epsilon
from ray_sampler.modules.torch_mlp import Q_VALUES, TorchQModule, seeded
from ray_sampler.modules.torch_module import TorchRLModule

__all__ = ["NATURE_CONV_FILTERS", "CNNEncoder", "TorchCNNModule", "TorchCNNQModule"]

NATURE_CONV_FILTERS: tuple[tuple[int, int, int], ...] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""The Nature-DQN conv stack: (out channels, kernel size, stride) per layer."""


def _image_shape(name: str, space: gym.Space, num_channels: int | None) -> tuple[int, int, int]:
    """(C, H, W) of the frames ``space`` describes; ``num_channels`` overrides C (a stacking connector's k)."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (2, 3):
        raise SpaceError(
            f"{name} needs a Box observation space of frames (H, W) or (C, H, W), channels first (got {space})"
        )
    shape = space.shape
    channels = 1 if len(shape) == 2 else shape[0]
    if num_channels is not None:
        if not isinstance(num_channels, int) or isinstance(num_channels, bool) or num_channels < 1:
            raise ConfigError(f"'num_channels' must be an int >= 1 or None (got {num_channels!r})")
        channels = num_channels
    return channels, shape[-2], shape[-1]


class CNNEncoder(torch.nn.Module):
    """Conv layers then one dense layer, ReLU throughout: uint8 frames [N, (C,) H, W] -> features [N, hidden_size]."""

    def __init__(
        self, image_shape: tuple[int, int, int], conv_filters: tuple[tuple[int, int, int], ...], hidden_size: int
    ) -> None:
        super().__init__()
        if not conv_filters or not all(
            isinstance(f, tuple) and len(f) == 3 and all(isinstance(x, int) and x >= 1 for x in f) for f in conv_filters
        ):
            raise ConfigError(
                f"'conv_filters' must be a non-empty tuple of (out_channels, kernel, stride) int triples (got "
                f"{conv_filters!r})"
            )
        if not isinstance(hidden_size, int) or hidden_size < 1:
            raise ConfigError(f"'hidden_size' must be an int >= 1 (got {hidden_size!r})")
        self.image_shape = image_shape
        layers: list[torch.nn.Module] = []
        channels, height, width = image_shape
        for out, kernel, stride in conv_filters:
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            if height < 1 or width < 1:
                raise ConfigError(
                    f"'conv_filters' {conv_filters!r} shrink frames of {image_shape[1:]} to nothing "
                    f"(layer {(out, kernel, stride)})"
                )
            layers += [torch.nn.Conv2d(channels, out, kernel, stride), torch.nn.ReLU()]
            channels = out
        layers += [torch.nn.Flatten(), torch.nn.Linear(channels * height * width, hidden_size), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*layers)
        for layer in self.net:
            if isinstance(layer, torch.nn.Conv2d | torch.nn.Linear):
                _init(layer, math.sqrt(2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        frames = obs.reshape(len(obs), *self.image_shape)  # [N, H, W] -> [N, 1, H, W]; a stack keeps its [N, C, ...]
        dtype = next(self.parameters()).dtype  # float32, or float64 where a learner checks gradients
        features: torch.Tensor = self.net(frames.to(dtype) / 255.0)
        return features


def _init(layer: torch.nn.Conv2d | torch.nn.Linear, gain: float) -> None:
    """Orthogonal weights of ``gain``, zero biases."""
    torch.nn.init.orthogonal_(layer.weight, gain=gain)
    if layer.bias is not None:  # always here: every layer is built with a bias
        torch.nn.init.zeros_(layer.bias)


def _linear(n_in: int, n_out: int, gain: float) -> torch.nn.Linear:
    linear = torch.nn.Linear(n_in, n_out)
    _init(linear, gain)
    return linear


class TorchCNNModule(TorchRLModule):
    """A Nature-CNN encoder shared by a policy head (logits, or mean and a state-free log-std) and a
    value head: ``action_dist_inputs`` and ``vf_preds``, as TorchMLPModule's (so the PPO learners train it).

    ``num_channels``: channels of the frames the module gets, where a connector stacks them (None:
    from the observation space, 1 for (H, W) frames).
    """

    needs_flat_observations = False
    """Frames reach the module unflattened (see ``connectors.env_to_module.FlattenObservations``)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        num_channels: int | None = None,
        conv_filters: tuple[tuple[int, int, int], ...] = NATURE_CONV_FILTERS,
        hidden_size: int = 512,
        seed: int | None = 0,
        initial_log_std: float = 0.0,
    ) -> None:
        super().__init__(observation_space, action_space)
        image_shape = _image_shape("TorchCNNModule", observation_space, num_channels)
        n_dist = dist_input_size(action_space)
        self.is_gaussian = isinstance(action_space, gym.spaces.Box)
        with seeded(seed):
            self.encoder = CNNEncoder(image_shape, tuple(conv_filters), hidden_size)
            self.pi = _linear(hidden_size, n_dist // 2 if self.is_gaussian else n_dist, 0.01)
            self.vf = _linear(hidden_size, 1, 1.0)
        if self.is_gaussian:
            self.log_std = torch.nn.Parameter(torch.full((n_dist // 2,), float(initial_log_std)))

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        features = self.encoder(batch[Columns.OBS])
        out = self.pi(features)
        if self.is_gaussian:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: out, Columns.VF_PREDS: self.vf(features)[:, 0]}

    def _compute_values(self, batch: dict[str, Any]) -> torch.Tensor:
        values: torch.Tensor = self.vf(self.encoder(batch[Columns.OBS]))[:, 0]
        return values


class TorchCNNQModule(TorchQModule):
    """A Nature-CNN encoder and a linear head of Q-values per action; TorchQModule's epsilon-greedy
    acting, ``q_values`` output and ``epsilon`` state (so TorchDQNLearner trains it)."""

    needs_flat_observations = False
    """Frames reach the module unflattened (see ``connectors.env_to_module.FlattenObservations``)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        num_channels: int | None = None,
        conv_filters: tuple[tuple[int, int, int], ...] = NATURE_CONV_FILTERS,
        hidden_size: int = 512,
        seed: int | None = 0,
        epsilon: float = 1.0,
    ) -> None:
        discrete = check_q_module_args("TorchCNNQModule", action_space, "relu")
        image_shape = _image_shape("TorchCNNQModule", observation_space, num_channels)
        # TorchQModule's own __init__ builds an MLP: only the base's runs, then the CNN's parts.
        TorchRLModule.__init__(self, observation_space, discrete)
        self.activation = "relu"
        self.num_actions, self.action_start = int(discrete.n), int(discrete.start)
        with seeded(seed):
            self.encoder = CNNEncoder(image_shape, tuple(conv_filters), hidden_size)
            self.q_head = _linear(hidden_size, self.num_actions, 1.0)
        self.epsilon = checked_epsilon(epsilon)

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {Q_VALUES: self.q_head(self.encoder(batch[Columns.OBS]))}
