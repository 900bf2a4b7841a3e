"""SampleRequest: the arguments of one ``sample()`` call, checked once, passed whole to runners and engines.

>>> SampleRequest(num_timesteps=10).num_env_steps(rollout_fragment_length=5, num_envs=4)
12
>>> SampleRequest(num_timesteps=0)
Traceback (most recent call last):
...
ray_sampler.errors.ConfigError: 'num_timesteps' must be an int >= 1 or None (got 0)
"""

from __future__ import annotations

import dataclasses

from ray_sampler.errors import ConfigError
from ray_sampler.validate import check_bool, check_int, check_optional, replace_field

__all__ = ["SampleRequest"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleRequest:
    """What one ``EnvRunner.sample()`` call is asked for (its keyword arguments, validated)."""

    num_timesteps: int | None = None
    """Env steps to collect, rounded up to a multiple of ``num_envs``; None: ``rollout_fragment_length`` per sub-env."""
    num_episodes: int | None = None
    """Whole episodes to collect instead of a number of steps; None: count steps."""
    explore: bool = True
    """Sample actions from the module's exploration distribution (False: its inference actions)."""
    random_actions: bool = False
    """Take uniformly random actions (the module's outputs are still recorded)."""
    force_reset: bool = False
    """Reset every sub-env before sampling."""
    chunks_by_ref: bool = False
    """The runner puts its chunks in the object store itself and answers with their ObjectRef (and
    its running episodes), so the driver can hand them to a learner actor without holding them."""

    def __post_init__(self) -> None:
        if self.num_timesteps is not None and self.num_episodes is not None:
            raise ConfigError("pass 'num_timesteps' or 'num_episodes', not both")
        replace_field(self, "num_timesteps", check_optional(check_int, "num_timesteps", self.num_timesteps, minimum=1))
        replace_field(self, "num_episodes", check_optional(check_int, "num_episodes", self.num_episodes, minimum=1))
        check_bool("explore", self.explore)
        check_bool("random_actions", self.random_actions)
        check_bool("force_reset", self.force_reset)
        check_bool("chunks_by_ref", self.chunks_by_ref)

    def num_env_steps(self, *, rollout_fragment_length: int, num_envs: int) -> int:
        """The env steps a step-counting call collects: ``num_timesteps`` (default
        ``rollout_fragment_length x num_envs``) rounded up to a multiple of ``num_envs``."""
        if self.num_timesteps is None:
            return rollout_fragment_length * num_envs
        return -(-self.num_timesteps // num_envs) * num_envs

    def without_reset(self) -> SampleRequest:
        """This request with ``force_reset=False`` (a request repeated ahead never resets again)."""
        return dataclasses.replace(self, force_reset=False)
