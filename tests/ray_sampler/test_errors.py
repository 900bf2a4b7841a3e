"""The error hierarchy: every error ray-sampler raises on purpose is a RaySamplerError; errors about
bad input are ValueErrors too, errors about failures at run time (an env, a runner) are not."""

from __future__ import annotations

import pytest

from ray_sampler import errors
from ray_sampler.errors import (
    ConfigError,
    DataFormatError,
    EnvCheckError,
    EnvCreatorError,
    EnvError,
    EnvRunnerFailedError,
    EpisodeError,
    FileWriteError,
    InsufficientResourcesError,
    MultiAgentEnvCheckError,
    MultiAgentEnvError,
    PolicyError,
    RaySamplerError,
    ReplayError,
    SpaceError,
)

ERRORS = [ConfigError, DataFormatError, EnvCreatorError, EpisodeError, MultiAgentEnvError, ReplayError, SpaceError]
RUNTIME_ERRORS = [EnvError, EnvRunnerFailedError, FileWriteError, InsufficientResourcesError]
ERRORS_SUBCLASSING = [EnvCheckError, MultiAgentEnvCheckError, PolicyError]  # ConfigErrors: the CLI's exit 2


def test_all_lists_the_base_and_every_error() -> None:
    names = ["RaySamplerError", *(e.__name__ for e in ERRORS + RUNTIME_ERRORS + ERRORS_SUBCLASSING)]
    assert sorted(errors.__all__) == sorted([*names, "first_line"])  # and the one helper every message uses


@pytest.mark.parametrize("error", RUNTIME_ERRORS, ids=[e.__name__ for e in RUNTIME_ERRORS])
def test_runtime_failures_are_ray_sampler_errors_but_not_value_errors(error: type[Exception]) -> None:
    assert issubclass(error, RaySamplerError) and not issubclass(error, ValueError)


def test_a_file_write_error_is_an_os_error_with_the_causes_errno() -> None:
    """``except OSError`` still catches a checkpoint that could not be written."""
    error = FileWriteError("the checkpoint", "/x/c.parquet", PermissionError(13, "Permission denied"))
    assert isinstance(error, OSError) and error.errno == 13
    assert (
        str(error)
        == "cannot write the checkpoint /x/c.parquet: Permission denied (its directory must exist and be writable)"
    )


def test_the_base_is_an_exception() -> None:
    assert RaySamplerError.__mro__ == (RaySamplerError, Exception, BaseException, object)


@pytest.mark.parametrize("error", ERRORS, ids=[e.__name__ for e in ERRORS])
def test_every_error_is_a_ray_sampler_error_and_a_value_error(error: type[Exception]) -> None:
    assert issubclass(error, RaySamplerError) and issubclass(error, ValueError)


@pytest.mark.parametrize("error", ERRORS, ids=[e.__name__ for e in ERRORS])
def test_except_value_error_catches_every_error_with_its_message(error: type[Exception]) -> None:
    with pytest.raises(ValueError, match=r"^'field' must be an int >= 1 \(got 0\)$"):
        raise error("'field' must be an int >= 1 (got 0)")


def test_the_errors_are_distinct_classes() -> None:
    every = ERRORS + RUNTIME_ERRORS
    assert not any(issubclass(a, b) for a in every for b in every if a is not b)
