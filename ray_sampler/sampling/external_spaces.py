"""The spaces a client sent in its ``hello``, as an env the runs can name: ``external-spaces``.

``ExternalSpacesEnv`` only holds an observation and an action space, rebuilt from the protocol's
form (``space_message``) in its env config; a run whose clients bring their own spaces
(``ray-sampler train --env external`` without ``--external.spaces-from``) registers and names it,
so the learners and runners take those spaces as any env's. It is never stepped: ``reset`` and
``step`` raise.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ray_sampler.client.protocol import ProtocolError, decode_array
from ray_sampler.errors import EnvError
from ray_sampler.policy.space_spec import space_from_json
from ray_sampler.sampling.env_creator import register_env

__all__ = ["EXTERNAL_SPACES_ENV", "ExternalSpacesEnv", "register_external_spaces", "space_from_wire"]

EXTERNAL_SPACES_ENV = "external-spaces"
"""The registered name of ``ExternalSpacesEnv``."""


def space_from_wire(message: Any, what: str) -> gym.Space:
    """The space of a ``{"spec", "arrays"}`` message (ProtocolError naming ``what`` if it is none)."""
    try:
        arrays = {k: decode_array(v) for k, v in message["arrays"].items()}
        return space_from_json(message["spec"], arrays)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ProtocolError(f"{what!r} must be a space as the welcome sends one ({type(e).__name__}: {e})") from None


class ExternalSpacesEnv(gym.Env):
    """Spaces only (see the module docstring); ``config`` holds ``observation_space`` and ``action_space``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.observation_space = space_from_wire(config.get("observation_space"), "observation_space")
        self.action_space = space_from_wire(config.get("action_space"), "action_space")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        raise EnvError("the external-spaces env is never stepped: its clients step their own simulators")

    def step(self, action: Any) -> Any:
        raise EnvError("the external-spaces env is never stepped: its clients step their own simulators")


def register_external_spaces() -> str:
    """Registers ``ExternalSpacesEnv`` under ``EXTERNAL_SPACES_ENV`` in this process (only where a run
    names it: a registration shows in the env errors' list of names); returns the name."""
    register_env(EXTERNAL_SPACES_ENV, ExternalSpacesEnv)
    return EXTERNAL_SPACES_ENV
