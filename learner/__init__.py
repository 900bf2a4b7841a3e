"""Learner pieces (issue #5, in progress): numpy gradients of the built-in MLP, the PPO loss, Adam."""

from learner.optim import Adam
from learner.ppo_loss import ppo_loss_and_grads

__all__ = ["Adam", "ppo_loss_and_grads"]
