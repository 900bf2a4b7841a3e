"""The CLI on a Ray cluster it did not start: ``--address``, ``RAY_ADDRESS``, ``ray job submit``, and an
impossible request refused at once. One ``ray start --head`` cluster (2 CPUs, token auth) for the module."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_sampler.cli import check_address
from ray_sampler.errors import ConfigError
from tests.ray_start import RayStartCluster, free_port, stop_processes_of
from tests.test_readme import BLOCKS, logical_lines, shell_commands, starts_a_head

CLI = [sys.executable, "-m", "ray_sampler"]
RAY = str(Path(sys.executable).parent / "ray")
SMALL_SAMPLE = ["--iterations", "2", "--num-env-runners", "2", "--num-envs-per-env-runner", "2"]
SMALL_SAMPLE += ["--rollout-fragment-length", "8"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayStartCluster]:
    with RayStartCluster(num_cpus=2) as started:
        yield started


def drivers(cluster: RayStartCluster) -> list[dict]:
    """The jobs the cluster ran (its job API: submitted jobs and plain drivers alike)."""
    script = (
        "import json; from ray.job_submission import JobSubmissionClient; "
        f"c = JobSubmissionClient({cluster.dashboard_url!r}); "
        "print(json.dumps([{'type': str(j.type), 'entrypoint': j.entrypoint, 'status': str(j.status), "
        "'submission_id': j.submission_id} for j in c.list_jobs()]))"
    )
    done = cluster.run([sys.executable, "-c", script], timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def node_count(cluster: RayStartCluster) -> int:
    script = f"import ray; ray.init(address={cluster.address!r}, log_to_driver=False); print(len(ray.nodes()))"
    done = cluster.run([sys.executable, "-c", script], timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.strip().splitlines()[-1])


def test_train_attaches_with_address_and_leaves_the_cluster_up(cluster: RayStartCluster, tmp_path: Path) -> None:
    args = ["--max-iterations", "2", "--target-return", "none", "--runs-dir", str(tmp_path)]
    done = cluster.run([*CLI, "train", "--address", cluster.address, *args], timeout_s=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    where = f"(Ray cluster at {cluster.address} (2 CPUs))"
    assert lines[0] == f"ray-sampler train: PPO on CartPole-v1, 2 env runners x 4 sub-envs {where}"
    assert [line.split(":")[0] for line in lines if line.startswith("iter ")] == ["iter 1/2", "iter 2/2"]
    ran = [j for j in drivers(cluster) if "ray_sampler train --address" in (j["entrypoint"] or "")]
    assert len(ran) == 1 and ran[0]["type"] == "JobType.DRIVER" and ran[0]["status"] == "SUCCEEDED"
    assert cluster.is_running()
    assert node_count(cluster) == 1  # the command started no Ray of its own beside it


def test_ray_address_is_honoured_like_the_flag(cluster: RayStartCluster) -> None:
    done = cluster.run([*CLI, "sample", *SMALL_SAMPLE], timeout_s=180, env={"RAY_ADDRESS": cluster.address})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0].endswith(f"2 iterations (Ray cluster at {cluster.address} (2 CPUs))")
    assert any("ray_sampler sample --iterations" in (j["entrypoint"] or "") for j in drivers(cluster))
    assert cluster.is_running()


def test_a_submitted_sampling_job_succeeds(cluster: RayStartCluster) -> None:
    submit = [RAY, "job", "submit", "--address", cluster.dashboard_url]
    submit += ["--submission-id", "rs-sample-job", "--", *CLI, "sample", "--address", "auto", *SMALL_SAMPLE]
    done = cluster.run(submit, timeout_s=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    job = [j for j in drivers(cluster) if j["submission_id"] == "rs-sample-job"]
    assert [j["status"] for j in job] == ["SUCCEEDED"]
    logs = cluster.run([RAY, "job", "logs", "--address", cluster.dashboard_url, "rs-sample-job"], timeout_s=60)
    assert "total: 64 env steps in " in logs.stdout


@pytest.mark.parametrize("job", ["train", "train-dqn", "sample"])
def test_an_impossible_runner_count_fails_at_once_with_one_line(cluster: RayStartCluster, job: str) -> None:
    started = time.monotonic()
    done = cluster.run(
        [*CLI, job, "--address", cluster.address, "--num-env-runners", "8", "--num-cpus-per-env-runner", "1"],
        timeout_s=120,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"ray-sampler {job}: error: cannot place the actors: num_env_runners x (num_cpus_per_env_runner, "
        "custom_resources_per_env_runner) = 8 x 1 CPU = 8.0 CPU, but the cluster has 2.0 CPU in all (reduce the "
        "fields named, or attach to a larger cluster with --address; set RAY_SAMPLER_CLUSTER_AUTOSCALES=1 if it "
        "autoscales)"
    ], f"after {seconds:.1f} s"
    assert cluster.is_running()


def test_an_unreachable_address_is_one_line() -> None:
    out = subprocess.run(
        [*CLI, "sample", "--address", f"127.0.0.1:{free_port()}", *SMALL_SAMPLE],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 2
    assert re.fullmatch(
        r"ray-sampler sample: error: --address: cannot attach to the Ray cluster at '127\.0\.0\.1:\d+': "
        r"nothing answers at 127\.0\.0\.1:\d+ "
        r"\(\[Errno 111\] Connection refused\)",
        out.stderr.strip(),
    ), out.stderr[-2000:]


@pytest.mark.parametrize(
    ("auth", "error"),
    [
        ({"RAY_AUTH_MODE": ""}, "requires token authentication: export RAY_AUTH_MODE=token (Ray sends the token"),
        ({"RAY_AUTH_TOKEN": "0" * 64}, "refused the token from RAY_AUTH_TOKEN: give the cluster's token (Ray sends"),
    ],
    ids=["token-mode-unset", "wrong-token"],
)
def test_a_driver_the_cluster_would_refuse_gets_one_line_naming_the_fix(
    cluster: RayStartCluster, auth: dict[str, str], error: str
) -> None:
    """Before ``ray.init``, which would retry for 20 s printing a C++ log line a second."""
    done = cluster.run([*CLI, "train", "--address", cluster.address, "--max-iterations", "1"], timeout_s=120, env=auth)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"ray-sampler train: error: --address: the Ray cluster at {cluster.address} {error}")
    assert "gcs_client" not in done.stderr
    assert cluster.is_running()


@pytest.mark.parametrize("address", ["", "local", "auto", "10.0.0.5:6379", "ray://head:10001", "my-head.svc:6379"])
def test_addresses_of_every_form_are_accepted(address: str) -> None:
    assert check_address(address) == address


@pytest.mark.parametrize("address", ["http://head:8265", "head", "10.0.0.5:", ":6379", "ray://"])
def test_malformed_addresses_name_the_flag(address: str) -> None:
    with pytest.raises(ConfigError, match=r"^--address \(or RAY_ADDRESS\) must be auto, local, host:port"):
        check_address(address)


WHERE_WORKERS_IMPORT = (
    "import ray; ray.init(address='auto', log_to_driver=False); "
    "where = ray.remote(lambda: __import__('ray_sampler').__file__); "
    "print('WORKER IMPORTS', ray.get(where.remote()))"
)


def test_a_job_submitted_with_its_working_dir_runs_the_shipped_code_on_the_workers(cluster: RayStartCluster) -> None:
    submit = [RAY, "job", "submit", "--address", cluster.dashboard_url, "--submission-id", "rs-working-dir"]
    done = cluster.run([*submit, "--working-dir", ".", "--", sys.executable, "-c", WHERE_WORKERS_IMPORT], timeout_s=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("WORKER IMPORTS "))
    # The uploaded copy, not this clone (which the test environment also has installed).
    assert "/runtime_resources/working_dir_files/_ray_pkg_" in line and line.endswith("/ray_sampler/__init__.py")


def test_the_readmes_local_head_commands_train_on_the_head_they_start(tmp_path: Path) -> None:
    """README's "Run on a cluster" block, line by line, as a new user runs it, with these changes so
    that it cannot touch this machine's other Ray instances: a home of its own (the token lands in
    it), a free port for 6379 and each of the head's other ports, its own --temp-dir, ``ray stop``
    done for this head only, and a two-iteration budget for the training command."""
    [block] = [b for b in BLOCKS if b.path.name == "README.md" and starts_a_head(b.text)]
    home, temp_dir = tmp_path / "home", Path(tempfile.mkdtemp(prefix="rs-"))  # short: socket paths
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    port = str(free_port())
    ran: list[str] = []
    try:
        for line in logical_lines(block.text):
            for command in shell_commands(line):
                command = [arg.replace("6379", port) for arg in command]
                if command[0] == "export":
                    env.update(arg.split("=", 1) for arg in command[1:])
                    continue
                if command[:2] == ["ray", "stop"]:
                    stop_processes_of(temp_dir)
                    ran.append("ray stop")
                    continue
                if command[:3] == ["ray", "start", "--head"]:
                    others = ["--dashboard-port", "--ray-client-server-port", "--dashboard-agent-listen-port"]
                    others += ["--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port"]
                    command += [f"{flag}={free_port()}" for flag in others] + [f"--temp-dir={temp_dir / 'ray'}"]
                if command[0] == "ray-sampler":
                    command += ["--max-iterations", "2", "--target-return", "none", "--runs-dir", str(tmp_path)]
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
                assert done.returncode == 0, f"{line}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}"
                ran.append(" ".join(command[:2]))
                if command[0] == "ray-sampler":
                    assert done.stdout.splitlines()[0].endswith(f"(Ray cluster at 127.0.0.1:{port} (4 CPUs))")
        assert ran == ["ray get-auth-token", "ray start", "ray-sampler train", "ray stop"]
        assert (home / ".ray" / "auth_token").is_file()
    finally:
        stop_processes_of(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
