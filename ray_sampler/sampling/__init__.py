"""The sampling layer: env creators, vector envs, EnvRunner and its engines, EnvRunnerGroup."""

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
    "RunnerMetrics",
    "SampleRequest",
    "SampleTimeoutError",
    "VectorizationMode",
    "register_env",
]
