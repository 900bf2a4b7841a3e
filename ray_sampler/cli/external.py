"""The command line's external simulators: ``--env external`` and the ``--external.*`` options.

``--env external --external.spaces-from ENV`` trains from clients that connect over TCP instead
of envs the runners step (docs/external.md). The command is rewritten once, before it is parsed:
``--env`` becomes the env that gives the spaces (so its preset, target and run-directory name
apply) and ``--external.serve`` turns the runners into external ones; a run directory's
config.toml records both, so ``--resume`` serves again.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from typing import Any

from ray_sampler.cli.options import UsageError
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.external_config import ExternalConfig

__all__ = ["TOKEN_VARIABLE", "ExternalOptions", "addresses_line", "check_ports_free", "rewrite_external_args"]

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
    observations and actions have (it is built once for its spaces, never stepped)."""
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


def rewrite_external_args(args: list[str], env: str, spaces: str | None) -> tuple[list[str], str]:
    """``(args, env)`` with ``--env external`` replaced by ``spaces`` (the last
    ``--external.spaces-from``), ``--external.serve`` added and one runner unless the flags ask for
    more; unchanged for any other env. UsageError without the spaces."""
    if env != "external":
        return args, env
    if not spaces:
        raise UsageError(
            "--env external: --external.spaces-from ENV is needed (a gymnasium id or env whose observation and "
            "action spaces the clients use, e.g. CartPole-v1)"
        )
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
    return [*out, "--external.serve"], spaces


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
