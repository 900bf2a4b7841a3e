"""TorchLSTMModule's shapes: linear heads with ``head_hidden_sizes=()``, RLlib's default LSTM model's size."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.torch_lstm import TorchLSTMModule

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)  # StatelessCartPole's two observations
ACT = gym.spaces.Discrete(2)


def test_empty_head_sizes_make_linear_heads_that_act_and_give_values_over_sequences() -> None:
    module = TorchLSTMModule(OBS, ACT, lstm_cell_size=8, encoder_hidden_sizes=(), head_hidden_sizes=())
    assert [tuple(layer.weight.shape) for layer in module.pi] == [(2, 8)]
    assert [tuple(layer.weight.shape) for layer in module.vf] == [(1, 8)]
    states = {k: np.stack([v] * 3) for k, v in module.get_initial_state().items()}
    step = module.forward_inference({Columns.OBS: np.zeros((3, 2), np.float32), Columns.STATE_IN: states})
    assert step[Columns.ACTION_DIST_INPUTS].shape == (3, 2) and step[Columns.STATE_OUT]["h"].shape == (3, 8)
    values = module.compute_values({Columns.OBS: np.zeros((3, 5, 2), np.float32), Columns.STATE_IN: states})
    assert values.shape == (3, 5)


def test_rllibs_default_lstm_model_has_rllibs_parameter_count() -> None:
    """RLlib 2.60's default model with ``use_lstm=True`` (a tanh MLP of 256 x 256, a 256-cell LSTM,
    linear heads) reports 593,667 trainable parameters on StatelessCartPole; the same layout here
    has as many."""
    module = TorchLSTMModule(OBS, ACT, encoder_hidden_sizes=(256, 256), lstm_cell_size=256, head_hidden_sizes=())
    assert sum(p.numel() for p in module.parameters() if p.requires_grad) == 593_667


@pytest.mark.parametrize("sizes", [(0,), (4, -1), ("8",)])
def test_bad_head_sizes_are_refused(sizes: tuple) -> None:
    with pytest.raises(ConfigError, match=r"'hidden_sizes' must be a non-empty tuple of ints >= 1"):
        TorchLSTMModule(OBS, ACT, head_hidden_sizes=sizes)
