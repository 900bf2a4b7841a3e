"""Frameworks: the module and learner classes numpy and torch pick, the checks, and both training loops
running with torch modules and learners on Ray."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
import pytest

from learner.dqn import DQNLearner
from learner.frameworks import Framework, dqn_learner_class, ppo_learner_class, with_framework
from learner.learner import Learner
from learner.torch_learner import TorchDQNLearner, TorchPPOLearner
from learner.train import PPOTrainingConfig, train_ppo
from learner.train_dqn import DQNTrainingConfig, train_dqn
from ray_sampler.errors import ConfigError
from ray_sampler.modules import MLPModule, QModule
from ray_sampler.modules.torch_lstm import TorchLSTMModule
from ray_sampler.modules.torch_mlp import TorchMLPModule, TorchQModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner import build_module

RUNNER = EnvRunnerConfig(env="CartPole-v1", seed=5)


def test_numpy_keeps_the_runner_config_as_it_is() -> None:
    assert with_framework("numpy", RUNNER) is RUNNER
    q = dataclasses.replace(RUNNER, module_class=QModule)
    assert with_framework(Framework.NUMPY, q) is q


def test_torch_swaps_the_built_in_modules_for_their_twins_and_back() -> None:
    torch_runner = with_framework("torch", RUNNER)
    assert torch_runner.module_class is TorchMLPModule and torch_runner.module_config == {"seed": 5}
    q = with_framework("torch", dataclasses.replace(RUNNER, module_class=QModule, module_config={"epsilon": 0.5}))
    assert q.module_class is TorchQModule and q.module_config == {"epsilon": 0.5}
    assert with_framework("numpy", torch_runner).module_class is MLPModule
    assert with_framework("numpy", q).module_class is QModule
    # The torch twin built from the runner seed is the same module every time.
    a, b = (build_module(torch_runner, *_cartpole_spaces()) for _ in range(2))
    assert isinstance(a, TorchMLPModule)
    for k, v in a.get_state().items():
        np.testing.assert_array_equal(v, b.get_state()[k])


def _cartpole_spaces() -> tuple[Any, Any]:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


class MyTorchModule(TorchMLPModule):
    """A user's torch module class."""


class MyNumpyModule(MLPModule):
    """A user's numpy module class."""


def test_a_users_module_class_must_be_of_the_framework() -> None:
    mine = dataclasses.replace(RUNNER, module_class=MyTorchModule)
    assert with_framework("torch", mine) is mine
    with pytest.raises(ConfigError, match=r"'framework' is 'numpy' but 'module_class' MyTorchModule is a torch module"):
        with_framework("numpy", mine)
    with pytest.raises(ConfigError, match=r"'framework' is 'torch' but 'module_class' MyNumpyModule is a numpy"):
        with_framework("torch", dataclasses.replace(RUNNER, module_class=MyNumpyModule))
    with pytest.raises(ConfigError, match=r"'framework' must be one of 'numpy', 'torch' \(got 'jax'\)"):
        with_framework("jax", RUNNER)
    with pytest.raises(ConfigError, match=r"'framework' is 'numpy' but 'module_class' TorchLSTMModule"):
        PPOTrainingConfig(env_runner=dataclasses.replace(RUNNER, module_class=TorchLSTMModule))


def test_torch_without_torch_installed_is_a_one_line_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ConfigError, match=r"^'framework' 'torch' needs PyTorch.*pip install 'ray-sampler\[torch\]'$"):
        with_framework("torch", RUNNER)


def test_each_framework_has_its_learners() -> None:
    assert ppo_learner_class("numpy") is Learner and ppo_learner_class("torch") is TorchPPOLearner
    assert dqn_learner_class("numpy") is DQNLearner and dqn_learner_class("torch") is TorchDQNLearner


# PPO with a user torch module and the LSTM on Ray runners: tests/examples/test_examples.py.
@pytest.mark.usefixtures("ray_session")
def test_dqn_trains_a_torch_q_network_through_the_replay() -> None:
    base = DQNTrainingConfig()
    cfg = dataclasses.replace(
        base,
        framework="torch",
        env_runner_group=dataclasses.replace(base.env_runner_group, num_env_runners=1),
        replay=dataclasses.replace(base.replay, min_size_to_sample=256),
        max_env_steps=1024,
        target_return=None,
    )
    assert cfg.env_runner.module_class is TorchQModule
    result = train_dqn(cfg, log=lambda line: None)
    assert result.env_steps >= 1024 and result.num_updates > 0
    assert result.runner_env_steps_sent == result.replay_num_env_steps_received


def test_the_command_line_picks_the_framework() -> None:
    from ray_sampler.cli.train import TrainDQN, TrainPPO, command_from_args

    ppo = command_from_args(TrainPPO, ["--framework", "torch", "--seed", "2"], prog="t").to_config()
    assert ppo.framework == "torch" and ppo.env_runner.module_class is TorchMLPModule
    assert ppo.env_runner.module_config["seed"] == 2
    dqn = command_from_args(TrainDQN, ["--framework", "torch"], prog="t").to_config()
    assert dqn.framework == "torch" and dqn.env_runner.module_class is TorchQModule
    assert command_from_args(TrainPPO, [], prog="t").to_config().env_runner.module_class is None
    stateless = command_from_args(TrainPPO, ["--env", "StatelessCartPole-v1"], prog="t").to_config()
    assert stateless.env_runner.module_class is TorchLSTMModule and stateless.ppo.observation_filter == "mean_std"


@pytest.mark.usefixtures("ray_session")
def test_ppo_trains_the_built_in_torch_mlp_on_ray_runners() -> None:
    runner = dataclasses.replace(RUNNER, num_envs_per_env_runner=2, rollout_fragment_length=32)
    group = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)
    cfg = PPOTrainingConfig(env_runner=runner, env_runner_group=group, framework="torch", max_iterations=2)
    lines: list[str] = []
    result = train_ppo(dataclasses.replace(cfg, target_return=None), log=lines.append)
    assert result.env_steps == 2 * 2 * 32 and "weights v3" in lines[1]
