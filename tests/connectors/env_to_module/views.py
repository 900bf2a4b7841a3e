"""Shared by the trajectory-view tests: runner chunks with what the module saw, and the learner's view of them."""

from __future__ import annotations

from typing import Any

from connectors.learner import DEFAULT_MODULE_ID
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.env_runner import EnvRunner
from tests.ray_sampler.sampling.frames import frame_config

__all__ = ["CASES", "runner_and_learner_views"]

CASES: dict[str, dict[str, Any]] = {
    "discrete_sync": {"mode": "sync"},
    "box_actions_next_step": {"mode": "NextStep", "box_actions": True},
    "nested_frames": {"mode": "sync", "nested": True},
}


def runner_and_learner_views(
    *, columnar: bool, mode: str = "sync", **kwargs: Any
) -> tuple[list[SingleAgentEpisode], dict[str, Any], dict[str, Any]]:
    """(chunks of 4 truncate calls, what the runner's module saw at each step, the learner pieces'
    batch for the same steps); the learner pieces come from the runner's pieces (``learner_piece()``)."""
    runner = EnvRunner(frame_config(mode, columnar_sampling=columnar, **kwargs))
    chunks = [c for _ in range(4) for c in runner.sample()]
    seen = episodes_to_columnar(chunks).data.extra_model_outputs
    learner = ConnectorPipelineV2([p.learner_piece() for p in runner.config.env_to_module_connectors])
    batch = learner(rl_module=None, batch={}, episodes=chunks, shared_data={})[DEFAULT_MODULE_ID]
    return chunks, seen, batch
