"""Learners: numpy PPO and DQN learners, the data-parallel LearnerGroup, their gradients and optimizer
(the training loops are in learner.train and learner.train_dqn)."""

from learner.dqn import DQNConfig, DQNLearner, QModule, dqn_loss_and_grads
from learner.learner import Learner, PPOConfig
from learner.learner_group import LearnerGroup, shard_episodes
from learner.optim import Adam
from learner.ppo_loss import ppo_loss_and_grads

__all__ = [
    "Adam",
    "DQNConfig",
    "DQNLearner",
    "Learner",
    "LearnerGroup",
    "PPOConfig",
    "QModule",
    "dqn_loss_and_grads",
    "ppo_loss_and_grads",
    "shard_episodes",
]
