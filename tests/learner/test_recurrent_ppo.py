"""Recurrent PPO end to end, without Ray: the runner's states reach the learner's sequences exactly,
and a torch LSTM learns a task that needs memory where a memoryless MLP cannot."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from learner.learner import Learner, PPOConfig
from learner.torch_learner import TorchPPOLearner
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.torch_lstm import TorchLSTMModule
from ray_sampler.modules.torch_mlp import TorchMLPModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.ray_sampler.sampling.checks import stamp_config
from tests.ray_sampler.sampling.counter_module import CounterModule


class _CounterLearner(TorchPPOLearner):
    """The torch PPO learner's pipeline, for a numpy CounterModule (its batches only, no updates)."""

    def __init__(self, module: Any, config: PPOConfig) -> None:
        Learner.__init__(self, module, config)  # the pipeline; no torch optimizer for a module without weights


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per-step"])
@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_every_sequence_starts_from_the_state_out_of_the_step_before_it(batch_mode: str, columnar: bool) -> None:
    """CounterModule's state counts an episode's steps, so a sequence starting at episode step t must
    get state_in t: across cuts (from the lookback), sample() calls and episode starts."""
    runner = EnvRunner(
        stamp_config("sync", module_class=CounterModule, batch_mode=batch_mode, columnar_sampling=columnar)
    )
    learner = _CounterLearner(CounterModule(runner.observation_space, runner.action_space), PPOConfig(max_seq_len=3))
    try:
        for _ in range(4):
            batch = learner.build_batch(runner.sample())
            t_first = batch[Columns.OBS][:, 0, 3]  # StampEnv's observation holds the episode step t
            assert batch[Columns.STATE_IN]["count"][:, 0].tolist() == t_first.tolist()
            mask = batch[Columns.LOSS_MASK]
            # GAE's values came from sequences too: CounterModule's value is its state, i.e. t.
            np.testing.assert_array_equal(batch[Columns.VF_PREDS][mask], batch[Columns.OBS][..., 3][mask])
            assert (batch[Columns.SEQ_LENS] <= 3).all() and mask.sum() == batch[Columns.SEQ_LENS].sum()
            if batch_mode == "truncate_episodes":
                assert (t_first > 0).any()
    finally:
        runner.stop()


def test_the_numpy_learner_refuses_a_stateful_module() -> None:
    spaces = (gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match=r"Learner cannot train the stateful module CounterModule: use framework"):
        Learner(CounterModule(*spaces), PPOConfig())


class RememberBit(gym.Env):
    """Shows a random bit each step; the reward is 1 when the action repeats the bit shown one step
    earlier (a coin flip at the first step). Memoryless: 0.5 per step at best; with memory: ~1."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.bits: list[int] = []

    def _obs(self) -> np.ndarray:
        return np.array([2 * self.bits[-1] - 1], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.bits = [int(b) for b in self.np_random.integers(2, size=2)]
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self.bits[-2])
        self.bits.append(int(self.np_random.integers(2)))
        return self._obs(), reward, False, len(self.bits) > 11, {}


def _reward_per_step(module_class: type, iterations: int) -> float:
    """Mean reward per step over the last 3 of ``iterations`` PPO updates (truncate mode: 25-step
    fragments cut the 10-step episodes anywhere, so sequences start from the lookback's states)."""
    runner = EnvRunner(
        EnvRunnerConfig(
            env=lambda _: RememberBit(),
            num_envs_per_env_runner=8,
            rollout_fragment_length=25,
            module_class=module_class,
        )
    )
    learner = TorchPPOLearner(
        module_class(runner.observation_space, runner.action_space, seed=0),
        PPOConfig(lr=3e-3, num_epochs=6, minibatch_size=64, max_seq_len=10),
    )
    rewards = []
    try:
        for _ in range(iterations):
            runner.module.set_state(learner.module.get_state())
            episodes = runner.sample()
            rewards.append(np.mean(np.concatenate([ep.get_rewards() for ep in episodes])))
            learner.update_from_episodes(episodes)
    finally:
        runner.stop()
    return float(np.mean(rewards[-3:]))


def test_an_lstm_learns_what_needs_memory_and_an_mlp_cannot() -> None:
    lstm, mlp = _reward_per_step(TorchLSTMModule, 14), _reward_per_step(TorchMLPModule, 14)
    assert lstm > 0.8, lstm
    assert mlp < 0.6, mlp
