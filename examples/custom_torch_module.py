"""Plug in your own torch module: a PPO policy written as a TorchRLModule, trained on CartPole-v1.

    python examples/custom_torch_module.py [--max-iterations 120] [--num-env-runners 2]

``SharedTrunkModule`` below is what a user writes: a ``TorchRLModule`` subclass with its layers
in ``__init__`` and one ``_forward`` from a batch of tensors to the outputs PPO needs,
``action_dist_inputs`` (logits over the Discrete actions) and ``vf_preds``. Here the policy and
value heads share a LayerNorm-ed trunk. The base class does the rest: the runners call
``forward_exploration`` with numpy batches (no autograd, one torch thread per runner),
weights travel as numpy arrays, and the torch PPO learner trains ``forward_train``'s outputs.

The class goes in by reference: ``EnvRunnerConfig(module_class=SharedTrunkModule, module_config=...)``
with ``framework="torch"``; runners and learners build it the same way (Ray ships a class defined
in a script to its actors). The flags are those of ``ray-sampler train``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import gymnasium as gym
import ray
import torch

from learner.metrics import PPOTrainResult
from learner.train import PPOTrainingConfig, train_ppo
from ray_sampler.cli.train import TrainPPO, command_from_args
from ray_sampler.data.columns import Columns
from ray_sampler.modules.torch_module import TorchRLModule


class SharedTrunkModule(TorchRLModule):
    """Linear -> LayerNorm -> tanh trunk (``hidden`` units, two layers), then a logits head and a value head."""

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, *, hidden: int = 64, seed: int = 0
    ) -> None:
        super().__init__(observation_space, action_space)
        torch.manual_seed(seed)  # runners and learners build the same initial weights
        n_in = gym.spaces.flatdim(observation_space)
        self.trunk = torch.nn.Sequential(
            torch.nn.Linear(n_in, hidden),
            torch.nn.LayerNorm(hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
        )
        self.logits = torch.nn.Linear(hidden, int(action_space.n))
        self.value = torch.nn.Linear(hidden, 1)
        torch.nn.init.orthogonal_(self.logits.weight, gain=0.01)  # a near-uniform first policy

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        features = self.trunk(batch[Columns.OBS].reshape(len(batch[Columns.OBS]), -1))
        return {Columns.ACTION_DIST_INPUTS: self.logits(features), Columns.VF_PREDS: self.value(features)[:, 0]}


def main(cfg: PPOTrainingConfig) -> PPOTrainResult:
    runner = dataclasses.replace(cfg.env_runner, module_class=SharedTrunkModule, module_config={"hidden": 64})
    cfg = dataclasses.replace(cfg, env_runner=runner, framework="torch")
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        print(f"PPO (torch) with the user module {SharedTrunkModule.__name__} on {cfg.env_runner.env}")
        return train_ppo(cfg)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(command_from_args(TrainPPO, sys.argv[1:], prog="examples/custom_torch_module.py").to_config())
