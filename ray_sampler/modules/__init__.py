"""The module layer: the RLModule protocol, the built-in numpy modules (random, MLP, Q), and MultiRLModule."""

from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.modules.multi_rl_module import MultiRLModule
from ray_sampler.modules.q_module import QModule
from ray_sampler.modules.random_module import RandomModule
from ray_sampler.modules.rl_module import RLModule

__all__ = ["MLPModule", "MultiRLModule", "QModule", "RLModule", "RandomModule"]
