"""Session fixtures: one local Ray instance for every test that needs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Starts Ray once per test session (4 logical CPUs: runner actors ask for 0.5 each). Always a
    new local instance (``address="local"``): never a cluster some other process left running."""
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
