"""The policy-optimizer choice: its names, its one-line errors, and what the asynchronous loop refuses."""

from __future__ import annotations

import pytest

from learner.learner import PPOConfig
from learner.optimizers import AsyncGradientsConfig, AsyncSamplesConfig, Optimizer, algorithm_name
from learner.train import PPOTrainingConfig, train_ppo
from ray_sampler.errors import ConfigError


@pytest.mark.parametrize(
    ("optimizer", "policy_loss", "name"),
    [("sync_samples", "clipped", "PPO"), ("sync_samples", "pg", "A2C"), ("async_samples", "clipped", "APPO"),
     ("async_samples", "pg", "IMPALA"), ("async_gradients", "pg", "A3C"), ("async_gradients", "clipped", "A3C")],
)  # fmt: skip
def test_each_optimizer_and_loss_has_its_usual_name(optimizer: str, policy_loss: str, name: str) -> None:
    cfg = PPOTrainingConfig(optimizer=optimizer, ppo=PPOConfig(policy_loss=policy_loss))
    assert cfg.optimizer is Optimizer(optimizer)
    assert algorithm_name(cfg.optimizer, cfg.ppo.policy_loss) == name


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PPOTrainingConfig(optimizer="async"), r"^'optimizer' must be one of 'sync_samples', 'async_samples'"),
        (lambda: AsyncGradientsConfig(max_staleness=-1), r"^'max_staleness' must be an int >= 0"),
        (lambda: PPOConfig(policy_loss="a2c"), r"^'policy_loss' must be one of 'clipped', 'pg'"),
        (lambda: PPOTrainingConfig(async_samples={"max_policy_lag": 1}), r"^'async_samples' must be"),
        (lambda: AsyncSamplesConfig(broadcast_interval=0), r"^'broadcast_interval' must be an int >= 1"),
    ],
    ids=["optimizer", "max_staleness", "policy_loss", "async_samples", "broadcast_interval"],
)
def test_bad_values_are_one_line(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]


def test_train_ppo_hands_the_asynchronous_loop_no_train_result_callback() -> None:
    with pytest.raises(ConfigError, match=r"^the asynchronous loops take no 'on_train_result'"):
        train_ppo(PPOTrainingConfig(optimizer="async_samples"), on_train_result=lambda loop: None)
