"""MultiAgentPolicy: one ``Policy`` per module of a multi-agent run, and which module acts for each agent.

Saved and loaded like a single-agent policy (one folder, ``policy.json`` + ``policy.npz``); the
mapping is saved as the run's possible agents and the module each was mapped to (a
``policy_mapping_fn`` is code, which a saved policy never holds: pass ``mapping=`` to override it).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from ray_sampler.data import tree
from ray_sampler.policy.policy import (
    Policy,
    PolicyError,
    PolicyState,
    find_policy_dir,
    load_spec,
    read_policy_file,
    write_policy_file,
)

__all__ = ["MultiAgentPolicy", "load_policy", "runner_state"]


class MultiAgentPolicy:
    """``policies``: module id -> Policy; ``mapping``: agent id -> module id."""

    def __init__(
        self,
        policies: Mapping[str, Policy],
        mapping: Mapping[Hashable, str],
        *,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        unknown = sorted({str(m) for m in mapping.values()} - set(policies))
        if unknown:
            raise PolicyError(f"'mapping' names modules {unknown} that are not among the policies {sorted(policies)}")
        self.policies = dict(policies)
        self.mapping = dict(mapping)
        self.info = dict(info or {})

    def policy_for(self, agent_id: Hashable) -> Policy:
        """The policy that acts for ``agent_id`` (PolicyError for an agent the mapping does not know)."""
        if agent_id not in self.mapping:
            raise PolicyError(f"agent {agent_id!r} is not in the policy's mapping (agents: {list(self.mapping)})")
        return self.policies[self.mapping[agent_id]]

    def compute_actions(self, obs: Mapping[Hashable, Any], *, explore: bool = False) -> dict[Hashable, Any]:
        """``{agent id: env action}`` for ``{agent id: observation}`` (one observation per agent, each the
        first step of its episode); the agents of one module act in one forward pass."""
        by_module: dict[str, list[Hashable]] = {}
        for agent in obs:
            by_module.setdefault(self.mapping.get(agent, ""), []).append(agent)
        if "" in by_module:
            self.policy_for(by_module[""][0])  # raises, naming the agent
        out: dict[Hashable, Any] = {}
        for mid, agents in by_module.items():
            actions = self.policies[mid].compute_actions(tree.stack([obs[a] for a in agents]), explore=explore)
            out.update({a: tree.map_structure(lambda leaf, i=i: leaf[i], actions) for i, a in enumerate(agents)})
        return out

    def compute_single_action(
        self,
        agent_id: Hashable,
        obs: Any,
        state: PolicyState | None = None,
        *,
        reward: float = 0.0,
        explore: bool = False,
    ) -> tuple[Any, PolicyState]:
        """``Policy.compute_single_action`` of ``agent_id``'s module."""
        return self.policy_for(agent_id).compute_single_action(obs, state, reward=reward, explore=explore)

    def save_check(self) -> None:
        """PolicyError now for what ``save`` would refuse, writing nothing."""
        for policy in self.policies.values():
            policy.save_check()

    def save(self, path: Path | str) -> Path:
        """Writes every module's policy and the mapping into the folder ``path`` (atomically)."""
        body = {
            "kind": "multi_agent",
            "modules": self.policies,
            "mapping": [[agent, mid] for agent, mid in self.mapping.items()],
        }
        write_policy_file(Path(path), body, self.info)
        return Path(path)

    @classmethod
    def from_checkpoint(
        cls,
        path: Path | str,
        *,
        classes: Mapping[str, type] | None = None,
        mapping: Mapping[Hashable, str] | None = None,
    ) -> MultiAgentPolicy:
        """The multi-agent policy saved at ``path`` (a policy folder, a checkpoint or a run directory);
        ``mapping`` replaces the saved one."""
        folder = find_policy_dir(path)
        meta, arrays = read_policy_file(folder)
        if meta.get("kind") != "multi_agent":
            raise PolicyError(f"policy {folder} is single-agent: load it with Policy.from_checkpoint")
        policies = {
            mid: load_spec(Policy, spec, arrays, classes or {}, folder, meta["info"])
            for mid, spec in meta["modules"].items()
        }
        try:
            saved = {_agent_key(agent): str(mid) for agent, mid in meta["mapping"]}
        except (TypeError, ValueError):
            raise PolicyError(f"policy {folder} is corrupt: its mapping is not a list of [agent, module]") from None
        return cls(policies, saved if mapping is None else mapping, info=meta["info"])

    def __repr__(self) -> str:
        return f"MultiAgentPolicy(modules {sorted(self.policies)}, agents {list(self.mapping)})"


def _agent_key(agent: Any) -> Hashable:
    """An agent id as JSON gave it back (a list, never hashable, for a tuple id: made a tuple)."""
    return tuple(agent) if isinstance(agent, list) else agent


def load_policy(path: Path | str, *, classes: Mapping[str, type] | None = None) -> Policy | MultiAgentPolicy:
    """The policy at ``path`` (a policy folder, a checkpoint or a run directory), single- or multi-agent."""
    meta, _ = read_policy_file(find_policy_dir(path))
    loader = MultiAgentPolicy if meta.get("kind") == "multi_agent" else Policy
    return loader.from_checkpoint(path, classes=classes)


def runner_state(policy: Policy | MultiAgentPolicy) -> tuple[dict[str, Any], dict[str, Any]]:
    """(module weights, env-to-module connector states) of ``policy`` as runners load them (multi-agent:
    each by module id)."""
    if isinstance(policy, MultiAgentPolicy):
        return (
            {mid: p.module.get_state() for mid, p in policy.policies.items()},
            {mid: p.env_to_module.get_state() for mid, p in policy.policies.items()},
        )
    return policy.module.get_state(), policy.env_to_module.get_state()
