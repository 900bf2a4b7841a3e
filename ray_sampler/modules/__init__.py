"""The module layer: the RLModule protocol and the built-in numpy modules (random, MLP, Q)."""

from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.modules.q_module import QModule
from ray_sampler.modules.random_module import RandomModule
from ray_sampler.modules.rl_module import RLModule

__all__ = ["MLPModule", "QModule", "RLModule", "RandomModule"]
