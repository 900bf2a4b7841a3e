"""MultiAgentRecord: what a multi-agent replay buffer keeps of one stored multi-agent episode, and its plain form."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from ray_sampler.errors import ReplayError

__all__ = ["MultiAgentRecord"]


@dataclasses.dataclass
class MultiAgentRecord:
    """What the buffer keeps of one stored multi-agent episode, beside its agents' chunks."""

    env_t_started: int
    """Env step of its first stored observation."""
    env_t: int
    """Env step of its last stored observation."""
    terminated: bool = False
    truncated: bool = False
    modules: dict[Hashable, str] = dataclasses.field(default_factory=dict)
    """Each agent's module."""
    obs_env_steps: dict[Hashable, list[int]] = dataclasses.field(default_factory=dict)
    """Per agent, the env step of each of its stored observations, from its first."""
    obs_t_started: dict[Hashable, int] = dataclasses.field(default_factory=dict)
    """Per agent, the observation index (its own time) of its first stored observation."""
    restored_open: bool = False
    """Restored from a checkpoint while running: its next chunk may come after a gap."""

    def to_plain(self, id_: str) -> dict[str, Any]:
        """The record of episode ``id_`` as JSON-ready data (agents as ``[agent, module, first
        observation index, env steps of its observations]``); agent ids must be str or int."""
        agents = []
        for aid, mid in self.modules.items():
            if not isinstance(aid, (str, int)) or isinstance(aid, bool):
                raise ReplayError(f"agent id {aid!r} of episode {id_!r} cannot be saved: agent ids must be str or int")
            agents.append([aid, mid, self.obs_t_started.get(aid, 0), list(self.obs_env_steps.get(aid, []))])
        return {
            "id": id_,
            "env_t_started": self.env_t_started,
            "env_t": self.env_t,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "restored_open": self.restored_open,
            "agents": agents,
        }

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> MultiAgentRecord:
        """The record ``to_plain`` gave (``restored_open`` False where absent)."""
        rec = cls(
            int(plain["env_t_started"]), int(plain["env_t"]), terminated=bool(plain["terminated"]),
            truncated=bool(plain["truncated"]), restored_open=bool(plain.get("restored_open", False)),
        )  # fmt: skip
        for aid, mid, obs_t_started, steps in plain["agents"]:
            rec.modules[aid], rec.obs_t_started[aid], rec.obs_env_steps[aid] = mid, int(obs_t_started), list(steps)
        return rec

    @property
    def is_done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def num_env_steps(self) -> int:
        return self.env_t - self.env_t_started
