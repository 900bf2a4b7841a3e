"""The deployment files, checked without starting Ray: cluster.yaml (Ray's cluster launcher on AWS)
and the KubeRay RayJob in examples/kubernetes/ are valid, secure by default, and run real
``ray-sampler`` commands."""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import ipaddress
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from ray_sampler.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_YAML = ROOT / "cluster.yaml"
KUBERAY_DIR = ROOT / "examples" / "kubernetes"
RAYJOB_YAML = KUBERAY_DIR / "rayjob.yaml"
DEPLOYMENT_FILES = (CLUSTER_YAML, RAYJOB_YAML, KUBERAY_DIR / "README.md")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
WORLD_CIDRS = ("0.0.0.0/0", "::/0")


def _load_cluster() -> dict[str, Any]:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def _load_rayjob() -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(RAYJOB_YAML.read_text()) if doc is not None]
    jobs = [doc for doc in docs if doc.get("kind") == "RayJob"]
    assert len(jobs) == 1, f"expected one RayJob in {RAYJOB_YAML.name}, found {len(jobs)}"
    return jobs[0]


def _all_docs_of_rayjob_file() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(RAYJOB_YAML.read_text()) if doc is not None]


# --- shell commands -------------------------------------------------------------------------


def _shell_commands(command: str) -> list[tuple[dict[str, str], list[str]]]:
    """``(environment, argv)`` of each simple command in a ``;``/``&&``-joined line, the
    environment holding what earlier ``export``s and the command's own ``VAR=value`` prefix set."""
    exported: dict[str, str] = {}
    found = []
    for segment in re.split(r";|&&|\|\|", command):
        words = shlex.split(segment)
        if words[:1] == ["export"]:
            exported.update(word.split("=", 1) for word in words[1:] if "=" in word)
            continue
        prefix = {}
        while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
            name, value = words.pop(0).split("=", 1)
            prefix[name] = value
        if words:
            found.append(({**exported, **prefix}, words))
    return found


def _ray_starts(commands: list[str]) -> list[tuple[dict[str, str], dict[str, str]]]:
    """``(environment, {flag: value})`` of each ``ray start`` in a command list."""
    starts = []
    for command in commands:
        for env, argv in _shell_commands(command):
            if argv[:2] == ["ray", "start"]:
                flags = dict(arg.split("=", 1) if "=" in arg else (arg, "") for arg in argv[2:])
                starts.append((env, flags))
    return starts


# --- ray-sampler invocations -----------------------------------------------------------------

# `ray-sampler` as a command word (not in a URL or the pip requirement `ray-sampler @ git+...`),
# then the rest of the command up to a quote, a shell operator, a comment or the line's end.
_INVOCATION = re.compile(r"(?:^|(?<=[\s\"'`(]))ray-sampler[ \t]+([^\n\"'`;&|#)]*)")


def _cli(*argv: str) -> tuple[int, str]:
    """Exit status and output of ``ray-sampler *argv`` (only ever called with ``--help``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), pytest.raises(SystemExit) as exited:
        main(list(argv))
    return exited.value.code or 0, out.getvalue()


@functools.cache
def _subcommands() -> frozenset[str]:
    _, usage = _cli("--help")
    listed = frozenset(re.findall(r"^  ([\w-]+)  ", usage, flags=re.M))  # the usage's list of commands
    assert listed == frozenset(COMMANDS), usage
    return listed


def _invocations(text: str) -> list[list[str]]:
    """The argv after ``ray-sampler`` of each invocation in a text: those naming a subcommand,
    and those naming any other word followed by a flag (a misspelt subcommand)."""
    found = []
    for match in _INVOCATION.finditer(text):
        words = match.group(1).split()
        if words and (words[0] in _subcommands() or (words[1:2] and words[1].startswith("-"))):
            found.append(words)
    return found


def _invocation_problems(argv: list[str]) -> list[str]:
    sub, args = argv[0], argv[1:]
    if sub not in _subcommands():
        return [f"'{sub}' is not a subcommand of ray-sampler (has {sorted(_subcommands())})"]
    _, help_text = _cli(sub, "--help-all")
    problems = [
        f"ray-sampler {sub} has no flag {flag}"
        for flag in (arg.split("=", 1)[0] for arg in args if arg.startswith("-"))
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text)
    ]
    # Parsing stops at --help after converting every known flag's value, so a bad value fails here.
    status, output = _cli(*argv, "--help")
    if status != 0:
        problems.append(f"ray-sampler {' '.join(argv)}: {output.strip().splitlines()[-1]}")
    return problems


class TestClusterYaml:
    """cluster.yaml, for `ray up` on AWS."""

    def test_passes_the_checks_ray_up_makes_before_calling_aws(self) -> None:
        # What `ray up` runs on the file before any cloud call (ray.autoscaler._private.commands.
        # _bootstrap_config): merge the AWS defaults, then validate against ray-schema.json plus
        # the node-type rules. Ray has no public function for the two.
        from ray.autoscaler._private.util import prepare_config, validate_config  # noqa: PLC2701 (what `ray up` runs)

        validate_config(prepare_config(_load_cluster()))

    def test_every_ray_start_runs_with_token_auth(self) -> None:
        config = _load_cluster()
        for key in ("head_start_ray_commands", "worker_start_ray_commands"):
            starts = _ray_starts(config[key])
            assert starts, f"{key} has no `ray start`"
            assert [env.get("RAY_AUTH_MODE") for env, _ in starts] == ["token"] * len(starts), key

    def test_head_dashboard_listens_on_loopback_only(self) -> None:
        ((_, flags),) = _ray_starts(_load_cluster()["head_start_ray_commands"])
        assert "--head" in flags
        assert flags.get("--dashboard-host") in LOOPBACK_HOSTS

    def test_ray_start_flags_exist_in_this_ray(self) -> None:
        from ray.scripts.scripts import start

        known = {opt for param in start.params for opt in param.opts}
        config = _load_cluster()
        used = {
            flag
            for key in ("head_start_ray_commands", "worker_start_ray_commands")
            for _, flags in _ray_starts(config[key])
            for flag in flags
        }
        assert used - known == set()

    def test_token_is_mounted_from_outside_the_repository(self) -> None:
        mounts = _load_cluster()["file_mounts"]
        source = mounts["~/.ray/auth_token"]
        assert source.startswith(("~/", "/"))
        assert not Path(source).expanduser().resolve().is_relative_to(ROOT)

    def test_every_node_type_uses_a_premade_security_group(self) -> None:
        # Without SecurityGroupIds the launcher creates a group that admits SSH from anywhere
        # (pinned by the next test), whatever provider.security_group says.
        node_types = _load_cluster()["available_node_types"]
        assert [name for name, nt in node_types.items() if not nt["node_config"].get("SecurityGroupIds")] == []

    def test_launcher_made_security_groups_admit_ssh_from_anywhere(self) -> None:
        # Why the test above exists, read from Ray's source (importing it needs boto3). If a Ray
        # upgrade drops this default, provider.security_group could replace the pre-made group.
        import ray.autoscaler

        tree = ast.parse((Path(ray.autoscaler.__file__).parent / "_private" / "aws" / "config.py").read_text())
        functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        (ssh_rules,) = [
            node for node in ast.walk(functions["_create_default_ssh_inbound_rules"]) if isinstance(node, ast.Return)
        ]
        assert ast.literal_eval(ssh_rules.value) == [
            {"FromPort": 22, "ToPort": 22, "IpProtocol": "tcp", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
        ]
        called = {
            node.func.id
            for node in ast.walk(functions["_create_default_inbound_rules"])
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert "_create_default_ssh_inbound_rules" in called

    def test_any_ip_permission_opens_only_ssh_to_a_non_world_cidr(self) -> None:
        permissions = _load_cluster()["provider"].get("security_group", {}).get("IpPermissions", [])
        for permission in permissions:
            ports = (permission.get("IpProtocol"), permission.get("FromPort"), permission.get("ToPort"))
            assert ports == ("tcp", 22, 22)
            cidrs = [r["CidrIp"] for r in permission.get("IpRanges", [])]
            cidrs += [r["CidrIpv6"] for r in permission.get("Ipv6Ranges", [])]
            assert set(cidrs) & set(WORLD_CIDRS) == set()

    def test_documented_security_group_opens_only_ssh_to_your_cidr(self) -> None:
        text = CLUSTER_YAML.read_text()
        (ssh_cidr,) = re.findall(r"SSH_CIDR=(\S+)", text)
        assert ipaddress.ip_network(ssh_cidr).prefixlen > 0
        assert re.findall(r"--port (\S+)", text) == ["22"]
        assert set(re.findall(r"--cidr (\S+)", text)) == {'"$SSH_CIDR"'}
        assert re.findall(r"--source-group (\S+)", text) == ['"$SG_ID"']

    def test_installs_pinned_ray_gymnasium_and_a_commit_of_ray_sampler(self) -> None:
        setup = " ".join(_load_cluster()["setup_commands"])
        assert re.search(r'"ray\[default\]==2\.60\.0"', setup)
        assert re.search(r'"gymnasium==[\d.]+"', setup)
        assert re.search(r"ray-sampler @ git\+https://\S+/ray-sampler@([0-9a-f]{40}|RAY_SAMPLER_COMMIT)\"", setup)

    def test_holds_no_token(self) -> None:
        assert "RAY_AUTH_TOKEN=" not in CLUSTER_YAML.read_text()


class TestKubeRayManifest:
    """examples/kubernetes/rayjob.yaml, for KubeRay."""

    def test_is_a_ray_io_v1_rayjob(self) -> None:
        job = _load_rayjob()
        assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")

    def test_cluster_uses_token_auth_from_a_secret(self) -> None:
        spec = _load_rayjob()["spec"]["rayClusterSpec"]
        assert spec["authOptions"]["mode"] == "token"
        assert spec["authOptions"]["secretName"]

    def test_head_and_every_worker_group_set_token_auth_env(self) -> None:
        spec = _load_rayjob()["spec"]["rayClusterSpec"]
        secret = spec["authOptions"]["secretName"]
        groups = {"head": spec["headGroupSpec"]} | {g["groupName"]: g for g in spec["workerGroupSpecs"]}
        expected = {
            "RAY_AUTH_MODE": {"value": "token"},
            "RAY_AUTH_TOKEN": {"valueFrom": {"secretKeyRef": {"name": secret, "key": "auth_token"}}},
        }
        for name, group in groups.items():
            env = {
                e["name"]: {k: v for k, v in e.items() if k != "name"}
                for e in group["template"]["spec"]["containers"][0]["env"]
            }
            assert {k: env.get(k) for k in expected} == expected, name

    def test_manifest_holds_no_token(self) -> None:
        docs = _all_docs_of_rayjob_file()
        assert [doc for doc in docs if doc.get("kind") == "Secret"] == []
        spec = _load_rayjob()["spec"]["rayClusterSpec"]
        pods = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
        envs = [e for pod in pods for c in pod["template"]["spec"]["containers"] for e in c.get("env", [])]
        assert [e for e in envs if e["name"] == "RAY_AUTH_TOKEN" and "value" in e] == []

    def test_dashboard_has_no_external_service(self) -> None:
        head = _load_rayjob()["spec"]["rayClusterSpec"]["headGroupSpec"]
        external = {"LoadBalancer", "NodePort"}
        assert head.get("serviceType", "ClusterIP") not in external
        assert head.get("headService", {}).get("spec", {}).get("type", "ClusterIP") not in external
        assert not head.get("enableIngress", False)
        services = [doc for doc in _all_docs_of_rayjob_file() if doc.get("kind") == "Service"]
        assert [s for s in services if s.get("spec", {}).get("type") in external] == []

    def test_images_run_the_declared_ray_version(self) -> None:
        spec = _load_rayjob()["spec"]["rayClusterSpec"]
        pods = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
        images = {c["image"] for pod in pods for c in pod["template"]["spec"]["containers"]}
        assert images == {f"rayproject/ray:{spec['rayVersion']}-py311"}

    def test_ray_version_matches_cluster_yaml(self) -> None:
        setup = " ".join(_load_cluster()["setup_commands"])
        assert f"ray[default]=={_load_rayjob()['spec']['rayClusterSpec']['rayVersion']}" in setup

    def test_runtime_env_installs_a_commit_of_ray_sampler(self) -> None:
        runtime_env = yaml.safe_load(_load_rayjob()["spec"]["runtimeEnvYAML"])
        pins = [p for p in runtime_env["pip"] if p.startswith("ray-sampler")]
        assert len(pins) == 1
        assert re.fullmatch(r"ray-sampler @ git\+https://\S+/ray-sampler@([0-9a-f]{40}|RAY_SAMPLER_COMMIT)", pins[0])

    def test_entrypoint_is_a_real_ray_sampler_command(self) -> None:
        argv = shlex.split(_load_rayjob()["spec"]["entrypoint"])
        assert argv[0] == "ray-sampler"
        assert _invocation_problems(argv[1:]) == []
        assert "--address" in argv


class TestRaySamplerInvocations:
    """Every `ray-sampler ...` command written in the deployment files, comments included."""

    @pytest.mark.parametrize("path", DEPLOYMENT_FILES, ids=lambda p: p.name)
    def test_names_real_subcommands_and_flags(self, path: Path) -> None:
        invocations = _invocations(path.read_text())
        assert invocations, f"no ray-sampler command found in {path.name}"
        assert [problem for argv in invocations for problem in _invocation_problems(argv)] == []

    def test_finds_misspelt_subcommands_and_flags(self) -> None:
        text = 'ray exec c.yaml "ray-sampler trian --num-env-runners 2"\nray-sampler sample --no-such-flag 1\n'
        problems = [problem for argv in _invocations(text) for problem in _invocation_problems(argv)]
        assert len(problems) == 2
        assert problems[0].startswith("'trian' is not a subcommand")
        assert problems[1] == "ray-sampler sample has no flag --no-such-flag"
