"""``ray-sampler train --env external``: the runners serve client processes, and PPO, APPO and DQN
train from what the clients send."""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.ray_sampler.sampling.test_external_group import free_ports

ROOT = Path(__file__).resolve().parents[3]
CLIENT = ROOT / "examples" / "external_cartpole_client.py"


@pytest.mark.parametrize(
    ("command", "flags"),
    [("train", []), ("train", ["--optimizer", "async_samples"]), ("train-dqn", ["--max-env-steps", "1000"])],
    ids=["ppo", "appo", "dqn"],
)
def test_a_run_trains_from_client_processes(tmp_path: Path, ray_address: str, command: str, flags: list[str]) -> None:
    port = free_ports(1)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    budget = [] if command == "train-dqn" else ["--max-iterations", "3"]
    server = subprocess.Popen(
        [sys.executable, "-m", "ray_sampler", command, "--env", "external", "--external.spaces-from", "CartPole-v1",
         "--external.port", str(port), "--num-env-runners", "1", "--target-return", "none", "--plain",
         "--address", ray_address, "--runs-dir", str(tmp_path), *budget, *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    clients = subprocess.run(
        [sys.executable, str(CLIENT), "--address", f"127.0.0.1:{port}", "--clients", "2"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    try:
        out, _ = server.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        server.kill()
        out, _ = server.communicate()
        raise AssertionError(f"the run did not end:\n{out}\nclients:\n{clients.stdout}{clients.stderr}") from None
    assert server.returncode == 0, out
    assert f"external clients connect to 127.0.0.1:{port} (TCP)" in out
    assert "on external clients with CartPole-v1's spaces, 1 env runner (" in out
    assert "the server went away" in clients.stdout  # the clients played until the run ended
    (run_dir,) = tmp_path.glob("*-CartPole-v1-*")
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    steps = [int(r["env_steps"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] >= 1000
    if command == "train":
        assert len(rows) == 3
    assert (run_dir / "policy").is_dir()


def test_a_port_another_program_listens_on_is_refused_before_ray_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "ray_sampler", "train", "--env", "external", "--external.spaces-from", "CartPole-v1",
             "--external.port", str(port), "--runs-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"ray-sampler train: error: --external.port: runner 1 cannot listen on 127.0.0.1:{port} (Address already in "
        "use); another program listens there, or pick another --external.port"
    ]
    assert not list(tmp_path.iterdir())  # no run directory


def test_serve_env_collects_the_clients_episodes_into_parquet(tmp_path: Path, ray_address: str) -> None:
    from replay import restore_buffer

    port = free_ports(1)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = tmp_path / "episodes.parquet"
    server = subprocess.Popen(
        [sys.executable, "-m", "ray_sampler", "serve-env", "--external.spaces-from", "CartPole-v1",
         "--external.port", str(port), "--max-env-steps", "600", "--output", str(out), "--address", ray_address],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    subprocess.run(
        [sys.executable, str(CLIENT), "--address", f"127.0.0.1:{port}", "--clients", "2"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    printed, _ = server.communicate(timeout=240)
    assert server.returncode == 0, printed
    assert "iter 3: 600/600 env steps" in printed and f"saved to {out}" in printed
    buffer = restore_buffer(out)
    assert buffer.get_num_timesteps() == 600
    assert buffer.get_num_episodes() >= 2


def test_a_multi_agent_run_trains_from_clients_that_send_per_agent_dicts(tmp_path: Path, ray_address: str) -> None:
    port = free_ports(1)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    server = subprocess.Popen(
        [sys.executable, "-m", "ray_sampler", "train", "--env", "external", "--external.spaces-from", "ma-cartpole:2",
         "--policy-mapping", "per-agent", "--external.port", str(port), "--max-iterations", "3", "--plain",
         "--address", ray_address, "--runs-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    clients = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "external_multi_agent_client.py"), "--address", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    out, _ = server.communicate(timeout=240)
    assert server.returncode in (0, 1), out
    assert "iter 3/3: 1536/" in out and "the server went away" in clients.stdout
    (run_dir,) = tmp_path.glob("ppo-ma-cartpole_2-*")
    saved = json.loads((run_dir / "policy" / "policy.json").read_text())
    assert sorted(saved["modules"]) == ["0", "1"]  # a module per agent, each trained from the clients' steps
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_steps"]) for r in rows] == [512, 1024, 1536]
    assert all(r["loss/policy_loss/0"] and r["loss/policy_loss/1"] for r in rows)


def test_without_spaces_from_the_first_clients_hello_gives_the_spaces(tmp_path: Path, ray_address: str) -> None:
    from ray_sampler.client.protocol import frame, read_message

    port = free_ports(1)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    server = subprocess.Popen(
        [sys.executable, "-m", "ray_sampler", "train", "--env", "external", "--external.port", str(port),
         "--max-iterations", "2", "--plain", "--address", ray_address, "--runs-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        # A client without spaces is told what is missing (and the server keeps waiting).
        deadline = time.monotonic() + 60
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                assert time.monotonic() < deadline, "the server never listened"
                time.sleep(0.2)
        with sock:
            sock.sendall(frame({"type": "hello", "protocol": 1}))
            answer = read_message(sock)
        assert answer["fatal"] and "send observation_space and action_space" in answer["error"]
        clients = subprocess.run(
            [sys.executable, str(CLIENT), "--address", f"127.0.0.1:{port}", "--clients", "2"],
            capture_output=True, text=True, timeout=240, cwd=ROOT,
        )  # fmt: skip
        out, _ = server.communicate(timeout=240)
    finally:
        server.kill()
    assert server.returncode == 0, out
    assert "PPO on external clients with the first client's spaces, 1 env runner" in out, out
    assert clients.returncode == 0, clients.stdout + clients.stderr
    (run_dir,) = tmp_path.glob("ppo-external-spaces-*")
    saved = tomllib.loads((run_dir / "config.toml").read_text())
    assert saved["env"] == "external-spaces"  # the spaces travel in the env config: --resume has them
    assert json.loads(saved["env_config"])["observation_space"]["spec"]["type"] == "Box"
