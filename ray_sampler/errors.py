"""The exception hierarchy of ray-sampler: every error names the field, what is allowed and what came."""

from __future__ import annotations

import errno
import os
import re

__all__ = [
    "ConfigError",
    "DataFormatError",
    "EnvCheckError",
    "EnvCreatorError",
    "EnvError",
    "EnvRunnerFailedError",
    "EpisodeError",
    "FileWriteError",
    "InsufficientResourcesError",
    "MultiAgentEnvCheckError",
    "MultiAgentEnvError",
    "PolicyError",
    "RaySamplerError",
    "ReplayError",
    "SpaceError",
    "first_line",
]


class RaySamplerError(Exception):
    """Base of every error ray-sampler raises on purpose."""


class ConfigError(RaySamplerError, ValueError):
    """A config value is out of its allowed range; raised before any actor starts."""


class PolicyError(ConfigError):
    """A policy that cannot be saved, loaded or asked: a missing or changed file, a class it cannot
    rebuild, observations that do not fit its space."""


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


_WHERE = " (its directory must exist and be writable)"
_WRITE_HINTS = {
    **dict.fromkeys((errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR), _WHERE),
    **dict.fromkeys((errno.ENOSPC, errno.EDQUOT), " (the disk or quota is full)"),
}


def first_line(error: BaseException) -> str:
    """The first non-blank line of ``error``'s message ("" if none): what one-line messages quote."""
    return next((line.strip() for line in str(error).splitlines() if line.strip()), "")


class FileWriteError(RaySamplerError, OSError):
    """A file (a checkpoint) could not be written: names the path and the system's reason; an
    ``OSError`` still (``errno`` is the cause's), so ``except OSError`` catches it."""

    def __init__(self, what: str, path: object, cause: OSError | Exception) -> None:
        # The system's own words for errno: pyarrow's strerror is its whole message, which names the
        # temporary file it opened ("Failed to open local file '.x.parquet.<uuid>.tmp'. Detail: ...").
        number = getattr(cause, "errno", None)
        if number is None:
            found = re.search(r"\[errno (\d+)\]", str(cause))
            number = int(found.group(1)) if found else None
        reason = os.strerror(number) if number else (getattr(cause, "strerror", None) or str(cause))
        hint = _WRITE_HINTS.get(number or 0, "")
        super().__init__(f"cannot write {what} {path}: {reason or type(cause).__name__}{hint}")
        self.errno = number


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


class MultiAgentEnvError(RaySamplerError, ValueError):
    """A multi-agent env's step broke its contract (a missing ``"__all__"``, data for an agent that is
    done, an action for an agent that got no observation, an observation outside its agent's space);
    the message names the agent and the env step."""


class MultiAgentEnvCheckError(EnvCheckError, MultiAgentEnvError):
    """A MultiAgentEnvError found by the driver's check before any runner starts: bad input, like
    every EnvCheckError (the command line's exit status 2)."""
