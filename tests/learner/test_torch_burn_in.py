"""burn_in_states: each sequence's first steps replayed without gradient, its state_in moved past them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from learner.replay_sequences import sample_sequences
from learner.torch_burn_in import burn_in_states
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.torch_lstm import TorchLSTMModule
from ray_sampler.modules.torch_mlp import TorchMLPModule
from ray_sampler.sampling.env_runner import EnvRunner
from replay.buffer import EpisodeReplayBuffer
from tests.ray_sampler.sampling.checks import stamp_config

SPACES = (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Discrete(2))
SEQ_LENS = [6, 4, 2, 1, 3]  # with burn-in 2, the sequences of 2 and 1 steps have nothing left to train on
KEPT = [0, 1, 4]


def _module() -> TorchLSTMModule:
    return TorchLSTMModule(*SPACES, lstm_cell_size=5, encoder_hidden_sizes=(8,), head_hidden_sizes=(8,), seed=3)


def _batch(seq_lens: list[int] = SEQ_LENS, max_seq_len: int = 6) -> dict[str, Any]:
    """A time-dimension batch of random sequences, zero padded after each one's real steps."""
    rng = np.random.default_rng(0)
    num_seq = len(seq_lens)
    mask_ST = np.arange(max_seq_len)[None, :] < np.array(seq_lens)[:, None]
    obs_ST = rng.uniform(-1, 1, (num_seq, max_seq_len, 3)).astype(np.float32) * mask_ST[..., None]
    return {
        Columns.OBS: obs_ST,
        Columns.ACTIONS: rng.integers(0, 2, (num_seq, max_seq_len)) * mask_ST,
        Columns.STATE_IN: {k: rng.normal(size=(num_seq, 5)).astype(np.float32) for k in ("h", "c")},
        Columns.LOSS_MASK: mask_ST,
        Columns.SEQ_LENS: np.array(seq_lens, np.int64),
    }


def _stepped(module: TorchLSTMModule, obs_T: np.ndarray, state: dict[str, np.ndarray]) -> tuple[list, dict]:
    """The module stepped one observation at a time as a runner does: per-step outputs, last state."""
    outputs = []
    for obs in obs_T:
        out = module.forward_exploration({Columns.OBS: obs[None], Columns.STATE_IN: state})
        outputs.append(out)
        state = out[Columns.STATE_OUT]
    return outputs, state


class TestBurnInStates:
    def test_state_in_is_the_state_after_stepping_through_the_burn_in(self) -> None:
        module, batch = _module(), _batch()
        out = burn_in_states(module, batch, 2)
        for row, s in enumerate(KEPT):
            start = {k: v[s : s + 1] for k, v in batch[Columns.STATE_IN].items()}
            _, expected = _stepped(module, batch[Columns.OBS][s, :2], start)
            for k in ("h", "c"):
                np.testing.assert_allclose(out[Columns.STATE_IN][k][row].numpy(), expected[k][0], atol=1e-6)

    def test_remaining_columns_are_the_originals_shifted_by_burn_in(self) -> None:
        batch = _batch()
        out = burn_in_states(_module(), batch, 2)
        for key in (Columns.OBS, Columns.ACTIONS, Columns.LOSS_MASK):
            np.testing.assert_array_equal(out[key].numpy(), batch[key][KEPT, 2:])
        assert out[Columns.SEQ_LENS].tolist() == [4, 2, 1]
        assert sorted(out) == sorted(batch)

    def test_sequences_no_longer_than_burn_in_are_removed(self) -> None:
        out = burn_in_states(_module(), _batch(), 2)
        assert out[Columns.OBS].shape == (3, 4, 3)
        assert {k: tuple(v.shape) for k, v in out[Columns.STATE_IN].items()} == {"h": (3, 5), "c": (3, 5)}
        out = burn_in_states(_module(), _batch([2, 1]), 2)
        assert out[Columns.OBS].shape == (0, 4, 3) and out[Columns.SEQ_LENS].tolist() == []
        assert out[Columns.STATE_IN]["h"].shape == (0, 5)

    def test_training_on_from_the_burned_in_state_equals_stepping_the_whole_sequence(self) -> None:
        module, batch = _module(), _batch()
        out = burn_in_states(module, batch, 2)
        with torch.no_grad():
            trained = module.forward_train(out)[Columns.VF_PREDS].numpy()
        for row, s in enumerate(KEPT):
            start = {k: v[s : s + 1] for k, v in batch[Columns.STATE_IN].items()}
            stepped, _ = _stepped(module, batch[Columns.OBS][s, : SEQ_LENS[s]], start)
            expected = [o[Columns.VF_PREDS][0] for o in stepped[2:]]
            np.testing.assert_allclose(trained[row, : SEQ_LENS[s] - 2], expected, atol=1e-6)

    def test_no_burn_in_gives_the_batch_back_as_tensors(self) -> None:
        batch = _batch()
        out = burn_in_states(_module(), batch, 0)
        np.testing.assert_array_equal(out[Columns.STATE_IN]["h"].numpy(), batch[Columns.STATE_IN]["h"])
        np.testing.assert_array_equal(out[Columns.OBS].numpy(), batch[Columns.OBS])
        assert out[Columns.SEQ_LENS].tolist() == SEQ_LENS

    def test_burn_in_reproduces_the_states_the_runner_stored(self) -> None:
        """With the runner's weights, burning in recomputes exactly the state_out the runner stored at
        the step before each sequence's first trained step."""
        runner = EnvRunner(
            stamp_config(
                "sync",
                module_class=TorchLSTMModule,
                module_config={"lstm_cell_size": 4, "encoder_hidden_sizes": (8,), "seed": 1},
            )
        )
        buffer = EpisodeReplayBuffer(seed=0)
        try:
            for _ in range(4):
                buffer.add(runner.sample())
        finally:
            runner.stop()
        batch = sample_sequences(buffer, runner.module, 64, 2, burn_in=3, extra_model_outputs=(Columns.STATE_OUT,))
        # The runner's env-to-module pipeline gave the module StampEnv's int observations as float32.
        batch[Columns.OBS] = batch[Columns.OBS].astype(np.float32)
        out = burn_in_states(runner.module, batch, 3)
        kept = batch[Columns.SEQ_LENS] > 3
        assert 0 < kept.sum() < 64
        for k in ("h", "c"):
            expected = batch[Columns.STATE_OUT][k][kept, 2]
            np.testing.assert_allclose(out[Columns.STATE_IN][k].numpy(), expected, atol=1e-5)


class TestNoGradientThroughBurnIn:
    def test_the_burned_in_state_carries_no_graph(self) -> None:
        out = burn_in_states(_module(), _batch(), 2)
        assert all(not v.requires_grad and v.grad_fn is None for v in out[Columns.STATE_IN].values())

    def test_gradients_are_those_of_a_constant_state_in(self) -> None:
        module = _module()
        out = burn_in_states(module, _batch(), 2)

        def grads(state_in: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            module.zero_grad()
            values = module.forward_train({**out, Columns.STATE_IN: state_in})[Columns.VF_PREDS]
            values[out[Columns.LOSS_MASK]].square().sum().backward()
            return {k: p.grad.clone() for k, p in module.named_parameters() if p.grad is not None}

        constant = {k: v.detach().clone() for k, v in out[Columns.STATE_IN].items()}
        with_burn_in, from_constant = grads(out[Columns.STATE_IN]), grads(constant)
        assert with_burn_in.keys() == from_constant.keys() and with_burn_in
        for k in with_burn_in:
            torch.testing.assert_close(with_burn_in[k], from_constant[k], rtol=0, atol=0)


class TestErrors:
    def test_burn_in_must_leave_a_step(self) -> None:
        with pytest.raises(ConfigError, match=r"'burn_in' must be an int >= 0 and <= 5 \(got 6\)"):
            burn_in_states(_module(), _batch(), 6)

    def test_a_module_that_is_not_stateful_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"burn_in_states needs a stateful module \(got TorchMLPModule\)"):
            burn_in_states(TorchMLPModule(*SPACES), _batch(), 2)

    def test_a_batch_without_time_dimension_is_refused(self) -> None:
        batch = {Columns.OBS: np.zeros((4, 3), np.float32)}
        with pytest.raises(ConfigError, match=r"burn_in_states needs a time-dimension batch: it lacks \['state_in'"):
            burn_in_states(_module(), batch, 1)

    def test_a_column_not_per_step_is_refused(self) -> None:
        batch = {**_batch(), "weights": np.ones(5, np.float32)}
        with pytest.raises(
            ConfigError, match=r"column 'weights' must be per step, \[S, T, \.\.\.\] = \[5, 6, \.\.\.\]"
        ):
            burn_in_states(_module(), batch, 1)
