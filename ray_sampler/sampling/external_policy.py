"""ServedPolicy: a runner's module and connector pipelines acting for external clients' episodes.

``act`` runs the env-to-module pipeline, the module and the module-to-env pipeline once for a batch
of episodes (one per client waiting for an action) exactly as a runner's per-step engine does for
its sub-envs; ``score`` records actions a client chose itself (``log_action``): the module's outputs
for the observation, the action's log-probability under them. A lock keeps a weights update (from
the runner's thread) out of a forward pass (the server's thread).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.runner_calls import pipeline_state, set_pipeline_state

__all__ = ["ServedPolicy"]


class ServedPolicy:
    """Module + pipelines behind a lock (see the module docstring)."""

    def __init__(self, *, module: Any, env_to_module: Any, module_to_env: Any) -> None:
        self.module = module
        self.env_to_module = env_to_module
        self.module_to_env = module_to_env
        self.lock = threading.Lock()

    def act(
        self, episodes: list[SingleAgentEpisode], *, explore: bool, actions: list[Any] | None = None
    ) -> tuple[list[Any], list[Any], list[dict[str, Any]]]:
        """(actions to record, actions for the env, the module's other outputs) per episode, for each
        episode's last observation; ``actions`` given: those are kept and scored."""
        with self.lock:
            batch = self.env_to_module(
                rl_module=self.module, batch={}, episodes=episodes, explore=explore, shared_data={}
            )
            module = self.module
            out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
            if actions is not None:
                out[Columns.ACTIONS] = np.asarray(actions)
            out = self.module_to_env(rl_module=module, batch=out, episodes=episodes, explore=explore, shared_data={})
        recorded = out.pop(Columns.ACTIONS)
        for_env = out.pop(Columns.ACTIONS_FOR_ENV, recorded)
        n = len(episodes)
        extras = [
            dict(zip(out, values))
            for values in zip(*(tree.unstack(v) if isinstance(v, dict) else list(v) for v in out.values()))
        ] or [{} for _ in range(n)]
        return list(recorded), list(for_env), extras

    def get_state(self) -> dict[str, Any]:
        with self.lock:
            return pipeline_state(self.module, self.env_to_module, self.module_to_env)

    def set_state(self, state: dict[str, Any]) -> None:
        with self.lock:
            set_pipeline_state(state, self.module, self.env_to_module, self.module_to_env)
