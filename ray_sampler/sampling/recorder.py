"""StepRecorder: the module acting in the vector env, one ``StepRecord`` per vector step.

Both sampling engines step through it: connectors and module pick the actions for the current
batched observation, the vector env steps, and the whole vector step comes back as one record
(arrays over sub-envs, no per-sub-env Python work).

A stateful module's state travels here, batched over sub-envs, for both engines alike: each
step's ``state_in`` is the ``state_out`` the module gave for that sub-env's previous step (the
runner stores it per step in the episode's ``extra_model_outputs``, so a continuation chunk's
lookback holds it), or the module's initial state where the sub-env began a new episode (a
reset, an autoreset, a rebuilt sub-env). The engines' steps agree with the stored data by
construction; tests/ray_sampler/sampling/test_stateful.py checks it with a module whose state
counts steps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from connectors.env_to_module.running_view import RUNNING_VIEW_KEY, RunningEpisodesView
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.modules.rl_module import initial_state, is_stateful
from ray_sampler.sampling.vector import VectorStep, VectorStepper

__all__ = ["StepRecord", "StepRecorder", "checked_state_out"]


@dataclasses.dataclass
class StepRecord:
    """One vector step: what the env did and what the module chose."""

    step: VectorStep
    actions: Any
    extras: dict[str, Any]
    valid: np.ndarray
    """Transitions that belong to this record (the step's own mask, less those held back for later)."""


def checked_state_out(outputs: dict[str, Any], initial: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A stateful module's ``state_out`` in its forward ``outputs`` (copied), ConfigError unless it is
    a dict with the keys of its initial state ``initial``."""
    state_out = outputs.get(Columns.STATE_OUT)
    if not isinstance(state_out, dict) or state_out.keys() != initial.keys():
        got = sorted(state_out) if isinstance(state_out, dict) else repr(state_out)
        raise ConfigError(
            f"a stateful module must output {Columns.STATE_OUT!r}, a dict with the keys of its initial "
            f"state {sorted(initial)} (got {got})"
        )
    return {k: np.array(v, copy=True) for k, v in state_out.items()}


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
        self.initial_state: dict[str, np.ndarray] | None = initial_state(module) if is_stateful(module) else None
        """A stateful module's initial state (one sub-env's); None for a stateless module."""
        self.states: dict[str, np.ndarray] | None = None
        """A stateful module's ``state_in`` for the next step, batched over sub-envs."""

    def reset(self, seeds: Any) -> tuple[list[Any], list[dict]]:
        """Resets every sub-env: (observations, infos) per sub-env."""
        obs_rows, infos, self.vector_obs = self.stepper.reset(seeds)
        if self.initial_state is not None:
            self.states = tree.stack([self.initial_state] * len(obs_rows))
        return obs_rows, infos

    def record(
        self,
        episodes: list[SingleAgentEpisode],
        *,
        explore: bool,
        random_actions: bool,
        view: RunningEpisodesView | None = None,
    ) -> StepRecord:
        """One vector step; ``episodes`` are what the connectors see (the ongoing episodes, or none),
        ``view`` the running episodes' recent past when there are no episodes (the vectorized engine)."""
        actions, env_actions, extras = self._forward(episodes, explore, random_actions, view)
        step = self.stepper.step(env_actions)
        self.vector_obs = step.current_obs
        if self.initial_state is not None:
            self._carry_states(extras, [*step.resets, *step.failed])
        return StepRecord(step, actions, extras, step.valid)

    def _carry_states(self, extras: dict[str, Any], restarted: list[int]) -> None:
        """The next step's states: this step's ``state_out``, the initial state where a new episode began."""
        initial = self.initial_state
        assert initial is not None, "only called for a stateful module"
        states = checked_state_out(extras, initial)
        if restarted:
            rows = np.array(sorted(restarted))
            for k, v in states.items():
                v[rows] = initial[k]
        self.states = states

    def _forward(
        self, episodes: list[SingleAgentEpisode], explore: bool, random_actions: bool, view: Any
    ) -> tuple[Any, Any, dict[str, Any]]:
        """Connectors and module for the current observations: (actions, env actions, other outputs)."""
        module = self.module
        shared: dict[str, Any] = {"vector_obs": self.vector_obs}
        if view is not None:
            shared[RUNNING_VIEW_KEY] = view
        batch: dict[str, Any] = {} if self.states is None else {Columns.STATE_IN: self.states}
        batch = self.env_to_module(
            rl_module=module, batch=batch, episodes=episodes, explore=explore, shared_data=shared
        )
        out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
        if random_actions:
            # Uniform actions, but the module's outputs are still recorded so every step of an
            # episode carries the same extra model outputs whichever way it was sampled.
            out[Columns.ACTIONS] = self.random_module.forward_inference(batch)[Columns.ACTIONS]
        out = self.module_to_env(rl_module=module, batch=out, episodes=episodes, explore=explore, shared_data=shared)
        actions = out.pop(Columns.ACTIONS)
        return actions, out.pop(Columns.ACTIONS_FOR_ENV, actions), out
