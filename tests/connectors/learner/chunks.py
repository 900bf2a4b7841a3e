"""Shared by the learner piece tests: runner chunks to build train batches from, and a value module."""

from __future__ import annotations

from typing import Any

import numpy as np

from connectors.learner import DEFAULT_MODULE_ID
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.helpers import stamp_creator

__all__ = ["StampValues", "make_chunks", "run", "steps_of"]


class StampValues:
    """A module whose value of observation [w, v, e, t] is 0.1 * t + v (easy to check by hand)."""

    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, np.float64)
        return 0.1 * obs[:, 3] + obs[:, 1]


def make_chunks() -> list[SingleAgentEpisode]:
    """Truncate-mode chunks with lookback 3: cut, terminated, fresh and continuing ones."""
    runner = EnvRunner(
        EnvRunnerConfig(
            env=stamp_creator,
            num_envs_per_env_runner=3,
            rollout_fragment_length=4,
            episode_lookback_horizon=3,
            columnar_sampling=False,
        )
    )
    runner.sample()
    return runner.sample() + runner.sample()


def run(pieces: list[Any], episodes: list[SingleAgentEpisode]) -> dict[str, Any]:
    """The module's train batch from a pipeline of ``pieces``."""
    return ConnectorPipelineV2(pieces)(rl_module=StampValues(), batch={}, episodes=episodes)[DEFAULT_MODULE_ID]


def steps_of(episodes: list[SingleAgentEpisode]) -> list[tuple[SingleAgentEpisode, int]]:
    """Every (episode, step) in train-batch row order."""
    return [(ep, t) for ep in episodes for t in range(len(ep))]
