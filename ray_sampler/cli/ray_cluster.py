"""Where a command's Ray runs: attached to a cluster (``--address`` or ``RAY_ADDRESS``) or started
in this process and stopped at the end, quietly unless ``-v``."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from collections.abc import Iterator
from typing import Any

from ray_sampler.errors import ConfigError

__all__ = ["TASK_EVENTS_IN_GCS", "check_address", "ray_cluster"]

TASK_EVENTS_IN_GCS = 10_000
"""Task events the embedded cluster's GCS keeps (``RAY_task_events_max_num_task_in_gcs`` on a head)."""


def check_address(address: str) -> str:
    """``address`` if it is empty, ``local``, ``auto``, ``host:port`` or ``ray://host:port``."""
    if address in ("", "local", "auto") or re.fullmatch(r"(ray://)?[\w.\-]+:\d{1,5}", address):
        return address
    raise ConfigError(f"--address (or RAY_ADDRESS) must be auto, local, host:port or ray://host:port (got {address!r})")


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """ConfigError (a usage error: exit 2) if nothing answers at a ``host:port`` address (Ray itself
    retries for minutes)."""
    if address == "auto":
        return  # Ray finds the address on this machine, or says at once that there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(
            f"--address: cannot attach to the Ray cluster at {address!r}: nothing answers at {host}:{port} ({e})"
        ) from None


@contextlib.contextmanager
def ray_cluster(address: str, *, num_cpus: int, verbose: bool = False) -> Iterator[str]:
    """Ray for one job: attached to ``address`` (or ``RAY_ADDRESS``), which is left running, or
    started in this process with ``num_cpus`` CPUs and stopped at the end. Yields a description.
    Ray's own log lines (startup, token authentication, its workers' output) show only if ``verbose``."""
    import ray

    address = check_address(address or os.environ.get("RAY_ADDRESS", "")) or "local"
    ray_logger = logging.getLogger("ray")
    level = ray_logger.level
    if not verbose:
        ray_logger.setLevel(logging.ERROR)
    options: dict[str, Any] = {"log_to_driver": verbose, "configure_logging": verbose}
    try:
        if address == "local":
            # A long job's GCS keeps the events of at most this many tasks (Ray's default: 100,000).
            system_config = {"task_events_max_num_task_in_gcs": TASK_EVENTS_IN_GCS}
            ray.init(
                address="local", num_cpus=num_cpus, include_dashboard=False, _system_config=system_config, **options
            )
            where = "local Ray cluster"
        else:
            check_reachable(address)
            try:  # never num_cpus here: the cluster's own resources count
                ray.init(address=address, **options)
            except (ConnectionError, RuntimeError, ray.exceptions.RayError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(
                    f"--address: cannot attach to the Ray cluster at {address!r}: {first} (is it up? with token "
                    "authentication, set RAY_AUTH_MODE=token and the cluster's token: see the README)"
                ) from None
            where = f"Ray cluster at {address} ({ray.cluster_resources().get('CPU', 0):g} CPUs)"
        try:
            yield where
        finally:
            ray.shutdown()  # attached: disconnects this driver only; the cluster stays up
    finally:
        ray_logger.setLevel(level)
