"""ExternalConfig: where an external env runner listens and what it allows its clients.

>>> ExternalConfig(host="0.0.0.0")
Traceback (most recent call last):
...
ray_sampler.errors.ConfigError: 'external.token' must be set to listen on '0.0.0.0' (only a loopback host needs none)
>>> ExternalConfig(port=9900).port_of(3)
9902
"""

from __future__ import annotations

import dataclasses
import ipaddress

from ray_sampler.errors import ConfigError
from ray_sampler.validate import check_int, check_number, check_optional

__all__ = ["LOOPBACK_HOSTS", "ExternalConfig"]

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
"""Hosts an external runner may listen on without a token."""

_MIN_MESSAGE_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExternalConfig:
    """An external env runner's server (see docs/external.md)."""

    host: str = "127.0.0.1"
    """The address the runners listen on. Anything but a loopback address needs ``token``."""
    port: int = 9900
    """Runner ``i`` (worker index 1, 2, ...) listens on ``port + i - 1``, a local runner (index 0) on
    ``port``; 0: any free port each (``ExternalEnvRunner.address`` says which)."""
    token: str | None = None
    """The shared secret every client's first message carries; a connection without it is closed
    before anything else it sends is read."""
    max_message_bytes: int = 16 * 1024 * 1024
    """The largest message a client may send; a bigger one closes its connection (counted)."""
    handshake_timeout_s: float = 10.0
    """A new connection whose first message (its ``hello``) takes longer is closed (counted)."""
    client_timeout_s: float = 120.0
    """A client that sends nothing (or not the rest of a message) for longer is closed (counted);
    its running episodes are dropped and counted."""
    max_held_env_steps: int = 100_000
    """Steps a runner holds between ``sample()`` calls; at that many, its answers to clients wait
    until a call takes some (back-pressure, so memory stays bounded while a learner updates)."""
    max_clients: int = 1024
    """Connections a runner serves at once; one more is refused with an error (counted)."""
    ssl_certfile: str | None = None
    """A PEM certificate: the server speaks TLS (``ssl_keyfile`` its key). None: plain TCP."""
    ssl_keyfile: str | None = None
    """The certificate's private key (PEM); None: it is in ``ssl_certfile``."""

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"'external.host' must be a host name or IP address (got {self.host!r})")
        check_int("external.port", self.port, minimum=0, maximum=65535)
        if self.token is not None and (not isinstance(self.token, str) or len(self.token) < 8):
            raise ConfigError("'external.token' must be a string of at least 8 characters or None")
        if self.token is None and not is_loopback(self.host):
            raise ConfigError(
                f"'external.token' must be set to listen on {self.host!r} (only a loopback host needs none)"
            )
        check_int("external.max_message_bytes", self.max_message_bytes, minimum=_MIN_MESSAGE_BYTES)
        for name in ("handshake_timeout_s", "client_timeout_s"):
            check_number(f"external.{name}", getattr(self, name), minimum=0, exclusive_minimum=True)
        check_int("external.max_held_env_steps", self.max_held_env_steps, minimum=1)
        check_int("external.max_clients", self.max_clients, minimum=1)
        for name in ("ssl_certfile", "ssl_keyfile"):
            check_optional(_check_path, f"external.{name}", getattr(self, name))
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigError("'external.ssl_keyfile' needs 'external.ssl_certfile' (the certificate) too")

    def port_of(self, worker_index: int) -> int:
        """The port runner ``worker_index`` listens on (0: any free one)."""
        return 0 if self.port == 0 else self.port + max(worker_index - 1, 0)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (a loopback address or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_path(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name!r} must be a file path or None (got {value!r})")
    return value
