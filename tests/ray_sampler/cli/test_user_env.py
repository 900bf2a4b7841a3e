"""The command line's user envs: --env-config in both forms, what is shipped to the workers and why,
and a user's module trained in one command from its own directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
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
        assert runtime_env == {"working_dir": str(tmp_path.resolve())}
        assert words.startswith(f"working dir {tmp_path.resolve()} shipped (it holds the env's module), ")

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
        }
        assert words.startswith(f"working dir {tmp_path / 'code'} shipped, ")
        assert words.endswith(" KiB; py_modules a.py shipped; runtime env env_vars, pip")

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
