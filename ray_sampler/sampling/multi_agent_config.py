"""MultiAgentConfig: the modules of a multi-agent run and which agent each acts for (RLlib's ``multi_agent()``).

>>> cfg = MultiAgentConfig(policies={"p0": None, "p1": None}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
>>> cfg.module_ids
('p0', 'p1')
>>> MultiAgentConfig(policies={})
Traceback (most recent call last):
...
ray_sampler.errors.ConfigError: 'policies' must name at least one module (got {})
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Hashable, Mapping
from typing import Any, cast

import gymnasium as gym

from ray_sampler.data.multi_agent_episode import DEFAULT_MODULE_ID
from ray_sampler.errors import ConfigError
from ray_sampler.validate import check_bool, check_callable, check_choice, check_dict, check_optional, replace_field

__all__ = [
    "DEFAULT_MODULE_ID",
    "POLICY_MAPPINGS",
    "AgentTable",
    "ModuleSpec",
    "MultiAgentConfig",
    "mapping_by_spaces",
    "policy_mapping",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModuleSpec:
    """One module of a multi-agent run. Fields left None come from the runner's config (the module
    class and its config) or from the agents mapped to the module (the spaces)."""

    module_class: type | None = None
    """RLModule class, built as ``module_class(observation_space, action_space, **module_config)``;
    None: the runner config's ``module_class``."""
    module_config: dict[str, Any] | None = None
    """Keyword arguments of the module class; None: the runner config's ``module_config``."""
    observation_space: gym.Space | None = None
    """The env's observation space of the agents this module acts for; None: theirs, which must agree."""
    action_space: gym.Space | None = None
    """Their action space; None: theirs, which must agree."""

    def __post_init__(self) -> None:
        check_optional(check_callable, "module_class", self.module_class)
        check_optional(check_dict, "module_config", self.module_config)
        for name in ("observation_space", "action_space"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, gym.Space):
                raise ConfigError(f"ModuleSpec '{name}' must be a gymnasium.Space or None (got {value!r})")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiAgentConfig:
    """The modules of a multi-agent run and the mapping of agents onto them."""

    policies: dict[str, ModuleSpec | None] | tuple[str, ...] = (DEFAULT_MODULE_ID,)
    """Module ids, each with its ModuleSpec (or None: the defaults); a tuple of ids takes the defaults
    for all. Agents mapped to one module share its parameters."""
    policy_mapping_fn: Callable[..., str] | None = None
    """``policy_mapping_fn(agent_id, episode, **kwargs) -> module id``, called once per agent per
    episode; None maps every agent to the only module (an error with several)."""
    policies_to_train: tuple[str, ...] | None = None
    """The modules that learn; the others act with the weights they are given and never change.
    None: every module."""
    centralized_critic: bool = False
    """MAPPO's centralized critic: every observation becomes ``{"own", "global"}``
    (GlobalObservationEnv) and the built-in module a CentralizedCriticMLPModule, whose value head
    reads the global state while the policy reads the agent's own observation."""
    global_state: str = "concat"
    """With ``centralized_critic``: ``"concat"`` (every agent's latest observation, concatenated) or
    ``"state"`` (the env's own ``state()``)."""

    def __post_init__(self) -> None:
        policies = self.policies
        if isinstance(policies, (tuple, list)):
            policies = dict.fromkeys(policies)
        if not isinstance(policies, dict) or not policies:
            raise ConfigError(f"'policies' must name at least one module (got {self.policies!r})")
        for mid, spec in policies.items():
            if not isinstance(mid, str) or not mid:
                raise ConfigError(f"'policies' keys must be non-empty module id strings (got {mid!r})")
            if spec is not None and not isinstance(spec, ModuleSpec):
                raise ConfigError(f"'policies[{mid!r}]' must be a ModuleSpec or None (got {spec!r})")
        replace_field(self, "policies", {mid: spec or ModuleSpec() for mid, spec in policies.items()})
        check_optional(check_callable, "policy_mapping_fn", self.policy_mapping_fn)
        check_bool("centralized_critic", self.centralized_critic)
        check_choice("global_state", self.global_state, ("concat", "state"))
        if self.policies_to_train is not None:
            if isinstance(self.policies_to_train, str) or not all(isinstance(m, str) for m in self.policies_to_train):
                raise ConfigError(f"'policies_to_train' must be a tuple of module ids (got {self.policies_to_train!r})")
            replace_field(self, "policies_to_train", tuple(self.policies_to_train))
            unknown = sorted(set(self.policies_to_train) - set(policies))
            if unknown:
                raise ConfigError(
                    f"'policies_to_train' names modules {unknown} that 'policies' lacks (has {sorted(policies)})"
                )
        if self.policy_mapping_fn is None and len(policies) > 1:
            raise ConfigError(
                f"'policy_mapping_fn' must be given with several modules {sorted(policies)}: it says which "
                "agent each acts for"
            )

    @property
    def module_ids(self) -> tuple[str, ...]:
        return tuple(self.policies)

    @property
    def is_default(self) -> bool:
        """Whether the modules are the default: one module, ``DEFAULT_MODULE_ID``, with no spec, no
        mapping function and no ``policies_to_train``. A run resolves such a config on its env
        (``mapping_by_spaces``): every agent on the one module if their spaces agree, else a module
        per distinct pair of spaces."""
        return (
            self.module_ids == (DEFAULT_MODULE_ID,)
            and self.spec(DEFAULT_MODULE_ID) == ModuleSpec()
            and self.policy_mapping_fn is None
            and self.policies_to_train is None
        )

    @property
    def trained_module_ids(self) -> tuple[str, ...]:
        """The modules that learn (``policies_to_train``, or every module)."""
        train = self.policies_to_train
        return tuple(mid for mid in self.policies if train is None or mid in train)

    def spec(self, module_id: str) -> ModuleSpec:
        return self._specs()[module_id]

    def _specs(self) -> dict[str, ModuleSpec]:
        specs = self.policies
        assert isinstance(specs, dict), "normalized in __post_init__: a dict of ModuleSpecs"
        return cast("dict[str, ModuleSpec]", specs)

    def map_agent(self, agent_id: Any, episode: Any) -> str:
        """The module for ``agent_id`` in ``episode``; ConfigError if the mapping names an unknown module."""
        if self.policy_mapping_fn is None:
            return next(iter(self.policies))
        mid = self.policy_mapping_fn(agent_id, episode)
        if mid not in self.policies:
            raise ConfigError(
                f"'policy_mapping_fn' mapped agent {agent_id!r} to {mid!r}, which is not in 'policies' "
                f"{sorted(self.policies)}"
            )
        return mid


POLICY_MAPPINGS = ("shared", "by-spaces", "per-agent", "module:Name")
"""The forms ``policy_mapping`` takes."""


def policy_mapping(
    name: str,
    possible_agents: list[Any],
    agent_spaces: Mapping[Hashable, tuple[gym.Space, gym.Space]] | None = None,
) -> MultiAgentConfig:
    """The MultiAgentConfig a command line's ``--policy-mapping`` names, for an env whose agents are
    ``possible_agents`` (with ``agent_spaces``, their (observation, action) spaces):

    - ``"by-spaces"``: agents whose spaces are equal share a module (``mapping_by_spaces``), or one
      module, ``"shared"``, where all agree;
    - ``"shared"``: one module, ``"shared"``, for every agent;
    - ``"per-agent"``: a module per agent, named by the agent id;
    - ``"module:Name"``, where ``Name`` is a MultiAgentConfig, or a ``policy_mapping_fn(agent_id,
      episode, **kwargs)`` whose modules are the ids it gives the possible agents.

    ConfigError naming the flag otherwise.

    >>> policy_mapping("per-agent", [0, 1]).module_ids
    ('0', '1')
    """
    if name == "shared":
        return MultiAgentConfig(policies=("shared",), policy_mapping_fn=_Shared())
    if name == "by-spaces":
        if agent_spaces is None:
            raise ConfigError("--policy-mapping by-spaces: the agents' spaces are needed")
        return mapping_by_spaces(agent_spaces) or MultiAgentConfig(policies=("shared",), policy_mapping_fn=_Shared())
    if name == "per-agent":
        return MultiAgentConfig(policies=tuple(str(a) for a in possible_agents), policy_mapping_fn=_PerAgent())
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(
            f"--policy-mapping: 'shared', 'by-spaces', 'per-agent' or 'module:Name' is allowed (got {name!r})"
        )
    import importlib

    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"--policy-mapping {name!r}: {type(e).__name__}: {e}") from None
    if isinstance(found, MultiAgentConfig):
        return found
    if not callable(found):
        got = type(found).__name__
        raise ConfigError(
            f"--policy-mapping {name!r}: a MultiAgentConfig or a policy_mapping_fn is allowed (got {got})"
        )
    from ray_sampler.data.multi_agent_episode import MultiAgentEpisode

    probe = MultiAgentEpisode()
    try:
        modules = list(dict.fromkeys(found(aid, probe) for aid in possible_agents))
    except Exception as e:
        raise ConfigError(
            f"--policy-mapping {name!r} failed on agent ids {possible_agents}: {type(e).__name__}: {e}"
        ) from None
    if not all(isinstance(m, str) and m for m in modules):
        raise ConfigError(f"--policy-mapping {name!r} must return module id strings (got {modules})")
    return MultiAgentConfig(policies=tuple(modules), policy_mapping_fn=found)


class _Shared:
    """Every agent to module ``"shared"`` (a class, not a lambda: runners get it pickled)."""

    def __call__(self, agent_id: Any, episode: Any, **kwargs: Any) -> str:
        return "shared"


class _PerAgent:
    """Each agent to the module named by its id."""

    def __call__(self, agent_id: Any, episode: Any, **kwargs: Any) -> str:
        return str(agent_id)


def mapping_by_spaces(
    agent_spaces: Mapping[Hashable, tuple[gym.Space, gym.Space]], base: MultiAgentConfig | None = None
) -> MultiAgentConfig | None:
    """The modules for agents whose spaces differ: agents with equal (observation, action) spaces
    share a module, one per distinct pair, in the order of ``agent_spaces``. A module is named after
    its agents' common prefix (``adversary_0 .. adversary_2`` give ``adversary``), or their names
    joined where they have none. None where every agent has the same spaces (one module serves).
    ``base``'s other fields (the critic) are kept.

    >>> from gymnasium.spaces import Box, Discrete
    >>> small, big = (Box(0, 1, (2,)), Discrete(5)), (Box(0, 1, (4,)), Discrete(5))
    >>> cfg = mapping_by_spaces({"adversary_0": small, "adversary_1": small, "agent_0": big})
    >>> cfg.module_ids, cfg.map_agent("agent_0", None)
    (('adversary', 'agent'), 'agent')
    >>> mapping_by_spaces({"a": small, "b": small}) is None
    True
    """
    groups: list[tuple[tuple[gym.Space, gym.Space], list[Hashable]]] = []
    for aid, spaces in agent_spaces.items():
        for key, members in groups:
            if key == spaces:
                members.append(aid)
                break
        else:
            groups.append((spaces, [aid]))
    if len(groups) < 2:
        return None
    names: list[str] = []
    stripped = [_group_name(members) for _, members in groups]
    for name, (_, members) in zip(stripped, groups, strict=True):
        if stripped.count(name) > 1 and len(members) == 1:
            name = str(members[0])  # p0 and p1 alone: their own names, not p and p
        names.append(name if name not in names else f"{name}_{len(names)}")
    table = {aid: name for name, (_, members) in zip(names, groups, strict=True) for aid in members}
    config = MultiAgentConfig(policies=tuple(names), policy_mapping_fn=AgentTable(table))
    if base is None:
        return config
    return dataclasses.replace(config, centralized_critic=base.centralized_critic, global_state=base.global_state)


def _group_name(agents: list[Hashable]) -> str:
    """``adversary`` for ``adversary_0, adversary_1``; ``bob_alice`` for ``bob_0, alice_0``."""
    strip = "0123456789_-. "
    names = [str(a) for a in agents]
    common = "".join(c[0] for c in itertools.takewhile(lambda chars: len(set(chars)) == 1, zip(*names))).rstrip(strip)
    if common:
        return common
    parts = [n.rstrip(strip) or n for n in names]
    return "_".join(parts[:3]) + ("_etc" if len(parts) > 3 else "")


class AgentTable:
    """A mapping function from a table: each agent to its module (``mapping_by_spaces``'s); an agent
    the table lacks is a ConfigError naming it."""

    def __init__(self, table: Mapping[Hashable, str]) -> None:
        self.table = dict(table)

    def __call__(self, agent_id: Any, episode: Any, **kwargs: Any) -> str:
        try:
            return self.table[agent_id]
        except KeyError:
            raise ConfigError(f"agent {agent_id!r} is in no module of the mapping by spaces {self.table}") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentTable) and other.table == self.table

    def __hash__(self) -> int:
        return hash(tuple(sorted(map(str, self.table.items()))))

    def __repr__(self) -> str:
        return f"AgentTable({self.table!r})"
