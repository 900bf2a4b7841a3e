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
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym

from ray_sampler.data.multi_agent_episode import DEFAULT_MODULE_ID
from ray_sampler.errors import ConfigError
from ray_sampler.validate import check_callable, check_dict, check_optional, replace_field

__all__ = ["DEFAULT_MODULE_ID", "ModuleSpec", "MultiAgentConfig"]


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
        if self.policy_mapping_fn is None and len(policies) > 1:
            raise ConfigError(
                f"'policy_mapping_fn' must be given with several modules {sorted(policies)}: it says which "
                "agent each acts for"
            )

    @property
    def module_ids(self) -> tuple[str, ...]:
        return tuple(self.policies)

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
