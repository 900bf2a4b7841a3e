"""Where a command's Ray runs: attached to a cluster (``--address`` or ``RAY_ADDRESS``) or started
in this process and stopped at the end, quietly unless ``-v``."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ray_sampler.errors import ConfigError, first_line

__all__ = ["TASK_EVENTS_IN_GCS", "check_address", "check_reachable", "ray_cluster", "stderr_hidden"]

TASK_EVENTS_IN_GCS = 10_000
"""Task events the embedded cluster's GCS keeps (``RAY_task_events_max_num_task_in_gcs`` on a head)."""


def check_address(address: str) -> str:
    """``address`` if it is empty, ``local``, ``auto``, ``host:port`` or ``ray://host:port``."""
    if address in ("", "local", "auto") or re.fullmatch(r"(ray://)?[\w.\-]+:\d{1,5}", address):
        return address
    raise ConfigError(f"--address (or RAY_ADDRESS) must be auto, local, host:port or ray://host:port (got {address!r})")


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """ConfigError (a usage error: exit 2) if nothing answers at a ``host:port`` address (Ray itself
    retries for minutes), or if the cluster there refuses this process's token authentication
    (Ray retries that for 20 s, a C++ log line a second, before a message that does not say why)."""
    if address == "auto":
        return  # Ray finds the address on this machine, or says at once that there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(
            f"--address: cannot attach to the Ray cluster at {address!r}: nothing answers at {host}:{port} ({e})"
        ) from None
    if not address.startswith("ray://"):  # Ray Client's port speaks another protocol than the GCS's
        _check_token(address, timeout_s)


_TOKEN_FILE = "~/.ray/auth_token"


def _where_tokens_come_from() -> str:
    here = ", which exists here" if Path(_TOKEN_FILE).expanduser().is_file() else ""
    return (
        f"(Ray sends the token in RAY_AUTH_TOKEN, else in the file RAY_AUTH_TOKEN_PATH names, else in "
        f"{_TOKEN_FILE}{here}; `ray get-auth-token` on the head node prints the cluster's token)"
    )


def _token_and_source() -> tuple[str | None, str]:
    """The token Ray would send in token mode, and where it comes from (Ray's own order)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(named) if named else Path(_TOKEN_FILE).expanduser()
    source = f"RAY_AUTH_TOKEN_PATH ({named})" if named else _TOKEN_FILE
    try:
        return path.read_text().strip() or None, source
    except OSError:
        return None, source


def _check_token(address: str, timeout_s: float) -> None:
    """Asks the GCS at ``address`` for its cluster id, as Ray's first call does, with the token Ray
    would send: ConfigError naming the fix if the cluster refuses it."""
    try:  # Ray's generated GCS stubs: not a public API, so a Ray without them skips this check
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return
    token_mode = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    token, source = _token_and_source() if token_mode else (None, "")
    if token_mode and token is None:
        raise ConfigError(f"--address: RAY_AUTH_MODE=token but no token was found {_where_tokens_come_from()}")
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)

        def status(metadata: list[tuple[str, str]]) -> grpc.StatusCode:
            try:
                stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s, metadata=metadata)
            except grpc.RpcError as e:
                return e.code()
            return grpc.StatusCode.OK

        without_token = status([])
        if without_token == grpc.StatusCode.OK and token_mode:
            # The driver would demand a token from the cluster's workers, which send none: its actors die.
            raise ConfigError(
                f"--address: the Ray cluster at {address} does not use token authentication, but "
                "RAY_AUTH_MODE=token is set here: unset it"
            )
        if without_token != grpc.StatusCode.UNAUTHENTICATED:
            return  # attachable, or something else that ray.init reports
        if not token_mode:
            raise ConfigError(
                f"--address: the Ray cluster at {address} requires token authentication: export "
                f"RAY_AUTH_MODE=token {_where_tokens_come_from()}"
            )
        if status([("authorization", f"Bearer {token}")]) == grpc.StatusCode.UNAUTHENTICATED:
            raise ConfigError(
                f"--address: the Ray cluster at {address} refused the token from {source}: give the "
                f"cluster's token {_where_tokens_come_from()}"
            )


@contextlib.contextmanager
def stderr_hidden(hidden: bool) -> Iterator[None]:
    """Ray's C++ core writes its log lines straight to file descriptor 2 while it connects; they go
    to a discarded file unless ``hidden`` is false (``-v``)."""
    if not hidden:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


@contextlib.contextmanager
def ray_cluster(
    address: str, *, num_cpus: int, verbose: bool = False, runtime_env: dict[str, Any] | None = None
) -> Iterator[str]:
    """Ray for one job: attached to ``address`` (or ``RAY_ADDRESS``), which is left running, or
    started in this process with ``num_cpus`` CPUs and stopped at the end; the Ray this process is
    connected to already, if it is (a Ray Tune trial), left as it is. Yields a description.
    Ray's own log lines (startup, token authentication, its workers' output) show only if ``verbose``.
    ``runtime_env``: the job's (every worker's) runtime env, e.g. the user's code shipped."""
    import ray

    if ray.is_initialized():  # a Ray Tune trial (ray_sampler.tune): its process is connected already
        yield f"Ray cluster of this process ({ray.cluster_resources().get('CPU', 0):g} CPUs)"
        return
    address = check_address(address or os.environ.get("RAY_ADDRESS", "")) or "local"
    ray_logger = logging.getLogger("ray")
    level = ray_logger.level
    if not verbose:
        ray_logger.setLevel(logging.ERROR)
    options: dict[str, Any] = {"log_to_driver": verbose, "configure_logging": verbose}
    if runtime_env:
        options["runtime_env"] = runtime_env
    try:
        if address == "local":
            # A long job's GCS keeps the events of at most this many tasks (Ray's default: 100,000).
            system_config = {"task_events_max_num_task_in_gcs": TASK_EVENTS_IN_GCS}
            try:
                ray.init(
                    address="local", num_cpus=num_cpus, include_dashboard=False, _system_config=system_config, **options
                )
            except (ValueError, TypeError, ray.exceptions.RuntimeEnvSetupError) as e:
                if not runtime_env:
                    raise
                raise ConfigError(f"runtime env {runtime_env}: {first_line(e) or type(e).__name__}") from None
            where = "local Ray cluster"
        else:
            check_reachable(address)
            try:  # never num_cpus here: the cluster's own resources count
                with stderr_hidden(not verbose):
                    ray.init(address=address, **options)
            except (ConnectionError, RuntimeError, ValueError, TypeError, ray.exceptions.RayError) as e:
                first = first_line(e) or type(e).__name__
                if runtime_env and not isinstance(e, ConnectionError):  # the runtime env's, not the cluster's
                    raise ConfigError(f"runtime env {runtime_env}: {first} (-v shows Ray's own lines)") from None
                raise ConfigError(
                    f"--address: cannot attach to the Ray cluster at {address!r}: {first} (is it up? with token "
                    "authentication, set RAY_AUTH_MODE=token and the cluster's token: see docs/cluster.md)"
                ) from None
            where = f"Ray cluster at {address} ({ray.cluster_resources().get('CPU', 0):g} CPUs)"
        try:
            yield where
        finally:
            ray.shutdown()  # attached: disconnects this driver only; the cluster stays up
    finally:
        ray_logger.setLevel(level)
