"""A user's env module reaches every actor of a cluster the driver attached to: shipped by default
(from the module's directory, or as a py_module when found on PYTHONPATH), with --py-modules, or
with ``ray job submit --working-dir``; not shipped (from Python, without a runtime env), the
runners cannot import it and say so in one line (the control that shows the others ship it); and
a replaced runner imports it again through the same runtime env. One ``ray start --head`` cluster
(token auth) for the module; the user's module lives in a temporary directory no worker's
``sys.path`` holds."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ray_start import RayStartCluster

CLI = [sys.executable, "-m", "ray_sampler"]
RAY = str(Path(sys.executable).parent / "ray")
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
def cluster() -> Iterator[RayStartCluster]:
    with RayStartCluster(num_cpus=2) as started:
        yield started


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
        f"{cluster.address} (2 CPUs); working dir {module_dir.resolve()} shipped (it holds the env's module), "
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
