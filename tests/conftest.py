"""Session fixtures: one local Ray instance for every test that needs it (per pytest-xdist worker:
each worker is a session of its own, and takes whole files, so a file's tests share one Ray)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray
import threadpoolctl


def pytest_report_header() -> str:
    """The BLAS library and kernel numpy uses (``OPENBLAS_CORETYPE`` picks another): floats that go
    through it differ in their last bits between kernels, which the tests allow for."""
    import numpy  # noqa: F401  (loads the BLAS library that threadpoolctl reports)

    pools = threadpoolctl.threadpool_info()
    found = [f"{p['internal_api']} {p['version']} {p.get('architecture')} x{p['num_threads']}" for p in pools]
    return "blas: " + (", ".join(found) or "none found")


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Starts Ray once per test session (4 logical CPUs: runner actors ask for 0.5 each). Always a
    new local instance (``address="local"``): never a cluster some other process left running."""
    ray.init(
        address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False,
        _system_config={"enable_metrics_collection": False},  # no test reads Ray's own metrics: less CPU
    )  # fmt: skip
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def ray_address(ray_session: None) -> str:
    """The session's Ray instance's address, for a command run in a subprocess to attach to
    (``--address``, ``RAY_ADDRESS``) rather than start a Ray of its own (about 10 s on a 2-core
    machine): for tests whose subject is not how a command starts Ray (that is checked where it
    is: tests/ray_sampler/cli/test_cli.py, test_cli_cluster.py)."""
    return ray.get_runtime_context().gcs_address
