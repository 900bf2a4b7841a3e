"""The sampling layer: env creators, vector envs, EnvRunner and its engines, EnvRunnerGroup, and the
multi-agent env contract, its PettingZoo adapters and MultiAgentEnvRunner."""

from ray_sampler.sampling.config import (
    BatchMode,
    CountStepsBy,
    EnvRunnerConfig,
    EnvRunnerGroupConfig,
    VectorizationMode,
)
from ray_sampler.sampling.env_creator import EnvContext, register_env
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup, SampleTimeoutError
from ray_sampler.sampling.metrics import GroupMetrics, RunnerMetrics
from ray_sampler.sampling.multi_agent_config import ModuleSpec, MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import MultiAgentEnv, make_multi_agent
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner, MultiAgentRunnerMetrics
from ray_sampler.sampling.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv
from ray_sampler.sampling.request import SampleRequest

__all__ = [
    "BatchMode",
    "CountStepsBy",
    "EnvContext",
    "EnvRunner",
    "EnvRunnerConfig",
    "EnvRunnerGroup",
    "EnvRunnerGroupConfig",
    "GroupMetrics",
    "ModuleSpec",
    "MultiAgentConfig",
    "MultiAgentEnv",
    "MultiAgentEnvRunner",
    "MultiAgentRunnerMetrics",
    "ParallelPettingZooEnv",
    "PettingZooEnv",
    "RunnerMetrics",
    "SampleRequest",
    "SampleTimeoutError",
    "VectorizationMode",
    "make_multi_agent",
    "register_env",
]
