"""The exception hierarchy of ray-sampler: every error names the field, what is allowed and what came."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DataFormatError",
    "EnvCheckError",
    "EnvCreatorError",
    "EnvError",
    "EnvRunnerFailedError",
    "EpisodeError",
    "InsufficientResourcesError",
    "RaySamplerError",
    "ReplayError",
    "SpaceError",
]


class RaySamplerError(Exception):
    """Base of every error ray-sampler raises on purpose."""


class ConfigError(RaySamplerError, ValueError):
    """A config value is out of its allowed range; raised before any actor starts."""


class EnvCheckError(ConfigError):
    """An env failed the check run before any actor starts (``check_env``): bad data (NaN or inf,
    an observation outside its space, a reward that is not a real number, flags that are not bools)
    or gymnasium's env checker; one line naming the env, the step and what is allowed."""


class EnvCreatorError(RaySamplerError, ValueError):
    """An env creator is not callable, unknown, or returns something that is not a gymnasium.Env."""


class EnvRunnerFailedError(RaySamplerError):
    """Env runners failed and the group may not replace them (restarts disabled or used up, or none
    healthy by the deadline); names each failed runner's worker index and its last cause."""


class InsufficientResourcesError(RaySamplerError):
    """The cluster cannot hold the actors a config asks for (never, or not by the deadline); names
    the config fields that size them and what the cluster has."""


class SpaceError(RaySamplerError, ValueError):
    """An observation or action space is unsupported, or data does not fit its space."""


class EpisodeError(RaySamplerError, ValueError):
    """An episode operation that its state does not allow (adding to a done episode, a bad concat, ...)."""


class DataFormatError(RaySamplerError, ValueError):
    """Columnar or Arrow data that is malformed, or holds values the format cannot represent."""


class ReplayError(RaySamplerError, ValueError):
    """Data a replay buffer must refuse: a chunk that does not continue its stored episode, a bad sample request."""


class EnvError(RaySamplerError):
    """A sub-env raised in ``reset()`` or ``step()`` and was not restarted; names ``worker_index``,
    ``vector_index`` (when known) and the env's own exception (chained as ``__cause__``)."""
