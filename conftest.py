"""Hooks for every item of the run: the doctests in the packages and the tests under ``tests/``."""

from __future__ import annotations

import builtins

import pytest


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A doctest's last shown value stays in ``builtins._`` (``sys.displayhook``); a later test must
    not see it (tyro hashes every builtin, and fails on a list there)."""
    builtins.__dict__.pop("_", None)
