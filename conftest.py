"""Hooks for every item of the run: the doctests in the packages and the tests under ``tests/``."""

from __future__ import annotations

import builtins
import compileall
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
PACKAGES = ("ray_sampler", "connectors", "learner", "replay", "tests", "examples", "bench")


def pytest_configure(config: pytest.Config) -> None:
    """Compiles the bytecode of the packages, tests, examples and benchmarks once, in the controlling
    process, where the environment says not to write any (``PYTHONDONTWRITEBYTECODE``): the run
    starts some 600 processes (Ray's actor workers, the commands under test), and each would
    otherwise compile the modules it imports from source again (about 0.1 s of CPU per runner
    actor). Nothing is written where the files are up to date; ``__pycache__`` is ignored by git."""
    if sys.flags.dont_write_bytecode and not hasattr(config, "workerinput"):  # not in an xdist worker
        for package in PACKAGES:
            compileall.compile_dir(ROOT / package, quiet=1)


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A doctest's last shown value stays in ``builtins._`` (``sys.displayhook``); a later test must
    not see it (tyro hashes every builtin, and fails on a list there)."""
    builtins.__dict__.pop("_", None)
