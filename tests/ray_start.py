"""A Ray cluster started the way a user starts one (``ray start --head`` in a subprocess), for tests
that attach to it; token authentication on, every port free and on localhost, stopped at the end
(only the processes it started: ``ray start --block`` takes them down when it is terminated)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ["RayStartCluster", "free_port", "processes_of", "stop_processes_of"]

_BIN = Path(sys.executable).parent


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket stays bound until all are drawn (ports drawn one at a
    time can repeat, and Ray refuses a head whose components share a port)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


class RayStartCluster:
    """``with RayStartCluster(num_cpus=2) as cluster:`` -> ``cluster.address`` (GCS ``host:port``),
    ``cluster.dashboard_url`` and ``cluster.env`` (the environment that reaches it: the token)."""

    def __init__(self, *, num_cpus: int = 2, start_timeout_s: float = 60.0) -> None:
        self.num_cpus = num_cpus
        self.start_timeout_s = start_timeout_s
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rs-"))  # short: Ray's socket paths have a length limit
        token_path = self.temp_dir / "auth_token"
        token_path.write_text(secrets.token_hex(32))
        token_path.chmod(0o600)
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        self.env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(token_path),
            RAY_USAGE_STATS_ENABLED="0",
            PATH=f"{_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        self.port, self.dashboard_port, *self._other_ports = free_ports(7)
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RayStartCluster:
        ports = {
            "--port": self.port,
            "--dashboard-port": self.dashboard_port,
            **dict(
                zip(
                    ["--ray-client-server-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                     "--metrics-export-port", "--runtime-env-agent-port"],
                    self._other_ports,
                    strict=True,
                )
            ),
        }  # fmt: skip
        command = [str(_BIN / "ray"), "start", "--head", "--block", f"--num-cpus={self.num_cpus}"]
        command += [f"{flag}={port}" for flag, port in ports.items()]
        command += [
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            f"--temp-dir={self.temp_dir / 'ray'}",
            "--disable-usage-stats",
        ]
        self._log = open(self.temp_dir / "ray-start.log", "wb")
        self._process = subprocess.Popen(
            command, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            self._wait_until_up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"ray start exited: {(self.temp_dir / 'ray-start.log').read_text()[-2000:]}")
            if self.jobs_api_answers():
                return
            time.sleep(1.0)
        raise TimeoutError(f"ray start --head did not come up in {self.start_timeout_s} s")

    def jobs_api_answers(self) -> bool:
        """Whether the cluster's job API (on the dashboard) answers, with the token."""
        done = self.run([str(_BIN / "ray"), "job", "list", "--address", self.dashboard_url], timeout_s=30)
        return done.returncode == 0

    def run(
        self, command: list[str], *, timeout_s: float, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        """Runs ``command`` with the cluster's environment (plus ``env``), in ``cwd`` if given."""
        return subprocess.run(
            command,
            env={**self.env, **(env or {})},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _processes(self) -> list[int]:
        """Pids of every process of this cluster (each names the cluster's own temp dir)."""
        return processes_of(self.temp_dir)

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)  # Ray's processes take SIGTERM as a graceful stop
            deadline = time.monotonic() + 2  # the raylet and monitor linger: killed after this
            while set(self._processes()) - {self._process.pid} and time.monotonic() < deadline:
                time.sleep(0.2)
            for pid in [self._process.pid, *self._processes()]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._process.wait(timeout=10)
        self._log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def processes_of(temp_dir: Path) -> list[int]:
    """Pids of the Ray processes started with ``--temp-dir`` under ``temp_dir`` (each names it)."""
    found = subprocess.run(["pgrep", "-f", str(temp_dir)], capture_output=True, text=True, check=False)
    return [int(pid) for pid in found.stdout.split()]


def stop_processes_of(temp_dir: Path, *, grace_s: float = 5.0) -> None:
    """What ``ray stop`` does, for one head only: SIGTERM to its processes, SIGKILL to those left
    after ``grace_s`` (``ray stop`` itself would stop every Ray of this user, a test session's too)."""
    for pid in processes_of(temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while processes_of(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in processes_of(temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
