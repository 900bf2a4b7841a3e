"""PettingZoo adapters: a Parallel env (``ParallelPettingZooEnv``) or an AEC env (``PettingZooEnv``) as a MultiAgentEnv.

``pip install "ray-sampler[pettingzoo]"`` brings pettingzoo, mpe2 (the MPE scenarios) and
pygame-ce, which every PettingZoo env imports when it loads (set ``SDL_VIDEODRIVER=dummy`` where
there is no display). A creator may also return a PettingZoo env as it is: the runner wraps it
with the adapter for its API.

Both end the episode when the PettingZoo env has no agents left: ``"__all__"`` truncated if any
agent was truncated (a time limit such as MPE's ``max_cycles``: values bootstrap), else terminated.

The AEC adapter is turn-based: one env step is the selected agent's move, then the moves
PettingZoo asks of agents that are done (stepped with ``None``), up to the next live agent, whose
observation is returned. Each agent gets every reward of those moves at once (PettingZoo's
per-step ``rewards``, not the ``last()`` cumulative reward, which would be counted again at each
of its turns), so an agent waiting for its turn still gets what the others' moves gave it, and
every reward is counted once. An agent that is done gets its final observation with its flag,
so a truncated agent can bootstrap.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ray_sampler.sampling.multi_agent_env import ALL, MultiAgentEnv

__all__ = ["ParallelPettingZooEnv", "PettingZooEnv", "is_aec_env", "is_parallel_env", "wrap_pettingzoo"]


class _PettingZooBase(MultiAgentEnv):
    def __init__(self, env: Any) -> None:
        super().__init__()
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.observation_spaces = {a: env.observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in self.possible_agents}
        self.render_mode = getattr(env, "render_mode", None)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    @staticmethod
    def _ends(truncateds: dict[Hashable, bool], ended: bool) -> tuple[bool, bool]:
        truncated = ended and any(truncateds.values())
        return ended and not truncated, truncated


class ParallelPettingZooEnv(_PettingZooBase):
    """A PettingZoo ``ParallelEnv`` as a MultiAgentEnv (see the module docstring)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        return dict(obs), {a: i for a, i in (infos or {}).items() if a in obs}

    def step(self, action_dict: dict[Hashable, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        obs, rewards, terms, truncs, infos = self.env.step(action_dict)
        self.agents = list(self.env.agents)
        term = {a: bool(f) for a, f in terms.items()}
        trunc = {a: bool(f) and not term.get(a, False) for a, f in truncs.items()}
        term[ALL], trunc[ALL] = self._ends(trunc, not self.env.agents)
        return dict(obs), {a: float(r) for a, r in rewards.items()}, term, trunc, dict(infos)


class PettingZooEnv(_PettingZooBase):
    """A PettingZoo ``AECEnv`` (turn-based) as a MultiAgentEnv (see the module docstring)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.env.reset(seed=seed, options=options)
        obs, _, _, _, info = self.env.last()
        self.agents = list(self.env.agents)
        return {self.env.agent_selection: obs}, {self.env.agent_selection: info}

    def step(self, action_dict: dict[Hashable, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        env = self.env
        rewards: dict[Hashable, float] = {}
        obs: dict[Hashable, Any] = {}
        term: dict[Hashable, bool] = {}
        trunc: dict[Hashable, bool] = {}
        infos: dict[Hashable, Any] = {}

        def move(action: Any) -> None:
            env.step(action)
            for a, r in env.rewards.items():
                rewards[a] = rewards.get(a, 0.0) + float(r)

        move(action_dict[env.agent_selection])
        while env.agents:
            agent = env.agent_selection
            o, _, te, tr, info = env.last()
            obs[agent], infos[agent] = o, info
            if not (te or tr):
                break
            term[agent], trunc[agent] = bool(te), bool(tr) and not te
            move(None)
        self.agents = list(env.agents)
        term[ALL], trunc[ALL] = self._ends(trunc, not env.agents)
        return obs, rewards, term, trunc, infos


def is_parallel_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo ParallelEnv (checked without importing PettingZoo)."""
    return any(c.__name__ == "ParallelEnv" and c.__module__.startswith("pettingzoo") for c in type(env).__mro__)


def is_aec_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AECEnv, or one of its wrappers (checked without importing PettingZoo)."""
    return any(c.__name__ == "AECEnv" and c.__module__.startswith("pettingzoo") for c in type(env).__mro__)


def wrap_pettingzoo(env: Any) -> Any:
    """A PettingZoo env wrapped in its adapter; any other env as it is."""
    if is_parallel_env(env):
        return ParallelPettingZooEnv(env)
    if is_aec_env(env):
        return PettingZooEnv(env)
    return env
