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


HEAVY_FIRST = (
    "tests/test_readme.py",
    "tests/ray_sampler/sampling/test_node_loss.py",
    "tests/ray_sampler/cli/test_cli_cluster.py",
    "tests/ray_sampler/cli/test_cli.py",
    "tests/ray_sampler/cli/test_sweep.py",
    "tests/ray_sampler/sampling/test_runner_failures.py",
    "tests/examples/test_examples.py",
    "tests/learner/test_train.py",
)
"""The files that take longest, in that order: run first, so that the two workers of ``-n 2
--dist loadfile`` (which hand out whole files in collection order) do not end with one of them
alone on a long file while the other waits."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Puts the ``HEAVY_FIRST`` files first (each file's tests keep their order)."""
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}

    def key(item: pytest.Item) -> int:
        path = Path(str(item.path)).resolve()
        return rank.get(path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else "", len(rank))

    items.sort(key=key)  # stable: the rest keep their order
