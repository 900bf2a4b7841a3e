"""MultiAgentEnv: the multi-agent env contract (RLlib's dict API), its step checks, and ``make_multi_agent``.

An env keyed by agent id: ``reset(*, seed=None, options=None) -> (obs, infos)`` and
``step(actions) -> (obs, rewards, terminateds, truncateds, infos)``. Only the agents present in
``obs`` act next, which covers turn-based play and agents that act on only some steps; agents may
join or leave mid-episode. ``terminateds`` and ``truncateds`` carry ``"__all__"``, which ends the
episode. ``possible_agents`` lists every agent that can appear, and ``observation_spaces`` /
``action_spaces`` (or ``get_observation_space(agent)`` / ``get_action_space(agent)``) give each
one's spaces.

``check_multi_agent_output`` is what a runner checks of each env output before recording it: a
one-line ``MultiAgentEnvError`` naming the agent and the env step for a missing ``"__all__"``, an
unknown agent, or an observation outside its agent's space (the episode itself refuses data for
done agents and actions from agents that got no observation).

>>> Env = make_multi_agent("CartPole-v1", num_agents=2)
>>> env = Env({})
>>> obs, infos = env.reset(seed=0)
>>> sorted(obs), env.possible_agents, env.get_action_space(1)
([0, 1], [0, 1], Discrete(2))
>>> obs, rew, term, trunc, infos = env.step({0: 0, 1: 1})
>>> rew, term["__all__"], trunc["__all__"]
({0: 1.0, 1: 1.0}, False, False)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import gymnasium as gym

from ray_sampler.errors import ConfigError, MultiAgentEnvError

__all__ = [
    "ALL",
    "MultiAgentEnv",
    "check_multi_agent_output",
    "is_multi_agent_env",
    "make_multi_agent",
    "missing_methods",
    "reset_output",
]

ALL = "__all__"


class MultiAgentEnv(gym.Env):
    """The base of a multi-agent env (see the module docstring), a ``gymnasium.Env`` as RLlib's is.

    Subclasses set ``possible_agents`` and ``observation_spaces`` / ``action_spaces`` (dicts by
    agent), or one ``observation_space`` / ``action_space`` (a ``Dict`` by agent, or one space every
    agent shares), or override the getters. They implement ``step``, and ``reset``, which may call
    ``super().reset(seed=seed, options=options)`` first, as gymnasium's and RLlib's envs do: it seeds
    ``self.np_random`` and returns nothing. ``render`` returns None and ``close`` does nothing
    unless overridden."""

    possible_agents: list[Hashable] = []  # noqa: RUF012  # a class default, replaced per instance
    agents: list[Hashable] = []  # noqa: RUF012  # likewise
    observation_spaces: dict[Hashable, gym.Space] | None = None
    action_spaces: dict[Hashable, gym.Space] | None = None
    observation_space: gym.Space | None = None  # type: ignore[assignment]  # None: per agent, above
    action_space: gym.Space | None = None  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        # Agents set before this call (a class attribute) are kept; each is the other's default.
        self.agents = list(self.agents or self.possible_agents)
        if not self.possible_agents:
            self.possible_agents = list(self.agents)

    def get_observation_space(self, agent_id: Hashable) -> gym.Space:
        return self._space("observation", self.observation_spaces, self.observation_space, agent_id)

    def get_action_space(self, agent_id: Hashable) -> gym.Space:
        return self._space("action", self.action_spaces, self.action_space, agent_id)

    def _space(self, kind: str, spaces: dict | None, space: gym.Space | None, agent_id: Hashable) -> gym.Space:
        if spaces is not None and agent_id in spaces:
            return spaces[agent_id]
        if spaces is None and isinstance(space, gym.spaces.Dict) and agent_id in space.spaces:
            return space[agent_id]
        if spaces is None and space is not None and not isinstance(space, gym.spaces.Dict):
            return space  # one space every agent shares
        raise MultiAgentEnvError(
            f"{type(self).__name__} has no {kind} space for agent {agent_id!r}: set '{kind}_spaces' (a dict by "
            f"agent) or override get_{kind}_space()"
        )

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:  # type: ignore[return]
        """Seeds ``self.np_random`` when ``seed`` is given (gymnasium's ``Env.reset``); a subclass
        calls it first, then returns ``(observations, infos)`` of the agents that act first."""
        super().reset(seed=seed, options=options)

    # Dicts by agent where gymnasium.Env's single-agent step returns scalars: a different contract.
    def step(self, action_dict: dict[Hashable, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        raise NotImplementedError(f"{type(self).__name__} must implement step(action_dict)")

    def render(self) -> Any:
        """Renders nothing unless a subclass overrides it (RLlib's default)."""
        return None


def is_multi_agent_env(env: Any) -> bool:
    """Whether ``env`` keeps the multi-agent contract: a MultiAgentEnv, or any env with
    ``possible_agents`` and per-agent space getters (an RLlib MultiAgentEnv included)."""
    if isinstance(env, MultiAgentEnv):
        return True
    return hasattr(env, "possible_agents") and callable(getattr(env, "get_observation_space", None))


def missing_methods(env: Any) -> list[str]:
    """The contract's methods a MultiAgentEnv subclass left to the base class (``reset``, ``step``)."""
    if not isinstance(env, MultiAgentEnv):
        return []
    return [m for m in ("reset", "step") if getattr(type(env), m) is getattr(MultiAgentEnv, m)]


def reset_output(env: Any, out: Any) -> tuple[dict, dict]:
    """A reset's ``(observations, infos)``; MultiAgentEnvError if ``out`` is anything else (a
    ``reset`` that ends with ``super().reset(...)``'s None, say)."""
    if isinstance(out, tuple) and len(out) == 2:
        return out
    got = f"{len(out)} values" if isinstance(out, tuple) else _short(out)
    raise MultiAgentEnvError(
        f"{type(env).__name__}.reset() must return (observations, infos), two dicts by agent (got {got}); "
        "super().reset(seed=seed, options=options) only seeds np_random and returns None"
    )


def check_multi_agent_output(
    env: Any,
    env_step: int,
    observations: Any,
    rewards: Any = None,
    terminateds: Any = None,
    truncateds: Any = None,
    infos: Any = None,
    *,
    check_spaces: bool = True,
) -> None:
    """Raises MultiAgentEnvError (one line naming the agent and the env step) if a reset's or step's
    output breaks the contract; ``rewards is None`` checks a reset's output."""
    possible = set(env.possible_agents)
    parts = {"observations": observations, "infos": infos}
    if rewards is not None:
        parts.update(rewards=rewards, terminateds=terminateds, truncateds=truncateds)
        for name in ("terminateds", "truncateds"):
            flags = parts[name]
            if not isinstance(flags, dict) or ALL not in flags:
                raise MultiAgentEnvError(
                    f"the env's {name} at env step {env_step} must be a dict with the key {ALL!r} (got {_short(flags)})"
                )
    for name, part in parts.items():
        if part is None:
            continue
        if not isinstance(part, dict):
            raise MultiAgentEnvError(
                f"the env's {name} at env step {env_step} must be a dict by agent (got {_short(part)})"
            )
        for aid in part:
            if aid != ALL and aid not in possible:
                raise MultiAgentEnvError(
                    f"the env's {name} at env step {env_step} name agent {aid!r}, which is not in possible_agents "
                    f"{sorted(map(str, possible))}"
                )
    if check_spaces:
        for aid, obs in observations.items():
            space = env.get_observation_space(aid)
            if not space.contains(obs):
                raise MultiAgentEnvError(
                    f"agent {aid!r}'s observation at env step {env_step} is not in its observation space "
                    f"{space} (got {_short(obs)})"
                )


def _short(value: Any) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def make_multi_agent(env: str | Callable[..., gym.Env], num_agents: int = 2) -> type[MultiAgentEnv]:
    """A MultiAgentEnv class of ``num_agents`` independent copies of a gymnasium env (a gymnasium id
    or a creator ``creator(config) -> gym.Env``), agents ``0 .. num_agents - 1``. Its constructor
    takes a config dict whose ``"num_agents"`` overrides the default. An agent that terminates or
    truncates leaves; the episode ends when every agent has, ``"__all__"`` truncated if any agent
    was truncated (a time limit: bootstrap), else terminated."""
    if not isinstance(num_agents, int) or isinstance(num_agents, bool) or num_agents < 1:
        raise ConfigError(f"'num_agents' must be an int >= 1 (got {num_agents!r})")
    name = env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)

    class MultiEnv(MultiAgentEnv):
        def __init__(self, config: dict[str, Any] | None = None) -> None:
            super().__init__()
            config = dict(config or {})
            n = config.pop("num_agents", num_agents)
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ConfigError(f"env_config 'num_agents' must be an int >= 1 (got {n!r})")
            self.envs = [gym.make(env) if isinstance(env, str) else env(config) for _ in range(n)]
            self.possible_agents = list(range(n))
            self.agents = list(self.possible_agents)
            self.observation_spaces = {i: e.observation_space for i, e in enumerate(self.envs)}
            self.action_spaces = {i: e.action_space for i, e in enumerate(self.envs)}
            self._done: dict[int, str] = {}

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
            obs, infos = {}, {}
            for i, e in enumerate(self.envs):
                obs[i], infos[i] = e.reset(seed=None if seed is None else seed + i, options=options)
            self._done = {}
            self.agents = list(self.possible_agents)
            return obs, infos

        def step(self, action_dict: dict[Hashable, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
            obs: dict[Any, Any] = {}
            rew: dict[Any, float] = {}
            term: dict[Any, bool] = {}
            trunc: dict[Any, bool] = {}
            infos: dict[Any, Any] = {}
            for i, action in action_dict.items():
                assert isinstance(i, int), "agent ids are ints"
                obs[i], r, term[i], trunc[i], infos[i] = self.envs[i].step(action)
                rew[i] = float(r)
                if term[i] or trunc[i]:
                    self._done[i] = "terminated" if term[i] else "truncated"
            self.agents = [i for i in self.possible_agents if i not in self._done]
            ended = not self.agents
            any_trunc = "truncated" in self._done.values()
            term[ALL], trunc[ALL] = ended and not any_trunc, ended and any_trunc
            return obs, rew, term, trunc, infos

        def render(self) -> Any:
            return self.envs[0].render()

        def close(self) -> None:
            for e in self.envs:
                e.close()

    MultiEnv.__name__ = MultiEnv.__qualname__ = f"MultiAgent{name if isinstance(name, str) else 'Env'}".replace(
        "-", "_"
    )
    return MultiEnv
