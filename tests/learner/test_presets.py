"""ppo_preset: applied to Pendulum-v1 and StatelessCartPole-v1 only, over the base's other fields; PPO on
Pendulum-v1 through train_ppo."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

from learner.learner import PPOConfig
from learner.presets import PRESET_ENVS, ppo_preset
from learner.train import PPOTrainingConfig, train_ppo
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.modules.torch_lstm import TorchLSTMModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.evaluation import EvaluationConfig


def pendulum_base(**runner: Any) -> PPOTrainingConfig:
    return PPOTrainingConfig(env_runner=EnvRunnerConfig(env="Pendulum-v1", seed=3, **runner))


def test_the_envs_with_presets() -> None:
    assert PRESET_ENVS == (
        "Pendulum-v1", "StatelessCartPole-v1", "pettingzoo:mpe2.simple_spread_v3", "pettingzoo:mpe2.simple_v3",
        "pettingzoo:mpe2.simple_speaker_listener_v4", "pettingzoo:mpe2.simple_reference_v3",
        "pettingzoo:mpe2.simple_adversary_v3", "pettingzoo:mpe2.simple_tag_v3", "pettingzoo:mpe2.simple_crypto_v3",
        "pettingzoo:mpe2.simple_push_v3",
        "pettingzoo:classic.tictactoe_v3", "pettingzoo:classic.connect_four_v3",
    )  # fmt: skip


def test_the_simple_spread_preset_sets_the_measured_settings_and_rllibs_target() -> None:
    env = "pettingzoo:mpe2.simple_spread_v3"
    base = PPOTrainingConfig(env_runner=EnvRunnerConfig(env=env, seed=1))
    cfg = ppo_preset(env, base)
    assert (cfg.env_runner.num_envs_per_env_runner, cfg.env_runner.rollout_fragment_length) == (8, 125)
    assert cfg.ppo == dataclasses.replace(base.ppo, lr=3e-4, num_epochs=6, minibatch_size=256)
    # RLlib's -20.5 per agent, summed over the three agents; a budget of 150k env steps.
    assert (cfg.target_return, cfg.max_env_steps, cfg.max_iterations) == (-61.5, 150_000, None)


def test_the_tictactoe_preset_stops_on_its_evaluations_against_the_random_player() -> None:
    base = PPOTrainingConfig(env_runner=EnvRunnerConfig(env="pettingzoo:tictactoe_v3", seed=1), max_iterations=9)
    for env in ("pettingzoo:tictactoe_v3", "pettingzoo:classic.tictactoe_v3"):  # the short name and the family's
        cfg = ppo_preset(env, base)
        assert cfg.evaluation == EvaluationConfig(
            evaluation_interval=5, evaluation_duration=200, evaluation_opponent="random"
        )
        assert (cfg.stop_on, cfg.target_return, cfg.max_env_steps, cfg.max_iterations) == (
            "evaluation",
            0.75,
            150_000,
            None,
        )
        assert (cfg.ppo, cfg.env_runner) == (base.ppo, base.env_runner)  # self-play at the defaults


def test_the_connect_four_preset_takes_the_self_play_example_s_settings() -> None:
    base = PPOTrainingConfig(env_runner=EnvRunnerConfig(env="pettingzoo:connect_four_v3", seed=2))
    cfg = ppo_preset("pettingzoo:connect_four_v3", base)
    assert cfg.evaluation.evaluation_opponent == "random" and cfg.evaluation.evaluation_interval == 5
    assert (cfg.stop_on, cfg.target_return, cfg.max_env_steps, cfg.max_iterations) == ("evaluation", 0.8, 150_000, None)
    assert (cfg.env_runner.num_envs_per_env_runner, cfg.env_runner.rollout_fragment_length) == (8, 128)
    assert cfg.ppo == dataclasses.replace(base.ppo, lr=1e-3, entropy_coeff=0.01, num_epochs=6, minibatch_size=256)
    assert cfg.env_runner.seed == 2


@pytest.mark.parametrize(
    ("scenario", "target", "budget", "tuned"),
    [
        ("simple_v3", -10.0, 50_000, False),
        ("simple_speaker_listener_v4", -36.0, 100_000, True),
        ("simple_reference_v3", -45.0, 150_000, True),
        ("simple_adversary_v3", None, 100_000, True),
        ("simple_tag_v3", None, 150_000, True),
        ("simple_crypto_v3", None, 100_000, False),
        ("simple_push_v3", None, 150_000, False),
    ],
)
def test_each_mpe_scenario_gets_its_measured_settings(
    scenario: str, target: float | None, budget: int, tuned: bool
) -> None:
    base = PPOTrainingConfig(env_runner=EnvRunnerConfig(env=f"pettingzoo:{scenario}", seed=1), max_iterations=9)
    for env in (f"pettingzoo:{scenario}", f"pettingzoo:mpe2.{scenario}"):  # the short name and the family's
        cfg = ppo_preset(env, base)
        assert (cfg.target_return, cfg.max_env_steps, cfg.max_iterations) == (target, budget, None)
        runner = (cfg.env_runner.num_envs_per_env_runner, cfg.env_runner.rollout_fragment_length)
        if tuned:  # simple_spread's settings
            assert runner == (8, 125)
            assert cfg.ppo == dataclasses.replace(base.ppo, lr=3e-4, num_epochs=6, minibatch_size=256)
        else:  # the PPO defaults did better
            assert runner == (base.env_runner.num_envs_per_env_runner, base.env_runner.rollout_fragment_length)
            assert cfg.ppo == base.ppo


def test_the_stateless_cartpole_preset_trains_a_torch_lstm_with_normalized_observations() -> None:
    base = PPOTrainingConfig(env_runner=EnvRunnerConfig(env="StatelessCartPole-v1", seed=4), num_learners=1)
    cfg = ppo_preset("StatelessCartPole-v1", base)
    assert cfg.framework == "torch" and cfg.env_runner.module_class is TorchLSTMModule
    assert cfg.env_runner.module_config == {"seed": 4}
    assert cfg.ppo == dataclasses.replace(
        base.ppo,
        lr=3e-4,
        lambda_=1.0,
        clip_param=0.3,
        vf_clip_param=10.0,
        num_epochs=6,
        vf_coeff=0.05,
        grad_clip=None,
        observation_filter="mean_std",
        max_seq_len=20,
    )
    assert (cfg.max_iterations, cfg.max_env_steps, cfg.target_return, cfg.num_learners) == (None, 300_000, 350.0, 1)
    assert cfg.env_runner.rollout_fragment_length == 256  # 2,048 env steps an iteration
    # A user's own torch module class is kept; the flags applied after the preset override it.
    runner = dataclasses.replace(base.env_runner, module_class=RecordingTorchLSTM)
    own = dataclasses.replace(base, framework="torch", env_runner=runner)
    assert ppo_preset("StatelessCartPole-v1", own).env_runner.module_class is RecordingTorchLSTM


class RecordingTorchLSTM(TorchLSTMModule):
    """A user's own LSTM module class."""


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCarContinuous-v0", "pendulum-v1"])
def test_an_env_without_a_preset_gets_the_base_unchanged(env_id: str) -> None:
    base = PPOTrainingConfig(env_runner=EnvRunnerConfig(env=env_id), max_iterations=7)
    assert ppo_preset(env_id, base) is base


def test_the_pendulum_preset_sets_its_hyperparameters_and_budget() -> None:
    cfg = ppo_preset("Pendulum-v1", pendulum_base())
    assert cfg.ppo == PPOConfig(
        lr=3e-4,
        gamma=0.95,
        lambda_=0.1,
        num_epochs=6,
        minibatch_size=64,
        entropy_coeff=0.0,
        vf_clip_param=10.0,
        grad_clip=None,
    )
    runner = cfg.env_runner
    assert (runner.num_envs_per_env_runner, runner.rollout_fragment_length, runner.normalize_actions) == (4, 256, True)
    assert runner.module_config == {"initial_log_std": 0.0}
    assert cfg.target_return == -300.0
    steps_per_iteration = cfg.env_runner_group.num_env_runners * 4 * 256
    assert cfg.max_iterations * steps_per_iteration == 399_360  # the ~400k env-step budget


def test_the_pendulum_preset_keeps_the_base_s_other_fields() -> None:
    base = dataclasses.replace(
        pendulum_base(module_config={"hidden_sizes": (32,), "initial_log_std": -1.0}),
        ppo=PPOConfig(seed=5, clip_param=0.3),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=3),
        num_learners=2,
    )
    cfg = ppo_preset("Pendulum-v1", base)
    assert (cfg.ppo.seed, cfg.ppo.clip_param, cfg.ppo.lr) == (5, 0.3, 3e-4)
    assert cfg.env_runner.seed == 3 and cfg.env_runner_group == base.env_runner_group and cfg.num_learners == 2
    assert cfg.env_runner.module_config == {"hidden_sizes": (32,), "initial_log_std": -1.0}  # the base's wins


def test_a_custom_module_class_gets_no_initial_log_std() -> None:
    cfg = ppo_preset("Pendulum-v1", pendulum_base(module_class=RecordingMLP, module_config={"hidden_sizes": (8,)}))
    assert cfg.env_runner.module_config == {"hidden_sizes": (8,)}


class RecordingMLP(MLPModule):
    """The built-in MLP, remembering every instance built in this process (the driver's: the learner's last)."""

    built: ClassVar[list[MLPModule]] = []

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> None:
        super().__init__(observation_space, action_space, **kwargs)
        RecordingMLP.built.append(self)


@pytest.mark.usefixtures("ray_session")
def test_train_ppo_runs_the_pendulum_preset_and_learns_the_log_std() -> None:
    RecordingMLP.built.clear()
    cfg = ppo_preset("Pendulum-v1", pendulum_base(module_class=RecordingMLP, module_config={"initial_log_std": -0.5}))
    small_runner = dataclasses.replace(cfg.env_runner, num_envs_per_env_runner=2, rollout_fragment_length=50)
    cfg = dataclasses.replace(cfg, env_runner=small_runner, max_iterations=2)
    lines: list[str] = []
    result = train_ppo(cfg, log=lines.append)
    assert result.iterations == 2 and result.env_steps == 2 * 2 * 2 * 50 and not result.reached
    assert [line.split(":")[0] for line in lines] == ["iter 1", "iter 2", "did not reach mean return -300"]
    learner_module = RecordingMLP.built[-1]  # the learner group builds its module after the runners' check
    log_std = learner_module.get_state()["pi.log_std"]
    assert log_std.shape == (1,) and np.isfinite(log_std).all() and log_std[0] != np.float32(-0.5)
