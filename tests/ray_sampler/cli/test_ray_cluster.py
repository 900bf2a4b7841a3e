"""Attaching to a cluster: the token check before ``ray.init``, against a stand-in GCS that answers
Ray's first call (``GetClusterId``) as a cluster with or without token authentication does. The
same refusals against a real ``ray start --head`` are in test_cli_cluster.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

from ray_sampler.cli.ray_cluster import check_reachable, stderr_hidden
from ray_sampler.errors import ConfigError

TOKEN = "c0ffee" * 8


class _StandInGcs(gcs_service_pb2_grpc.NodeInfoGcsServiceServicer):
    def __init__(self, token: str | None) -> None:
        self.token = token  # None: a cluster without token authentication

    def GetClusterId(self, request, context):
        sent = dict(context.invocation_metadata()).get("authorization")
        if self.token is not None and sent != f"Bearer {self.token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken: Authentication token is missing")
        return gcs_service_pb2.GetClusterIdReply(cluster_id=b"\x01" * 28)


def _serve(token: str | None) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gcs_service_pb2_grpc.add_NodeInfoGcsServiceServicer_to_server(_StandInGcs(token), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


@pytest.fixture
def with_auth() -> Iterator[str]:
    yield from _serve(TOKEN)


@pytest.fixture
def without_auth() -> Iterator[str]:
    yield from _serve(None)


@pytest.fixture(autouse=True)
def no_token_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No Ray auth variables, and a home of its own (``~/.ray/auth_token`` absent unless a test writes it)."""
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _write_home_token(home: Path, token: str) -> None:
    (home / ".ray").mkdir()
    (home / ".ray" / "auth_token").write_text(token)


def test_a_cluster_that_needs_a_token_names_the_variable_to_set(with_auth: str) -> None:
    with pytest.raises(ConfigError) as raised:
        check_reachable(with_auth)
    assert str(raised.value) == (
        f"--address: the Ray cluster at {with_auth} requires token authentication: export RAY_AUTH_MODE=token "
        "(Ray sends the token in RAY_AUTH_TOKEN, else in the file RAY_AUTH_TOKEN_PATH names, else in "
        "~/.ray/auth_token; `ray get-auth-token` on the head node prints the cluster's token)"
    )


def test_the_message_says_when_the_default_token_file_exists(with_auth: str, no_token_settings: Path) -> None:
    _write_home_token(no_token_settings, TOKEN)
    with pytest.raises(ConfigError, match=r"else in ~/\.ray/auth_token, which exists here; "):
        check_reachable(with_auth)


def test_token_mode_with_the_default_token_file_passes(
    with_auth: str, no_token_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_home_token(no_token_settings, TOKEN + "\n")  # as `ray get-auth-token` users paste it
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    check_reachable(with_auth)


@pytest.mark.parametrize("how", ["RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"])
def test_a_token_given_either_way_passes(
    with_auth: str, how: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    if how == "RAY_AUTH_TOKEN":
        monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    else:
        (tmp_path / "token").write_text(TOKEN)
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    check_reachable(with_auth)


def test_a_wrong_token_names_where_it_came_from(
    with_auth: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "old_token").write_text("0" * 64)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "old_token"))
    with pytest.raises(ConfigError) as raised:
        check_reachable(with_auth)
    assert str(raised.value).startswith(
        f"--address: the Ray cluster at {with_auth} refused the token from RAY_AUTH_TOKEN_PATH "
        f"({tmp_path / 'old_token'}): give the cluster's token (Ray sends"
    )


def test_token_mode_without_any_token_is_refused_before_connecting(
    with_auth: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(ConfigError, match=r"^--address: RAY_AUTH_MODE=token but no token was found \(Ray sends"):
        check_reachable(with_auth)


def test_token_mode_against_a_cluster_without_authentication_says_to_unset_it(
    without_auth: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver would demand a token of the cluster's workers, which send none: its actors would die."""
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    with pytest.raises(ConfigError) as raised:
        check_reachable(without_auth)
    assert str(raised.value) == (
        f"--address: the Ray cluster at {without_auth} does not use token authentication, but RAY_AUTH_MODE=token "
        "is set here: unset it"
    )


def test_a_cluster_without_authentication_passes(without_auth: str) -> None:
    check_reachable(without_auth)


def test_a_ray_client_address_is_not_asked_for_a_cluster_id(with_auth: str) -> None:
    """``ray://`` names Ray Client's server, which speaks another protocol: only reachability is checked."""
    check_reachable(f"ray://{with_auth}")


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_what_rays_core_writes_to_fd_2_while_attaching_shows_only_with_verbose(
    verbose: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    """Ray's C++ core logs to file descriptor 2 directly, past Python's ``sys.stderr``."""
    with stderr_hidden(not verbose):
        os.write(2, b"[2026-11-26 20:25:00,603 W 9333 9333] gcs_client.cc:210: Failed to get cluster ID\n")
    os.write(2, b"after\n")
    assert (
        capfd.readouterr().err
        == ("[2026-11-26 20:25:00,603 W 9333 9333] gcs_client.cc:210: Failed to get cluster ID\n" if verbose else "")
        + "after\n"
    )
