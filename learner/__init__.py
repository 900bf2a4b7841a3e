"""Learners: numpy PPO and DQN learners, the data-parallel LearnerGroup, their optimizer, the
training loops (``train_ppo``, ``train_dqn``) with their configs, and the typed metrics they report.
Importing the package registers the asynchronous loops ``train_ppo`` hands over to."""

from learner.algorithm import Algorithm
from learner.dqn import DQNConfig, DQNLearner, dqn_loss_and_grads
from learner.learner import Learner, PolicyLoss, PPOConfig
from learner.learner_group import LearnerGroup, shard_episodes
from learner.metrics import (
    DQNStepMetrics,
    DQNTrainResult,
    DQNUpdateMetrics,
    PPOTrainResult,
    PPOUpdateMetrics,
    TrainResult,
)
from learner.optim import Adam
from learner.ppo_loop import sync_iterations
from learner.ppo_loss import ppo_loss_and_grads
from learner.train import PPOTrainingConfig, train_ppo
from learner.train_async import AsyncTrainResult, train_async
from learner.train_async_gradients import AsyncGradientsResult, train_async_gradients
from learner.train_dqn import DQNTrainingConfig, train_dqn
from ray_sampler.modules.q_module import QModule
from ray_sampler.sampling.evaluation import EvaluationConfig

__all__ = [
    "Adam",
    "Algorithm",
    "AsyncGradientsResult",
    "AsyncTrainResult",
    "DQNConfig",
    "DQNLearner",
    "DQNStepMetrics",
    "DQNTrainResult",
    "DQNTrainingConfig",
    "DQNUpdateMetrics",
    "EvaluationConfig",
    "Learner",
    "LearnerGroup",
    "PPOConfig",
    "PPOTrainResult",
    "PPOTrainingConfig",
    "PPOUpdateMetrics",
    "PolicyLoss",
    "QModule",
    "TrainResult",
    "dqn_loss_and_grads",
    "ppo_loss_and_grads",
    "shard_episodes",
    "sync_iterations",
    "train_async",
    "train_async_gradients",
    "train_dqn",
    "train_ppo",
]
