"""The command line's user envs: ``--env`` in every form, ``--env-config``, and shipping the user's
code to the workers (``--working-dir``, ``--py-modules``, ``--runtime-env``).

``--env`` takes what ``EnvRunnerConfig.env`` takes as a string: a gymnasium id, a ``register_env``
name, or ``module:Name`` (an env class, a creator, or a gymnasium id the module registers), the
module found from the current directory as ``python -m`` finds it (``use_working_directory``).

``--env-config '{"size": 5}'`` (a JSON object) and ``--env-config.size 5`` (one key; the value
read as JSON where it is JSON, else as a string) fill the creator's ``EnvContext``; the keys of
both forms are merged, the dotted ones last (``gather_env_config``).

A Ray started in this process gives its workers the driver's directory. An attached cluster's
workers may run elsewhere: ``--working-dir DIR`` ships a directory, ``--py-modules PATH ...``
modules or packages, ``--runtime-env FILE`` any runtime env (a YAML or JSON mapping), all through
Ray's job-level ``runtime_env``. Attached without any of them, the env's module is shipped: the
current directory when it holds the module, else the module's top-level package (found on
``PYTHONPATH``; not one installed in site-packages). A working dir shipped never holds the runs,
sweeps and checkpoints directories (nor the command's own ``--runs-dir`` inside it) or a
virtualenv: they go into the runtime env's ``excludes``, after a user's own; Ray itself leaves out
``.git``, ``__pycache__``, ``.venv``, ``venv`` and what ``.gitignore`` and ``.rayignore`` list. The
run's first line says what was shipped, how many files and how big it packs, and what was left
out; a working dir that packs, so left out, to more than Ray's upload limit is refused before Ray
starts. A job submitted with ``ray job submit --working-dir`` already has its directory on every
worker: nothing more is shipped.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray_sampler.cli.options import UsageError
from ray_sampler.errors import EnvCreatorError, first_line
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_creator import MultiAgentEnvGiven, probe_env, resolve_creator
from ray_sampler.sampling.multi_agent_env_runner import make_multi_agent_sub_env

__all__ = [
    "DEFAULT_ENV",
    "EnvOptions",
    "check_env_builds",
    "check_env_name",
    "gather_env_config",
    "job_runtime_env",
    "parse_env_config",
    "use_working_directory",
]

_ENV_CONFIG = "--env-config"

DEFAULT_ENV = "CartPole-v1"
"""The env a command runs without ``--env``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvOptions:
    """The env a command runs, its config, and the code its workers need."""

    env: str = DEFAULT_ENV
    """The env: a gymnasium id, a name given to register_env, or module:Name (an env class, a creator
    or a gymnasium id of that module; the module is found from the current directory)."""
    env_config: str = ""
    """The creator's env config as a JSON object ('{"size": 5}'); --env-config.KEY VALUE sets one key."""
    working_dir: Path | None = None
    """A directory shipped to every worker as its working directory (Ray's runtime_env working_dir);
    attached to a cluster without it, the current directory is shipped if it holds the env's module."""
    py_modules: tuple[str, ...] = ()
    """Modules or packages (paths) shipped to every worker (Ray's runtime_env py_modules)."""
    runtime_env: Path | None = None
    """A YAML or JSON file with a Ray runtime_env for every worker (working_dir, py_modules, pip, env_vars)."""

    def env_config_dict(self) -> dict[str, Any]:
        """``env_config`` as the dict the creator gets."""
        return parse_env_config(self.env_config)


def use_working_directory() -> None:
    """Puts the current directory first on ``sys.path``, as ``python -m`` does (a console script
    does not), so that ``--env mymodule:MyEnv`` finds the user's module where they run the command."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def gather_env_config(args: list[str]) -> list[str]:
    """``args`` with every ``--env-config JSON`` and ``--env-config.KEY VALUE`` (or ``=VALUE``) merged
    into one ``--env-config JSON`` (the dotted keys last); UsageError for a value that is not."""
    merged: dict[str, Any] = {}
    dotted: dict[str, Any] = {}  # applied after every JSON object, whatever the order given
    rest: list[str] = []
    seen = False
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        if flag == _ENV_CONFIG or flag.startswith(_ENV_CONFIG + "."):
            if eq:
                value = inline
            elif i + 1 < len(args):
                value, i = args[i + 1], i + 1
            else:
                raise UsageError(f"{flag}: a value is needed (got none)")
            seen = True
            if flag == _ENV_CONFIG:
                merged.update(parse_env_config(value))
            else:
                dotted[flag[len(_ENV_CONFIG) + 1 :]] = _json_or_text(value)
        else:
            rest.append(arg)
        i += 1
    config = {**merged, **dotted}
    return [*rest, _ENV_CONFIG, json.dumps(config) if config else ""] if seen else rest  # "": the empty config


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_env_config(text: str) -> dict[str, Any]:
    """The dict of an ``--env-config`` JSON object ("" is empty); UsageError naming the flag otherwise."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(
            f"--env-config: a JSON object is allowed, e.g. '{{\"size\": 5}}' (got {text!r}: {e})"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"--env-config: a JSON object is allowed, e.g. '{{\"size\": 5}}' (got {text!r})")
    return value


def check_env_name(env: str) -> str:
    """``env`` if it resolves (the module of a ``module:Name`` imports, the name is found); else
    UsageError with the resolver's one line."""
    try:
        resolve_creator(env)
    except EnvCreatorError as e:
        raise UsageError(str(e).replace("'env' ", "--env ", 1)) from None
    return env


def check_env_builds(
    env: str, env_config: dict[str, Any], *, multi_agent_ok: bool = False
) -> dict[Any, tuple[Any, Any]] | None:
    """UsageError with one line if ``env``'s creator raises or returns what is not an env (one
    sub-env is built, as a runner builds its first). A multi-agent env (a MultiAgentEnv or a
    PettingZoo env) is refused unless ``multi_agent_ok`` (the command trains or samples it); returns
    its possible agents with their (observation, action) spaces, or None for a single-agent env."""
    try:
        probe_env(env, env_config)
    except MultiAgentEnvGiven:
        if not multi_agent_ok:
            raise UsageError(f"--env {env!r} is a multi-agent env: this command takes single-agent envs") from None
        config = EnvRunnerConfig(env=resolve_creator(env), env_config=dict(env_config))
        try:
            probe = make_multi_agent_sub_env(config, worker_index=0, vector_index=0, num_workers=0)
        except EnvCreatorError as e:
            raise UsageError(f"--env {env!r}: {e}") from None
        try:
            return {a: (probe.get_observation_space(a), probe.get_action_space(a)) for a in probe.possible_agents}
        finally:
            probe.close()
    except EnvCreatorError as e:
        raise UsageError(f"--env {env!r}: {e}") from None
    return None


def _env_module_path(env: str) -> Path | None:
    """What to ship for ``module:Name``'s module: its top-level package's directory, or the module's
    file; None for an env of no module, or one installed in site-packages (the cluster installs
    those: a runtime env's pip)."""
    module, sep, _ = env.partition(":")
    if not sep:
        return None
    top = module.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package (or a namespace package): its directory
        path = Path(next(iter(spec.submodule_search_locations))).resolve()
    elif spec.origin not in (None, "built-in", "frozen"):
        path = Path(str(spec.origin)).resolve()
    else:
        return None
    installed = {Path(p).resolve() for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
    return None if any(path.is_relative_to(root) for root in installed) else path


def _in_submitted_job_with_working_dir() -> bool:
    """Whether this process is the driver of a job submitted with a working dir (its workers have it)."""
    job = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not job:
        return False
    try:
        return bool((json.loads(job).get("runtime_env") or {}).get("working_dir"))
    except ValueError:
        return False


_ALWAYS_LEFT_OUT = ("runs", "sweeps", "checkpoints")
"""Directories never shipped in a working dir, at any depth: the runs (``--runs-dir``'s default), the
sweeps (``--sweeps-dir``'s) and the checkpoints (a run's ``checkpoints/``) the commands write."""
_NEVER_HOLDS_A_VENV = frozenset({".git", "__pycache__"})  # not walked looking for virtualenvs
_IGNORE_FILES = (".gitignore", ".rayignore")
"""The ignore files Ray's packaging honours in every directory of a working dir."""
_SHIP_GITIGNORED = "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"
"""Ray's switch: "1" ships what ``.gitignore`` lists (``.rayignore`` still counts)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Package:
    """What Ray's packaging of a working dir holds."""

    num_files: int
    num_bytes: int
    """The zip's size, which Ray's upload limit counts."""


def _as_pattern(relative: Path) -> str:
    """A gitignore pattern for the one directory ``relative`` (to the working dir), its contents too."""
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in relative.as_posix())
    return f"/{escaped}/"


def _left_out_dirs(directory: Path, output_dirs: list[Path]) -> tuple[list[Path], list[Path]]:
    """The directories under ``directory`` that are never shipped (relative, sorted): those named in
    ``_ALWAYS_LEFT_OUT`` or in ``output_dirs``, and the virtualenvs (a ``pyvenv.cfg``); the
    virtualenvs are also returned alone (Ray's own excludes know only ``.venv`` and ``venv``)."""
    left_out: list[Path] = []
    venvs: list[Path] = []
    # Ray's ignore files are not read here: a virtualenv .gitignore lists is left out twice, harmlessly.
    for root, dirs, _ in os.walk(directory):
        kept = []
        for name in sorted(dirs):
            path = Path(root) / name
            relative = path.relative_to(directory)
            if (path / "pyvenv.cfg").is_file():
                venvs.append(relative)
                left_out.append(relative)
            elif name in _ALWAYS_LEFT_OUT or relative in output_dirs:
                left_out.append(relative)
            elif name not in _NEVER_HOLDS_A_VENV:
                kept.append(name)
        dirs[:] = kept  # nothing under a directory left out is walked
    return sorted(left_out), sorted(venvs)


def _honours_gitignore() -> bool:
    return os.environ.get(_SHIP_GITIGNORED, "0") != "1"


def _ignore_file_patterns(directory: Path) -> dict[str, int]:
    """The ignore files in ``directory`` that Ray's packaging honours, with how many patterns each."""
    names = _IGNORE_FILES if _honours_gitignore() else _IGNORE_FILES[1:]
    counts = {}
    for name in names:
        path = directory / name
        if path.is_file():
            lines = (line.strip() for line in path.read_text(errors="replace").splitlines())
            counts[name] = sum(1 for line in lines if line and not line.startswith("#"))
    return counts


def _package(directory: Path, excludes: list[str]) -> _Package | None:
    """What Ray's packaging of ``directory`` holds, with ``excludes`` beside Ray's default ones and
    the ignore files, as Ray applies them; None where this Ray's packaging is not the one this was
    written for."""
    try:
        # Ray's own packaging (no public API says what a working dir packs to): the same rules.
        from ray._private import ray_constants  # noqa: PLC2701
        from ray._private.runtime_env.packaging import create_package  # noqa: PLC2701

        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "package.zip"
            create_package(
                str(directory),
                target,
                include_gitignore=_honours_gitignore(),
                excludes=[*ray_constants.get_runtime_env_default_excludes(), *excludes],
                logger=logging.getLogger(__name__),  # not Ray's: its INFO lines come again as Ray uploads
            )
            with zipfile.ZipFile(target) as package:
                num_files = sum(1 for info in package.infolist() if not info.is_dir())
            return _Package(num_files=num_files, num_bytes=target.stat().st_size)
    except (ImportError, TypeError, AttributeError):
        return None


def _upload_limit() -> int:
    try:
        from ray._private.runtime_env.packaging import GCS_STORAGE_MAX_SIZE  # noqa: PLC2701 -- Ray's limit

        return int(GCS_STORAGE_MAX_SIZE)
    except ImportError:
        return 512 * 1024 * 1024


def _size_text(num_bytes: int | None) -> str:
    if num_bytes is None:
        return "size unknown"
    if num_bytes < 1024:
        return f"{num_bytes} B"
    return f"{num_bytes / 1024:.0f} KiB" if num_bytes < 1024 * 1024 else f"{num_bytes / 1024**2:.1f} MiB"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def job_runtime_env(
    options: EnvOptions,
    *,
    attached: bool,
    output_dirs: Sequence[Path] = (),
    upload_limit_bytes: int | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """The job-level runtime env for ``options`` and a few words for the run's first line (""
    when nothing is shipped). A working dir shipped leaves out the runs, sweeps and checkpoints
    directories, ``output_dirs`` (what the command writes, e.g. its ``--runs-dir``) where they lie in
    it, and every virtualenv, through the runtime env's ``excludes`` (after any of ``--runtime-env``'s
    own); Ray itself leaves out ``.git``, ``__pycache__``, ``.venv``, ``venv`` and what ``.gitignore``
    and ``.rayignore`` list. UsageError, before Ray starts, for a bad file or path, or a working dir
    that packs, so left out, to more than ``upload_limit_bytes`` (default: Ray's upload limit)."""
    limit = _upload_limit() if upload_limit_bytes is None else upload_limit_bytes
    runtime_env: dict[str, Any] = {}
    if options.runtime_env is not None:
        runtime_env = _read_runtime_env(options.runtime_env)
    if options.py_modules:
        for path in options.py_modules:
            if not Path(path).exists():
                raise UsageError(f"--py-modules: {path!r} is not a file or directory")
        shipped = [str(Path(p).resolve()) for p in options.py_modules]
        runtime_env["py_modules"] = [*runtime_env.get("py_modules", []), *shipped]  # the file's, then the flag's
    working_dir = options.working_dir
    by_default = ""  # what the first line says of a default: why it was shipped
    if working_dir is None and not runtime_env and attached and not _in_submitted_job_with_working_dir():
        module_path = _env_module_path(options.env)
        here = Path.cwd().resolve()
        if module_path is not None and module_path.is_relative_to(here):
            working_dir, by_default = here, " (it holds the env's module)"
        elif module_path is not None:  # found elsewhere on sys.path (PYTHONPATH): ship the package itself
            runtime_env["py_modules"], by_default = [str(module_path)], " (the env's module)"
    if working_dir is not None:
        if not Path(working_dir).is_dir():
            raise UsageError(f"--working-dir: {str(working_dir)!r} is not a directory")
        runtime_env["working_dir"] = str(Path(working_dir).resolve())
    if not runtime_env:
        return None, ""
    other = sorted(set(runtime_env) - {"working_dir", "py_modules"})  # excludes: a user's own only
    words = []
    if "working_dir" in runtime_env:
        words.append(_ship_working_dir(runtime_env, output_dirs, limit=limit, by_default=by_default))
    if "py_modules" in runtime_env:
        names = ", ".join(Path(p).name for p in runtime_env["py_modules"])
        words.append(f"py_modules {names} shipped{by_default if 'working_dir' not in runtime_env else ''}")
    if other:
        words.append(f"runtime env {', '.join(other)}")
    return runtime_env, "; ".join(words)


def _ship_working_dir(runtime_env: dict[str, Any], output_dirs: Sequence[Path], *, limit: int, by_default: str) -> str:
    """Adds to ``runtime_env``'s excludes what its local working dir never ships; the words saying
    what is shipped. UsageError for a package over ``limit`` bytes."""
    directory = Path(runtime_env["working_dir"])
    if not directory.is_dir():  # a URI or an archive: shipped as it is
        return f"shipped {directory} as the working dir"
    directory = directory.resolve()
    inside = [p.resolve().relative_to(directory) for p in output_dirs if p.resolve().is_relative_to(directory)]
    inside = [p for p in inside if p != Path(".")]
    left_out, venvs = _left_out_dirs(directory, inside)
    ours = [f"{name}/" for name in _ALWAYS_LEFT_OUT]
    ours += [_as_pattern(p) for p in sorted({*inside, *venvs}) if p.name not in _ALWAYS_LEFT_OUT]
    excludes = list(runtime_env.get("excludes") or [])  # a user's own come first and stay
    runtime_env["excludes"] = [*excludes, *(e for e in ours if e not in excludes)]
    package = _package(directory, runtime_env["excludes"])
    size = None if package is None else package.num_bytes
    if size is not None and size > limit:
        flag = "the current directory (it holds the env's module)" if by_default else "--working-dir"
        raise UsageError(
            f"{flag}: {str(directory)!r} packs to {_size_text(size)}, over Ray's upload limit of "
            f"{_size_text(limit)} (leave large files out with .gitignore or .rayignore, or ship only the "
            "modules with --py-modules)"
        )
    what = "size unknown" if package is None else f"{_plural(package.num_files, 'file')}, {_size_text(size)}"
    gone = [f"{p.as_posix()}/" for p in left_out]
    gone += [f"{name}'s {_plural(n, 'pattern')}" for name, n in _ignore_file_patterns(directory).items() if n]
    return f"shipped {directory} as the working dir{by_default}: {what}" + (
        f"; left out {', '.join(gone)}" if gone else ""
    )


def _read_runtime_env(path: Path) -> dict[str, Any]:
    import yaml  # Ray's own dependency

    try:
        value = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"--runtime-env: cannot read {str(path)!r} ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        why = first_line(e) or type(e).__name__
        raise UsageError(f"--runtime-env: {str(path)!r} is not YAML or JSON ({why})") from None
    if not isinstance(value, dict):
        raise UsageError(f"--runtime-env: {str(path)!r} must hold a mapping such as {{working_dir: ., pip: [...]}}")
    return dict(value)
