"""TorchLSTMModule: a recurrent (stateful) torch policy: an LSTM over the observations, then policy and value heads.

The runner steps it one observation at a time (``state_in`` -> ``state_out``, ``{"h", "c"}``
of ``lstm_cell_size`` each); the learner runs it over [B, T] sequences from each sequence's
first state. Both heads read the LSTM's output, so the value loss trains the LSTM too
(``vf_coeff`` weighs it). Where the observations carry an ``action_mask`` over Discrete actions
(PettingZoo's board games), the actions it forbids get ``MASKED_LOGIT`` in every forward, acting
and training alike (``ray_sampler/modules/action_masking.py``), as the MLP modules do.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules.action_masking import MASKED_LOGIT, action_mask_slice
from ray_sampler.modules.distributions import dist_input_size
from ray_sampler.modules.torch_mlp import check_hidden_sizes, mlp_layers, run_mlp, seeded
from ray_sampler.modules.torch_module import TorchRLModule, to_numpy

__all__ = ["TorchLSTMModule"]


class TorchLSTMModule(TorchRLModule):
    """LSTM (``lstm_cell_size``) -> tanh MLP heads (``head_hidden_sizes``; ``()``: linear ones) for
    the policy (logits, or a Gaussian mean with a state-free learned log-std) and the value."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        lstm_cell_size: int = 64,
        encoder_hidden_sizes: tuple[int, ...] = (64,),
        head_hidden_sizes: tuple[int, ...] = (64,),
        seed: int | None = 0,
        initial_log_std: float = 0.0,
    ) -> None:
        if not isinstance(lstm_cell_size, int) or isinstance(lstm_cell_size, bool) or lstm_cell_size < 1:
            raise ConfigError(f"'lstm_cell_size' must be an int >= 1 (got {lstm_cell_size!r})")
        if not isinstance(action_space, gym.spaces.Discrete | gym.spaces.Box):
            raise SpaceError(f"TorchLSTMModule needs a Discrete or Box action space (got {action_space})")
        super().__init__(observation_space, action_space)
        self.lstm_cell_size = lstm_cell_size
        hidden = tuple(head_hidden_sizes) and check_hidden_sizes(head_hidden_sizes)
        encoder_sizes = tuple(encoder_hidden_sizes) and check_hidden_sizes(encoder_hidden_sizes)
        n_in = gym.spaces.flatdim(observation_space)
        n_dist = dist_input_size(action_space)
        self.is_gaussian = isinstance(action_space, gym.spaces.Box)
        self.action_mask_slice = action_mask_slice(observation_space, action_space)
        with seeded(seed):
            # A tanh MLP encoder (none for ()) puts the observations on the LSTM's scale: the raw
            # ones of StatelessCartPole are a few hundredths and barely move its gates.
            self.encoder = mlp_layers((n_in, *encoder_sizes), float(np.sqrt(2))) if encoder_sizes else None
            self.lstm = torch.nn.LSTM(encoder_sizes[-1] if encoder_sizes else n_in, lstm_cell_size, batch_first=True)
            for name, param in self.lstm.named_parameters():
                if name.startswith("weight"):
                    torch.nn.init.orthogonal_(param)
                else:
                    torch.nn.init.zeros_(param)
            self.pi = mlp_layers((lstm_cell_size, *hidden, n_dist // 2 if self.is_gaussian else n_dist), 0.01)
            self.vf = mlp_layers((lstm_cell_size, *hidden, 1), 1.0)
        if self.is_gaussian:
            self.pi.log_std = torch.nn.Parameter(torch.full((n_dist // 2,), float(initial_log_std)))

    def is_stateful(self) -> bool:
        return True

    def get_initial_state(self) -> dict[str, np.ndarray]:
        zeros = np.zeros(self.lstm_cell_size, np.float32)
        return {"h": zeros, "c": zeros.copy()}

    def _sequence(self, obs_BT: torch.Tensor, state_in: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """LSTM outputs [B, T, H] for observations [B, T, ...] from states [B, H]; the final states."""
        x = obs_BT.reshape(*obs_BT.shape[:2], -1)
        if self.encoder is not None:
            x = torch.tanh(run_mlp(self.encoder, x, "tanh"))
        out, (h, c) = self.lstm(x, (state_in["h"][None], state_in["c"][None]))
        return out, {"h": h[0], "c": c[0]}

    def _heads(self, features: torch.Tensor, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """The heads on LSTM outputs [..., H]; ``obs`` [..., ...] the observations they came from (the mask)."""
        logits = run_mlp(self.pi, features, "tanh")
        if self.action_mask_slice is not None:
            flat = obs.reshape(*features.shape[:-1], -1)
            logits = logits.masked_fill(flat[..., self.action_mask_slice] <= 0, MASKED_LOGIT)
        if self.is_gaussian:
            logits = torch.cat([logits, self.pi.get_parameter("log_std").expand_as(logits)], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.VF_PREDS: run_mlp(self.vf, features, "tanh")[..., 0]}

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        """One step per row: observations [N, ...], ``state_in`` [N, H] -> outputs [N, ...] and ``state_out``."""
        out, state_out = self._sequence(batch[Columns.OBS][:, None], batch[Columns.STATE_IN])
        return {**self._heads(out[:, 0], batch[Columns.OBS]), Columns.STATE_OUT: state_out}

    def _forward_train(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Sequences: observations [B, T, ...], ``state_in`` [B, H] -> outputs [B, T, ...] and
        ``state_out`` [B, H], the state after step T (padding included)."""
        out, state_out = self._sequence(batch[Columns.OBS], batch[Columns.STATE_IN])
        return {**self._heads(out, batch[Columns.OBS]), Columns.STATE_OUT: state_out}

    def compute_values(self, batch: Any) -> np.ndarray:
        """Values [B, T] of a time-dimension batch (observations [B, T, ...], ``state_in`` [B, H])."""
        if not isinstance(batch, dict) or Columns.STATE_IN not in batch:
            raise ConfigError("TorchLSTMModule.compute_values takes a time-dimension batch with 'state_in'")
        with torch.no_grad():
            values: np.ndarray = to_numpy(self._forward_train(self._tensors(batch))[Columns.VF_PREDS])
            return values
