"""The CLI on a Ray cluster it did not start: ``--address``, ``RAY_ADDRESS``, ``ray job submit``, and an
impossible request refused at once.

And a user's env module reaches every actor of a cluster the driver attached to: shipped by default
(from the module's directory, or as a py_module when found on PYTHONPATH), with --py-modules, or
with ``ray job submit --working-dir``; not shipped (from Python, without a runtime env), the
runners cannot import it and say so in one line (the control that shows the others ship it); and
a replaced runner imports it again through the same runtime env. The user's module lives in a
temporary directory no worker's ``sys.path`` holds.

One ``ray start --head`` cluster (2 CPUs, token auth) for the module."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_sampler.cli import check_address
from ray_sampler.errors import ConfigError
from tests.ray_start import RayStartCluster, free_port, free_ports, processes_of, stop_processes_of
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
    # The run's policy, evaluated on the cluster's actors: 2 remote evaluation runners, 2 episodes each.
    (run_dir,) = tmp_path.iterdir()
    evaluate = [
        *CLI,
        "evaluate",
        str(run_dir),
        "--num-env-runners",
        "2",
        "--episodes",
        "4",
        "--address",
        cluster.address,
    ]
    done = cluster.run(evaluate, timeout_s=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"2 evaluation runners (Ray cluster at {cluster.address} (2 CPUs))" in done.stdout.splitlines()
    record = json.loads((run_dir / "evaluation.json").read_text())
    assert record["num_episodes"] == 4 and record["num_env_runners"] == 2 and len(record["episode_returns"]) == 4
    assert cluster.is_running()


def test_ray_address_is_honoured_like_the_flag(cluster: RayStartCluster) -> None:
    done = cluster.run([*CLI, "sample", *SMALL_SAMPLE], timeout_s=180, env={"RAY_ADDRESS": cluster.address})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0].endswith(f"2 iterations (Ray cluster at {cluster.address} (2 CPUs))")
    assert any("ray_sampler sample --iterations" in (j["entrypoint"] or "") for j in drivers(cluster))
    assert cluster.is_running()


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


def test_a_job_submitted_with_its_working_dir_runs_the_shipped_code_and_samples(cluster: RayStartCluster) -> None:
    """One job, with this clone as its working dir: its workers import the uploaded copy of
    ray_sampler (not this clone, which the test environment also has installed), and a sampling
    command run there succeeds."""
    where = shlex.join([sys.executable, "-c", WHERE_WORKERS_IMPORT])
    sample = shlex.join([*CLI, "sample", "--address", "auto", *SMALL_SAMPLE])
    submit = [RAY, "job", "submit", "--address", cluster.dashboard_url, "--submission-id", "rs-sample-job"]
    done = cluster.run([*submit, "--working-dir", ".", "--", "sh", "-c", f"{where} && {sample}"], timeout_s=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("WORKER IMPORTS "))
    assert "/runtime_resources/working_dir_files/_ray_pkg_" in line and line.endswith("/ray_sampler/__init__.py")
    assert "total: 64 env steps in " in done.stdout  # the job's output, followed by ray job submit
    job = [j for j in drivers(cluster) if j["submission_id"] == "rs-sample-job"]
    assert [j["status"] for j in job] == ["SUCCEEDED"]


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
    port, *head_ports = map(str, free_ports(7))
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
                    command += [f"{flag}={p}" for flag, p in zip(others, head_ports, strict=True)]
                    command += [f"--temp-dir={temp_dir / 'ray'}"]
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


@pytest.mark.usefixtures("ray_session")
def test_ctrl_c_on_a_blocking_head_stops_that_head_only() -> None:
    """docs/cluster.md's way to stop one head: ``ray start --head --block``, then Ctrl-C (SIGINT to
    its terminal's foreground process group) ends that head's every process; the session's own Ray
    (another Ray of this user on the machine) keeps answering."""
    import signal

    import ray

    temp_dir = Path(tempfile.mkdtemp(prefix="rs-"))  # short: socket paths
    port, *head_ports = map(str, free_ports(4))
    command = ["ray", "start", "--head", "--block", "--port", port, "--node-ip-address", "127.0.0.1"]
    command += ["--num-cpus", "1", f"--temp-dir={temp_dir / 'ray'}", "--include-dashboard=false"]
    command += [f"--{flag}={p}" for flag, p in zip(("ray-client-server-port", "dashboard-agent-listen-port",
                                                     "runtime-env-agent-port"), head_ports, strict=True)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0")
    out = temp_dir / "head.out"
    with out.open("w") as sink:
        head = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # As a user does: Ctrl-C once the head says it blocks (a SIGINT while Ray still starts its
        # processes can be swallowed by the start-up, and the command then blocks for good).
        deadline = time.monotonic() + 60
        while "will now block" not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "will now block" in out.read_text(), f"the head did not start: {out.read_text()[-2000:]}"
        assert len(processes_of(temp_dir)) >= 3  # GCS, raylet and more
        os.killpg(head.pid, signal.SIGINT)
        head.wait(timeout=60)
        deadline = time.monotonic() + 10
        while processes_of(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_of(temp_dir) == []
        assert ray.get(ray.put("still here")) == "still here"  # the session's Ray was not touched
    finally:
        stop_processes_of(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


# -- a user's env module on the cluster -----------------------------------------------------------

SMALL_TRAIN = ["--max-iterations", "2", "--target-return", "none", "--num-envs-per-env-runner", "2"]

LIGHTSIDE = '''
"""A user's env, outside any package of the project."""
import gymnasium as gym
import numpy as np


class LightSide(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        self.size = int((config or {}).get("size", 3))
        self.pos = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.array([0.0], np.float32), {"module_file": __file__}

    def step(self, action):
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        done = self.pos >= self.size
        return np.array([self.pos / self.size], np.float32), float(done), done, False, {"module_file": __file__}


def make(config):
    return LightSide(config)


def make_vector(config):
    return gym.vector.SyncVectorEnv([lambda: LightSide(config) for _ in range(config.num_envs)])


gym.register("LightSide-v0", entry_point="lightside:LightSide", max_episode_steps=20)
'''


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("user_module")
    (directory / "lightside.py").write_text(LIGHTSIDE)
    return directory


def _elsewhere(tmp_path: Path) -> Path:
    """A working directory without the module: the driver finds it on PYTHONPATH only."""
    (tmp_path / "elsewhere").mkdir()
    return tmp_path / "elsewhere"


def test_attached_from_the_modules_directory_the_directory_is_shipped_and_said(
    cluster: RayStartCluster, module_dir: Path, tmp_path: Path
) -> None:
    args = [*CLI, "train", "--env", "lightside:LightSide-v0", "--address", cluster.address, *SMALL_TRAIN]
    done = cluster.run([*args, "--runs-dir", str(tmp_path)], cwd=module_dir, timeout_s=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    first = done.stdout.splitlines()[0]
    assert first.startswith(
        f"ray-sampler train: PPO on lightside:LightSide-v0, 2 env runners x 2 sub-envs (Ray cluster at "
        f"{cluster.address} (2 CPUs); shipped {module_dir.resolve()} as the working dir (it holds the env's module): "
    ), first
    assert first.endswith(" KiB)")
    assert "iter 2/2" in done.stdout


NOT_SHIPPED = textwrap.dedent(
    """
    import sys
    import ray
    import lightside  # the driver imports the module (PYTHONPATH); nothing ships it
    from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
    from ray_sampler.errors import EnvCreatorError

    ray.init(address=sys.argv[1], log_to_driver=False)
    try:
        EnvRunnerGroup(EnvRunnerConfig(env=lightside.LightSide), EnvRunnerGroupConfig(num_env_runners=1))
    except EnvCreatorError as e:
        print("REFUSED", e)
    """
)


def test_without_shipping_the_runners_cannot_import_the_module(
    cluster: RayStartCluster, module_dir: Path, tmp_path: Path
) -> None:
    """The control (from Python, where nothing is shipped unless ray.init is given a runtime env):
    the driver imports the module, the cluster's workers cannot, and the runners say so in one line."""
    script = tmp_path / "driver.py"
    script.write_text(NOT_SHIPPED)
    done = cluster.run(
        [sys.executable, str(script), cluster.address],
        cwd=_elsewhere(tmp_path),
        env={"PYTHONPATH": str(module_dir)},
        timeout_s=240,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert done.stdout.splitlines()[-1] == (
        "REFUSED env runner 1 could not start: its worker cannot import 'lightside'; ship your module to the "
        "cluster's workers (--working-dir or --py-modules; from Python, ray.init(runtime_env=...)), or install the "
        "package there (a runtime env's pip): docs/custom_envs.md"
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--py-modules", "{module_dir}/lightside.py"], "; py_modules lightside.py shipped)"),
        ([], "; py_modules lightside.py shipped (the env's module))"),
    ],
    ids=["py-modules", "by-default-from-pythonpath"],
)
def test_a_module_found_on_pythonpath_is_shipped_as_a_py_module(
    cluster: RayStartCluster, module_dir: Path, tmp_path: Path, flags: list[str], said: str
) -> None:
    args = [*CLI, "sample", "--env", "lightside:LightSide", "--address", cluster.address, "--iterations", "1"]
    args += [flag.format(module_dir=module_dir) for flag in flags]
    done = cluster.run(args, cwd=_elsewhere(tmp_path), env={"PYTHONPATH": str(module_dir)}, timeout_s=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert done.stdout.splitlines()[0].endswith(said)
    assert done.stdout.splitlines()[-1].startswith("total: 1024 env steps in ")


def test_a_job_submitted_with_the_modules_directory_trains_it(
    cluster: RayStartCluster, module_dir: Path, tmp_path: Path
) -> None:
    submit = [RAY, "job", "submit", "--address", cluster.dashboard_url, "--working-dir", str(module_dir), "--"]
    entrypoint = [sys.executable, "-m", "ray_sampler", "train", "--env", "lightside:LightSide-v0", *SMALL_TRAIN]
    done = cluster.run([*submit, *entrypoint, "--runs-dir", str(tmp_path)], timeout_s=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "budget used (no target)" in done.stdout
    assert "shipped" not in done.stdout  # the job's own working dir reaches the workers already


EVERY_FORM = textwrap.dedent(
    """
    import json, sys
    import ray
    import lightside  # the driver imports the module (PYTHONPATH); it registers LightSide-v0 here only
    from learner import PPOTrainingConfig, train_ppo
    from ray_sampler import EnvRunnerConfig, EnvRunnerGroupConfig, register_env

    register_env("light-side", lightside.make)
    ray.init(address=sys.argv[1], runtime_env={"working_dir": sys.argv[2]}, log_to_driver=False)
    forms = {"class": lightside.LightSide, "creator": lightside.make, "register_env": "light-side",
             "gym_id": "LightSide-v0", "module:Class": "lightside:LightSide", "module:creator": "lightside:make",
             "module:Id": "lightside:LightSide-v0", "vector_creator": lightside.make_vector}
    report = {}
    for form, env in forms.items():
        runner = EnvRunnerConfig(env=env, num_envs_per_env_runner=2, rollout_fragment_length=8)
        one = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)  # a worker of the cluster
        cfg = PPOTrainingConfig(env_runner=runner, env_runner_group=one, max_iterations=2, target_return=None)
        files = set()
        def sample_once_more(loop):  # the training's runners sample on (steps the result does not count)
            if loop.iteration == 2:
                files.update(ep.get_infos(0)["module_file"] for ep in loop.runners.sample())
        result = train_ppo(cfg, log=print, on_train_result=sample_once_more)
        report[form] = {"env_steps": result.env_steps, "return": result.mean_return, "files": sorted(files)}
    print(json.dumps(report))
    """
)


def test_every_form_trains_and_samples_with_the_module_only_in_the_shipped_working_dir(
    cluster: RayStartCluster, module_dir: Path, tmp_path: Path
) -> None:
    script = tmp_path / "driver.py"
    script.write_text(EVERY_FORM)
    done = cluster.run(
        [sys.executable, str(script), cluster.address, str(module_dir)],
        cwd=_elsewhere(tmp_path),
        env={"PYTHONPATH": str(module_dir)},
        timeout_s=400,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(report) == [
        "class", "creator", "register_env", "gym_id", "module:Class", "module:creator", "module:Id", "vector_creator"
    ]  # fmt: skip
    for form, seen in report.items():
        assert seen["env_steps"] == 32, form  # 2 iterations x 1 runner x 2 sub-envs x 8 steps
        # A LightSide episode returns 1 when it reaches the light, 0 when the id's time limit (20 steps)
        # cuts it first: the mean over finished episodes is in (0, 1].
        assert 0.0 < seen["return"] <= 1.0, form
        assert seen["files"] and all("/runtime_resources/working_dir_files/" in f for f in seen["files"]), form


REPLACED_RUNNER = textwrap.dedent(
    """
    import json, sys
    import ray
    from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
    from tests.helpers import kill_and_wait

    ray.init(address=sys.argv[1], runtime_env={"working_dir": sys.argv[2]}, log_to_driver=False)
    config = EnvRunnerConfig(env="lightside:LightSide", rollout_fragment_length=8)
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=1)) as group:
        first = group.sample()
        files = {ep.get_infos(0)["module_file"] for ep in first}
        kill_and_wait(group.actor(1))
        second = group.sample()
        files |= {ep.get_infos(0)["module_file"] for ep in second if ep.t_started == 0}
        print(json.dumps({"restarts": group.metrics.num_env_runner_restarts, "files": sorted(files),
                          "steps": sum(len(ep) for ep in second)}))
    """
)


def test_a_replaced_runner_imports_the_module_again_through_the_runtime_env(
    cluster: RayStartCluster, module_dir: Path, tmp_path: Path
) -> None:
    script = tmp_path / "driver.py"
    script.write_text(REPLACED_RUNNER)
    repo = Path(__file__).resolve().parents[3]
    done = cluster.run(
        [sys.executable, str(script), cluster.address, str(module_dir)],
        cwd=_elsewhere(tmp_path),
        env={"PYTHONPATH": f"{module_dir}:{repo}"},
        timeout_s=240,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["restarts"] == 1 and report["steps"] == 8
    # Every runner, the replacement included, made its env from the shipped copy, not the original.
    assert report["files"] and all("/runtime_resources/working_dir_files/" in f for f in report["files"])
