"""The command line's user envs: --env-config in both forms, what is shipped to the workers and why,
and a user's module trained in one command from its own directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from ray_sampler.cli.options import UsageError
from ray_sampler.cli.user_env import (
    EnvOptions,
    check_env_builds,
    gather_env_config,
    job_runtime_env,
    parse_env_config,
    use_working_directory,
)
from tests.ray_sampler.cli.test_cli_cluster import LIGHTSIDE

USER_ENVS = "tests.ray_sampler.sampling.user_envs"
LEFT_OUT = ["runs/", "sweeps/", "checkpoints/"]
"""The excludes every shipped working dir gets (its virtualenvs come after)."""


class TestEnvConfig:
    def test_the_json_form_and_the_dotted_keys_merge_the_dotted_last(self) -> None:
        args = ["--env-config", '{"size": 5, "name": "a"}', "--lr", "1e-3", "--env-config.size", "7"]
        args += ["--env-config.mode=fast", "--env-config.rates", "[1, 2]"]
        rest = gather_env_config(args)
        assert rest[:2] == ["--lr", "1e-3"] and rest[2] == "--env-config"
        assert json.loads(rest[3]) == {"size": 7, "name": "a", "mode": "fast", "rates": [1, 2]}

    def test_args_without_it_are_left_as_they_are(self) -> None:
        assert gather_env_config(["--env", "CartPole-v1", "--lr", "1"]) == ["--env", "CartPole-v1", "--lr", "1"]

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("size=5", "--env-config: a JSON object is allowed, e.g. '{\"size\": 5}' (got 'size=5': Expecting value"),
            ('"5"', "--env-config: a JSON object is allowed, e.g. '{\"size\": 5}' (got '\"5\"')"),
        ],
        ids=["not-json", "not-an-object"],
    )
    def test_what_is_not_a_json_object_is_refused(self, text: str, message: str) -> None:
        with pytest.raises(UsageError) as raised:
            parse_env_config(text)
        assert str(raised.value).startswith(message)

    def test_the_empty_text_is_an_empty_config(self) -> None:
        assert parse_env_config("") == {} and EnvOptions().env_config_dict() == {}


class TestShipping:
    """What ``job_runtime_env`` ships, and the words for the run's first line."""

    def test_a_local_ray_ships_nothing_its_workers_have_the_drivers_directory(self) -> None:
        assert job_runtime_env(EnvOptions(env=f"{USER_ENVS}:LightSide"), attached=False) == (None, "")

    def test_attached_the_current_directory_is_shipped_when_it_holds_the_envs_module(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (tmp_path / "lightside.py").write_text(LIGHTSIDE)
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        runtime_env, words = job_runtime_env(EnvOptions(env="lightside:LightSide"), attached=True)
        assert runtime_env == {"working_dir": str(tmp_path.resolve()), "excludes": LEFT_OUT}
        assert words.startswith(
            f"shipped {tmp_path.resolve()} as the working dir (it holds the env's module): 1 file, "
        )

    def test_attached_a_module_found_elsewhere_on_the_path_ships_its_package(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)  # the module is not under the current directory
        runtime_env, words = job_runtime_env(EnvOptions(env=f"{USER_ENVS}:LightSide"), attached=True)
        tests_package = Path(__file__).resolve().parents[2]
        assert runtime_env == {"py_modules": [str(tests_package)]}
        assert words == "py_modules tests shipped (the env's module)"

    @pytest.mark.parametrize("env", ["CartPole-v1", "gymnasium.envs.classic_control:CartPoleEnv"])
    def test_a_gymnasium_id_or_an_installed_package_ships_nothing(self, env: str) -> None:
        assert job_runtime_env(EnvOptions(env=env), attached=True) == (None, "")

    def test_a_submitted_jobs_own_working_dir_is_not_shipped_again(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": {"working_dir": "gcs://x"}}))
        assert job_runtime_env(EnvOptions(env=f"{USER_ENVS}:LightSide"), attached=True) == (None, "")

    def test_the_flags_and_a_runtime_env_file_go_together(self, tmp_path: Path) -> None:
        (tmp_path / "runtime_env.yaml").write_text("pip: [tinyenvs==1.0]\nenv_vars: {SIZE: '5'}\n")
        (tmp_path / "code").mkdir()
        (tmp_path / "code" / "a.py").write_text("")
        options = EnvOptions(
            env="CartPole-v1",
            working_dir=tmp_path / "code",
            py_modules=(str(tmp_path / "code" / "a.py"),),
            runtime_env=tmp_path / "runtime_env.yaml",
        )
        runtime_env, words = job_runtime_env(options, attached=True)
        assert runtime_env == {
            "pip": ["tinyenvs==1.0"],
            "env_vars": {"SIZE": "5"},
            "py_modules": [str(tmp_path / "code" / "a.py")],
            "working_dir": str(tmp_path / "code"),
            "excludes": LEFT_OUT,
        }
        assert words == (
            f"shipped {tmp_path / 'code'} as the working dir: 1 file, 106 B; py_modules a.py shipped; "
            "runtime env env_vars, pip"
        )

    def test_a_working_dir_over_rays_upload_limit_is_refused_naming_it(self, tmp_path: Path) -> None:
        (tmp_path / "weights.bin").write_bytes(os.urandom(64 * 1024))  # random: zip cannot shrink it
        with pytest.raises(UsageError) as raised:
            job_runtime_env(EnvOptions(working_dir=tmp_path), attached=True, upload_limit_bytes=32 * 1024)
        assert str(raised.value).startswith(
            f"--working-dir: {str(tmp_path)!r} packs to 64 KiB, over Ray's upload limit of 32 KiB (leave large "
            "files out with .gitignore or .rayignore"
        )

    def test_a_runtime_env_file_that_is_no_mapping_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "r.yaml").write_text("- just\n- a list\n")
        with pytest.raises(UsageError, match=r"^--runtime-env: '.*r\.yaml' must hold a mapping"):
            job_runtime_env(EnvOptions(runtime_env=tmp_path / "r.yaml"), attached=True)


SHIPPED_BYTES = 3297
"""The zip of the project's two shipped files: 3047 + 32 bytes, a local header (30 bytes) and a
central one (46) per file, each with its name, and the end record (22)."""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project: the env's module and a .gitignore (shipped, zipped to ``SHIPPED_BYTES``),
    beside what is not shipped: a run with a large file, a sweep, a checkpoint, what .gitignore
    lists, two virtualenvs, Git's and Python's own."""
    root = tmp_path / "proj"
    files = {
        "lightside.py": "# the env's module: found, never imported here\n" + "a = 1\n" * 500,  # 3047 bytes
        ".gitignore": "# data and weights\ndata/\n*.ckpt\n",
        "runs/ppo-lightside/metrics.csv": "iter,return\n1,0.5\n",
        "sweeps/ppo-1/sweep.toml": 'algo = "ppo"\n',
        "old/checkpoints/ckpt-1/state.json": "{}",
        "data/obs.csv": "1,2,3\n",
        "model.ckpt": "weights",
        ".venv/pyvenv.cfg": "home = /usr/bin\n",
        ".venv/lib/site.py": "",
        "py311/pyvenv.cfg": "home = /usr/bin\n",
        "py311/lib/site.py": "",
        ".git/HEAD": "ref: refs/heads/main\n",
        "__pycache__/lightside.cpython-311.pyc": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "runs" / "ppo-lightside" / "big.bin").write_bytes(os.urandom(64 * 1024))  # zip cannot shrink it
    return root.resolve()


def _ray_package(runtime_env: dict[str, object], tmp_path: Path) -> list[str]:
    """The files of the zip Ray's own working_dir upload makes of ``runtime_env`` (its excludes, its
    defaults, the ignore files), with the upload itself left out: no cluster is needed."""
    from ray._private.runtime_env.packaging import create_package  # noqa: PLC2701 -- what Ray zips
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed  # noqa: PLC2701

    target = tmp_path / "package.zip"

    def zip_only(working_dir: str, *, excludes: list[str]) -> None:  # what upload_package_if_needed does
        create_package(working_dir, target, include_gitignore=True, excludes=excludes)

    upload_working_dir_if_needed(dict(runtime_env), include_gitignore=True, upload_fn=zip_only)
    with zipfile.ZipFile(target) as package:
        return sorted(info.filename for info in package.infolist() if not info.is_dir())


class TestWhatIsShipped:
    """A working dir shipped leaves out runs, sweeps, checkpoints, virtualenvs, Git's and Python's own
    and what .gitignore lists; the first line says what went and how big."""

    def test_runs_sweeps_checkpoints_and_every_virtualenv_are_excluded(self, project: Path) -> None:
        runtime_env, _ = job_runtime_env(EnvOptions(working_dir=project), attached=True)
        assert runtime_env == {"working_dir": str(project), "excludes": [*LEFT_OUT, "/.venv/", "/py311/"]}

    def test_the_first_line_says_what_was_shipped_how_big_and_what_was_left_out(
        self, project: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(project)
        monkeypatch.syspath_prepend(str(project))
        _, words = job_runtime_env(EnvOptions(env="lightside:LightSide"), attached=True)
        assert words == (
            f"shipped {project} as the working dir (it holds the env's module): 2 files, 3 KiB; left out "
            ".venv/, old/checkpoints/, py311/, runs/, sweeps/, .gitignore's 2 patterns"
        )

    def test_rays_own_packaging_ships_the_files_counted_and_honours_gitignore(
        self, project: Path, tmp_path: Path
    ) -> None:
        runtime_env, _ = job_runtime_env(EnvOptions(working_dir=project), attached=True)
        assert runtime_env is not None
        assert _ray_package(runtime_env, tmp_path) == [".gitignore", "lightside.py"]  # data/, *.ckpt: Ray's own

    def test_with_rays_gitignore_switch_off_what_gitignore_lists_is_shipped_and_said(
        self, project: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "1")
        _, words = job_runtime_env(EnvOptions(working_dir=project), attached=True)
        assert words == (
            f"shipped {project} as the working dir: 4 files, 3 KiB; left out .venv/, old/checkpoints/, py311/, "
            "runs/, sweeps/"
        )

    def test_the_commands_own_output_dir_inside_it_is_excluded_and_said(self, project: Path) -> None:
        (project / "experiments" / "ppo-lightside").mkdir(parents=True)
        options = EnvOptions(working_dir=project)
        runtime_env, words = job_runtime_env(options, attached=True, output_dirs=(project / "experiments",))
        assert runtime_env is not None
        assert runtime_env["excludes"] == [*LEFT_OUT, "/.venv/", "/experiments/", "/py311/"]
        assert "; left out .venv/, experiments/, old/checkpoints/, py311/, runs/, sweeps/, " in words

    def test_a_runtime_env_files_own_excludes_come_first_and_stay(self, project: Path, tmp_path: Path) -> None:
        (project / "notes.log").write_text("a note\n")
        (tmp_path / "r.yaml").write_text("excludes: ['*.log', 'runs/']\n")
        options = EnvOptions(working_dir=project, runtime_env=tmp_path / "r.yaml")
        runtime_env, words = job_runtime_env(options, attached=True)
        assert runtime_env is not None
        assert runtime_env["excludes"] == ["*.log", "runs/", "sweeps/", "checkpoints/", "/.venv/", "/py311/"]
        assert words.startswith(f"shipped {project} as the working dir: 2 files, 3 KiB; ")
        assert words.endswith("; runtime env excludes")

    def test_the_upload_limit_counts_only_what_is_shipped(self, project: Path) -> None:
        # runs/ alone holds 64 KiB: a limit of what is shipped, to the byte, lets it through.
        runtime_env, _ = job_runtime_env(
            EnvOptions(working_dir=project), attached=True, upload_limit_bytes=SHIPPED_BYTES
        )
        assert runtime_env is not None and runtime_env["working_dir"] == str(project)

    def test_a_limit_one_byte_under_what_is_shipped_refuses_it(self, project: Path) -> None:
        with pytest.raises(UsageError) as raised:
            job_runtime_env(EnvOptions(working_dir=project), attached=True, upload_limit_bytes=SHIPPED_BYTES - 1)
        assert str(raised.value).startswith(f"--working-dir: {str(project)!r} packs to 3 KiB, over Ray's upload limit")


def test_the_working_directory_goes_first_on_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    use_working_directory()
    assert sys.path[0] == str(tmp_path)


def test_a_users_module_trains_in_one_command_from_its_own_directory(tmp_path: Path) -> None:
    """The console script, as a new user runs it: no --address (a Ray of its own), the module in the
    current directory only, its config on the command line."""
    (tmp_path / "lightside.py").write_text(LIGHTSIDE)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    command = [str(Path(sys.executable).parent / "ray-sampler"), "train", "--env", "lightside:LightSide"]
    command += ["--env-config.size", "4", "--max-iterations", "2", "--target-return", "none"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "ray-sampler train: PPO on lightside:LightSide, 2 env runners x 4 sub-envs (local Ray cluster)"
    assert [line.split(":")[0] for line in lines if line.startswith("iter ")] == ["iter 1/2", "iter 2/2"]
    config = tomllib.loads((next((tmp_path / "runs").iterdir()) / "config.toml").read_text())
    assert config["env"] == "lightside:LightSide" and json.loads(config["env_config"]) == {"size": 4}


def test_the_env_config_of_a_config_file_and_the_flags_merge_key_by_key(tmp_path: Path) -> None:
    from ray_sampler.cli.train import TrainPPO, command_from_args

    (tmp_path / "run.toml").write_text('env_config = \'{"size": 4, "mode": "slow"}\'\n')
    args = ["--config", str(tmp_path / "run.toml"), "--env-config.size", "6", "--env-config", '{"seed": 1}']
    command = command_from_args(TrainPPO, args, prog="ray-sampler train")
    assert command.env_config_dict() == {"size": 6, "mode": "slow", "seed": 1}


def test_py_modules_add_to_those_of_a_runtime_env_file(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    (tmp_path / "r.yaml").write_text(f"py_modules: [{tmp_path / 'a.py'}]\n")
    options = EnvOptions(runtime_env=tmp_path / "r.yaml", py_modules=(str(tmp_path / "b.py"),))
    runtime_env, _ = job_runtime_env(options, attached=True)
    assert runtime_env == {"py_modules": [str(tmp_path / "a.py"), str(tmp_path / "b.py")]}


SIMPLE_SPREAD = """
from mpe2 import simple_spread_v3


def Spread(config):
    return simple_spread_v3.parallel_env(N=config.get("n", 3), max_cycles=25)
"""


def test_a_multi_agent_env_samples_from_the_command_line_and_training_refuses_it(
    tmp_path: Path, ray_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "spread.py").write_text(SIMPLE_SPREAD)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RAY_ADDRESS"] = ray_address
    script = str(Path(sys.executable).parent / "ray-sampler")
    command = [script, "sample", "--env", "spread:Spread", "--env-config.n", "2", "--iterations", "1"]
    command += ["--rollout-fragment-length", "25", "--num-envs-per-env-runner", "2"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    # 2 runners x 2 sub-envs x 25 steps; 2 agents act at every step; each episode is 25 steps long.
    assert done.stdout.splitlines()[1].startswith("iter 1: 100 env steps (200 agent steps), 4 episodes done, ")
    # Where a multi-agent env is not allowed, it is refused in one line before Ray starts; training takes it.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError) as refused:
        check_env_builds("spread:Spread", {})
    assert str(refused.value) == "--env 'spread:Spread' is a multi-agent env: this command takes single-agent envs"
    assert list(check_env_builds("spread:Spread", {"n": 3}, multi_agent_ok=True) or ()) == [
        "agent_0",
        "agent_1",
        "agent_2",
    ]
