"""AgentToModuleMapping: multi-agent episode chunks regrouped by module, for per-module learner pipelines.

The learner side of RLlib's piece of that name (seed 003): where RLlib reorders a batch's items by
module id, here every module's pipeline works on whole episode chunks, so the regrouping happens
at the chunk level. ``batch[module_id]`` becomes the list of SingleAgentEpisode chunks of every
agent the episodes map to that module (each agent on its own time: GAE, n-step returns and
sequences then run per agent); agents with no step in a chunk add nothing.

>>> from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
>>> ep = MultiAgentEpisode(agent_to_module_mapping_fn=lambda aid, episode: "shared" if aid != "c" else "solo")
>>> ep.add_env_reset(observations={"a": 0, "b": 0, "c": 0})
>>> ep.add_env_step({"a": 1, "b": 1, "c": 1}, {"a": 0, "b": 0, "c": 0}, {"a": 1.0, "b": 0.0, "c": 2.0})
>>> batch = AgentToModuleMapping()(rl_module=None, batch={}, episodes=[ep])
>>> {mid: [len(sa) for sa in chunks] for mid, chunks in batch.items()}
{'shared': [1, 1], 'solo': [1]}
"""

from __future__ import annotations

from typing import Any

from connectors.connector_v2 import ConnectorV2

__all__ = ["AgentToModuleMapping"]


class AgentToModuleMapping(ConnectorV2):
    """Regroups multi-agent episode chunks by module (see the module docstring)."""

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        for ep in episodes:
            for aid, chunk in ep.agent_episodes.items():
                if len(chunk):
                    batch.setdefault(ep.module_for(aid), []).append(chunk)
        return batch
