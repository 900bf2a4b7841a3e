"""StepRecorder: the module acting in the vector env, one ``StepRecord`` per vector step.

Both sampling engines step through it: connectors and module pick the actions for the current
batched observation, the vector env steps, and the whole vector step comes back as one record
(arrays over sub-envs, no per-sub-env Python work).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.vector import VectorStep, VectorStepper

__all__ = ["StepRecord", "StepRecorder"]


@dataclasses.dataclass
class StepRecord:
    """One vector step: what the env did and what the module chose."""

    step: VectorStep
    actions: Any
    extras: dict[str, Any]
    valid: np.ndarray
    """Transitions that belong to this record (the step's own mask, less those held back for later)."""


class StepRecorder:
    """Connectors + module + vector env; holds the batched observation the module acts on next."""

    def __init__(
        self,
        stepper: VectorStepper,
        *,
        module: Any,
        random_module: Any,
        env_to_module: Any,
        module_to_env: Any,
    ) -> None:
        self.stepper = stepper
        self.module = module
        self.random_module = random_module
        self.env_to_module = env_to_module
        self.module_to_env = module_to_env
        self.vector_obs: Any = None
        """The batched observation the module acts on next (None before the first reset)."""

    def reset(self, seeds: Any) -> tuple[list[Any], list[dict]]:
        """Resets every sub-env: (observations, infos) per sub-env."""
        obs_rows, infos, self.vector_obs = self.stepper.reset(seeds)
        return obs_rows, infos

    def record(self, episodes: list[SingleAgentEpisode], *, explore: bool, random_actions: bool) -> StepRecord:
        """One vector step; ``episodes`` are what the connectors see (the ongoing episodes, or none)."""
        actions, env_actions, extras = self._forward(episodes, explore, random_actions)
        step = self.stepper.step(env_actions)
        self.vector_obs = step.current_obs
        return StepRecord(step, actions, extras, step.valid)

    def _forward(
        self, episodes: list[SingleAgentEpisode], explore: bool, random_actions: bool
    ) -> tuple[Any, Any, dict[str, Any]]:
        """Connectors and module for the current observations: (actions, env actions, other outputs)."""
        module = self.module
        shared: dict[str, Any] = {"vector_obs": self.vector_obs}
        batch = self.env_to_module(rl_module=module, batch={}, episodes=episodes, explore=explore, shared_data=shared)
        out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
        if random_actions:
            # Uniform actions, but the module's outputs are still recorded so every step of an
            # episode carries the same extra model outputs whichever way it was sampled.
            out[Columns.ACTIONS] = self.random_module.forward_inference(batch)[Columns.ACTIONS]
        out = self.module_to_env(rl_module=module, batch=out, episodes=episodes, explore=explore, shared_data=shared)
        actions = out.pop(Columns.ACTIONS)
        return actions, out.pop(Columns.ACTIONS_FOR_ENV, actions), out
