"""The command line's external simulators: ``--env external`` and the ``--external.*`` options.

``--env external --external.spaces-from ENV`` trains from clients that connect over TCP instead
of envs the runners step (docs/external.md). The command is rewritten once, before it is parsed:
``--env`` becomes the env that gives the spaces (so its preset, target and run-directory name
apply) and ``--external.serve`` turns the runners into external ones; a run directory's
config.toml records both, so ``--resume`` serves again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import os
import re
import socket
from collections.abc import Callable
from typing import Any

from ray_sampler.cli.options import UsageError
from ray_sampler.client.protocol import (
    MAX_HANDSHAKE_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
    frame,
    read_message,
)
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.external_config import ExternalConfig
from ray_sampler.sampling.external_spaces import register_external_spaces, space_from_wire

__all__ = [
    "TOKEN_VARIABLE",
    "ExternalOptions",
    "addresses_line",
    "check_ports_free",
    "rewrite_external_args",
    "wait_for_client_spaces",
]

_FIELD = re.compile(r"'external\.(\w+)'")

TOKEN_VARIABLE = "RAY_SAMPLER_EXTERNAL_TOKEN"
"""The environment variable a token may come from instead of ``--external.token`` (a flag shows in ``ps``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExternalOptions:
    """Simulators outside Ray that connect to the runners (--env external)."""

    serve: bool = False
    """The runners listen for external clients instead of stepping the env, whose spaces they take
    (set by --env external)."""
    spaces_from: str | None = None
    """With --env external: the gymnasium id or env whose observation and action spaces the clients'
    observations and actions have (it is built once for its spaces, never stepped); without it, the
    first client's hello brings them."""
    host: str = "127.0.0.1"
    """The address the runners listen on; anything but this machine (127.0.0.1) needs a token."""
    port: int = 9900
    """The first runner's port; runner i listens on port + i - 1."""
    token: str | None = None
    """The secret every client sends first (default: the RAY_SAMPLER_EXTERNAL_TOKEN variable; none)."""
    ssl_certfile: str | None = None
    """A PEM certificate: the runners speak TLS."""
    ssl_keyfile: str | None = None
    """The certificate's private key (PEM), if not in the certificate file."""
    wait_s: float = 600.0
    """How long an iteration waits for the clients' steps before the run stops with an error."""

    def config(self) -> ExternalConfig:
        """The runners' ExternalConfig (UsageError naming the flag for a bad value)."""
        token = self.token if self.token is not None else os.environ.get(TOKEN_VARIABLE) or None
        try:
            return ExternalConfig(
                host=self.host, port=self.port, token=token,
                ssl_certfile=self.ssl_certfile, ssl_keyfile=self.ssl_keyfile,
            )  # fmt: skip
        except ConfigError as e:
            raise UsageError(_FIELD.sub(lambda m: "--external." + m.group(1).replace("_", "-"), str(e))) from None

    def apply(self, runner: EnvRunnerConfig, group: EnvRunnerGroupConfig) -> tuple[Any, Any]:
        """``(runner, group)`` serving external clients (unchanged unless ``serve``)."""
        if not self.serve:
            return runner, group
        if self.port < 1:
            raise UsageError(f"--external.port: a port of 1 to 65535 allowed (got {self.port})")
        if not self.wait_s > 0:
            raise UsageError(f"--external.wait-s: a number > 0 allowed (got {self.wait_s})")
        runner = dataclasses.replace(runner, external=self.config())
        group = dataclasses.replace(group, sample_timeout_s=float(self.wait_s), check_env=False)
        return runner, group


def rewrite_external_args(args: list[str], env: str, value: Callable[[str], str | None]) -> tuple[list[str], str]:
    """``(args, env)`` for ``--env external``: the env becomes the last ``--external.spaces-from``,
    or, without one, ``external-spaces`` with the spaces the first client sends (waited for here,
    ``wait_for_client_spaces``) in its env config; ``--external.serve`` is added, and one runner
    unless the flags ask for more. Unchanged for any other env. ``value(flag)``: the flag's last value."""
    if env != "external":
        return args, env
    spaces = value("--external.spaces-from")
    extra: list[str] = []
    if not spaces:
        observation_space, action_space = wait_for_client_spaces(value)
        spaces = register_external_spaces()
        extra = ["--env-config", json.dumps({"observation_space": observation_space, "action_space": action_space})]
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--env" and i + 1 < len(args):
            out += ["--env", spaces]
            skip = True
        elif arg.startswith("--env="):
            out.append(f"--env={spaces}")
        else:
            out.append(arg)
    runners = ("--num-env-runners", "--env-runner-group.num-env-runners")
    if not any(a in runners or a.startswith(tuple(f"{r}=" for r in runners)) for a in args):
        out += ["--num-env-runners", "1"]  # one runner serves every client; more only where asked
    return [*out, *extra, "--external.serve"], spaces


def wait_for_client_spaces(value: Callable[[str], str | None]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The spaces (protocol form) of the first client whose ``hello`` carries them, read on the first
    runner's address before Ray starts; that client is told to connect again (``retry``) once the
    runners listen. Clients without spaces, or with a wrong token or version, are refused meanwhile.
    UsageError when none came within ``--external.wait-s``."""
    options = ExternalOptions(
        host=value("--external.host") or "127.0.0.1",
        port=int(value("--external.port") or 9900),
        token=value("--external.token"),
    )
    external = options.config()
    wait_s = float(value("--external.wait-s") or ExternalOptions.wait_s)
    print(
        f"waiting for the first client's spaces at {options.host}:{options.port} (its hello carries them)", flush=True
    )
    with socket.socket(socket.AF_INET6 if ":" in options.host else socket.AF_INET) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((options.host, options.port))
        except OSError as e:
            raise UsageError(
                f"--external.port: cannot listen on {options.host}:{options.port} ({e.strerror})"
            ) from None
        listener.listen()
        listener.settimeout(wait_s)
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                raise UsageError(
                    f"--env external: no client sent its spaces within {wait_s:g} s (--external.wait-s)"
                ) from None
            with conn:
                spaces = _spaces_of(conn, external)
                if spaces is not None:
                    return spaces


def _spaces_of(conn: socket.socket, external: ExternalConfig) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A connection's spaces from its hello (None: refused, and told why)."""
    conn.settimeout(external.handshake_timeout_s)
    try:
        hello = read_message(conn, max_bytes=MAX_HANDSHAKE_BYTES)
    except (OSError, ConnectionError, ProtocolError):
        return None
    token, given = external.token, hello.get("token")
    error = None
    if hello.get("type") != "hello" or hello.get("protocol") != PROTOCOL_VERSION:
        error = f"this server speaks protocol {PROTOCOL_VERSION} and waits for a hello"
    elif token is not None and not (isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())):
        error = "wrong or missing token"
    elif "observation_space" not in hello or "action_space" not in hello:
        error = "this server takes its spaces from the first client: send observation_space and action_space"
    else:
        try:
            space_from_wire(hello["observation_space"], "observation_space")
            space_from_wire(hello["action_space"], "action_space")
        except ProtocolError as e:
            error = str(e)
    with contextlib.suppress(OSError):
        if error is not None:
            conn.sendall(frame({"type": "error", "error": error, "fatal": True}))
            return None
        conn.sendall(frame({"type": "retry", "retry_after_s": 1.0, "reason": "the runners are starting"}))
    return hello["observation_space"], hello["action_space"]


def addresses_line(options: ExternalOptions, num_runners: int) -> str:
    """The line that tells clients where to connect."""
    host = options.host
    ports = [options.port + i for i in range(max(num_runners, 1))]
    where = ", ".join(f"{host}:{p}" for p in ports)
    scheme = "TLS" if options.ssl_certfile else "TCP"
    return f"external clients connect to {where} ({scheme}{', token required' if options.config().token else ''})"


def check_ports_free(options: ExternalOptions, num_runners: int) -> None:
    """UsageError before Ray starts when another program listens on a runner's port of this machine
    (for a Ray started here: the runners run on this machine)."""
    if not options.serve:
        return
    for i in range(max(num_runners, 1)):
        port = options.port + i
        try:
            with socket.socket(socket.AF_INET6 if ":" in options.host else socket.AF_INET) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
                probe.bind((options.host, port))
        except OSError as e:
            raise UsageError(
                f"--external.port: runner {i + 1} cannot listen on {options.host}:{port} ({e.strerror}); "
                "another program listens there, or pick another --external.port"
            ) from None
