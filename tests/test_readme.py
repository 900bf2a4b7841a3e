"""README.md and docs/*.md: every code block runs (or, where it cannot, is checked); links stay inside.

Every fenced block names its language, one of ``python``, ``bash``, ``console``, ``toml`` and ``text``:

- ``python``: run as it stands, each in a fresh interpreter (``sys.executable -c``), one after the
  other, in an empty temporary directory (the blocks write files such as ``replay.parquet``) with
  the repository on ``PYTHONPATH`` and ``RAY_ADDRESS`` set to this test session's own Ray, so a
  block's own ``ray.init()`` attaches to it (a second or two) instead of starting one (about 10 s
  on 2 cores), and never to a cluster another process left running (a block that hands an actor a
  file gives it an absolute path: actors resolve relative ones in their own working directory). A
  block without ``ray.init`` gets ``RAY_ADDRESS=local``. A block must exit 0
  within ``PYTHON_TIMEOUT_S``. Nothing is skipped: a block that would be slow keeps a small budget
  in its own text.
- ``bash``: each line is a command (``\\`` continues a line, ``#`` starts a comment, ``&&`` chains
  commands), the lines of one block run in order in one temporary directory (so ``runs/`` made by
  one command is there for the next). A ``ray-sampler`` line ending in ``&`` runs in the
  background while the block's next lines run (a server and its clients: docs/external.md), and
  the block ends by waiting for it, its exit status checked as any run command's; in such a block,
  ``python examples/SCRIPT ...`` (the clients) is run too, from the repository, and must exit 0.
  Each command is:

  * **run**: ``ray-sampler ...`` (also ``.venv/bin/ray-sampler``), through the virtualenv's
    script, with ``*`` expanded in the block's directory, attached (``RAY_ADDRESS``) to this test
    session's own Ray (``ray_address``: a new local instance, never a cluster another process
    left running) rather than starting one each (about 10 s on 2 cores); how a command starts its
    own Ray is checked by tests/ray_sampler/cli/test_cli.py, and a ``console`` block's commands
    start their own, as shown. The session's actors resolve relative paths in its working
    directory: a command that hands an actor a relative path would need a Ray of its own. Its
    exit status must be 0; for ``train`` and ``train-dqn`` 0 or 1 (a missed target), never 2.
    Training commands get a small budget appended unless they name one: ``train``
    ``--max-iterations 2``, ``train-dqn`` ``--max-env-steps 1500``; so the README's first command,
    the main job, runs for two iterations here. A ``train`` that names more than
    ``MAX_DOC_ITERATIONS`` iterations runs that many (enough to reach a first evaluation every 5).
  * **checked, not run**, where running would install software, start a cloud or Kubernetes
    cluster, or take minutes: ``python3 -m venv DIR`` (only makes a virtualenv); ``pip install``
    (``.`` must be this project and every extra it names must exist in ``pyproject.toml``;
    ``torch==V`` must be the pin ``.ci/run`` installs); the
    test command (the README's second line must be exactly the last line of ``.ci/run``, which
    runs it); ``ray up|down|dashboard|attach FILE`` and ``kubectl apply -f FILE`` (the file must
    exist); ``ray job submit ... -- ENTRYPOINT`` (its ``--working-dir`` must exist and a
    ``ray-sampler`` entrypoint's flags must be options of that command: it names a remote
    cluster); ``python SCRIPT ...`` (the script must exist: the examples have their own tests,
    the benchmarks take minutes); ``export`` (sets the environment of the commands after it);
    ``ray start``, ``ray stop``, ``ray get-auth-token`` and ``ssh`` (they would change this
    machine's Ray, or reach another machine). A block that starts a head (``ray start --head``) is
    run by tests/ray_sampler/cli/test_cli_cluster.py against a head of its own in a temporary
    directory (``ray stop`` there stops only that head); here its ``ray-sampler`` commands, which
    name that head's address, are checked (their options must exist), not run.
  * Anything else fails the test: a new kind of command needs a rule here first.
- ``console``: lines starting with ``$ `` are commands, handled as in ``bash``; the lines after
  one are its output. A command shown with output that says ``error:`` must exit 2, and the
  first output line, up to its first digit (the figures differ between machines), must begin a
  line of what it really printed.
- ``toml``: a ``--config`` file: ``train`` or ``train-dqn`` must read it into a training config
  (without starting anything); or, with a top-level ``algo``, a sweep file of ``ray-sampler tune``:
  it must read as one, and its first trial's options must build the training command; ``text``:
  shown output and diagrams, not code.

No block is skipped. Links: every relative link target is a file or directory of the repository
and an anchor after ``#`` is one of its headings; no ``http://`` or ``https://`` appears outside
code. Every test a page cites (``tests/x.py::test_name``, and the ``::test_name`` or bare
``test_name`` after it) exists. Each page under docs/ is linked from the README.

The README is a front page: at most ``README_MAX_LINES`` lines; the reference is under docs/.
No page (README.md, CHANGELOG.md, docs/*.md) names an issue by number (``issue #12``,
``(#12)``): they describe features, and CHANGELOG.md, which must exist with a section for the
version in ``pyproject.toml``, says what each version added by feature.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "bash", "console", "toml", "text"}
CHANGELOG = ROOT / "CHANGELOG.md"
README_MAX_LINES = 250
PYTHON_TIMEOUT_S = 240
COMMAND_TIMEOUT_S = 240
BUDGETS = {"train": ["--max-iterations", "2"], "train-dqn": ["--max-env-steps", "1500"]}
MAX_DOC_ITERATIONS = 5
"""The most iterations a documented ``train`` runs here (what it names, if fewer)."""
TRAINING = {"train", "train-dqn"}
_BIN = Path(sys.executable).parent


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}-{self.language}"


def _blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, those indented in a list item too (indent removed)."""
    blocks, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^( *)```(\S*)\s*$", lines[i])
        if match:
            indent = match.group(1)
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
            blocks.append(Block(path, i + 1, match.group(2), "\n".join(body) + "\n"))
            i = end
        i += 1
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in _blocks(path)]


def _of(*languages: str) -> list[Block]:
    return [block for block in BLOCKS if block.language in languages]


def _env(ray_address: str = "local") -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["RAY_ADDRESS"] = ray_address
    env["COLUMNS"] = "200"
    return env


# -- commands ------------------------------------------------------------------------------------------


def logical_lines(text: str) -> list[str]:
    return [line for line in re.sub(r"\\\n\s*", " ", text).splitlines() if line.strip()]


def shell_commands(line: str) -> list[list[str]]:
    """The commands of one shell line: split on ``&&``, comments and a trailing ``&`` dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&")
    lexer.whitespace_split, lexer.commenters = True, "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token == "&&":
            commands.append([])
        elif token != "&":
            commands[-1].append(token)
    return [command for command in commands if command]


def _extras() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(pyproject["project"]["optional-dependencies"])


def _help_flags(command: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ray_sampler", command, "--help-all"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return set(re.findall(r"(?<![\w-])-{1,2}[a-z][\w.-]*", proc.stdout))


def _check_ray_sampler_flags(args: list[str]) -> None:
    flags = {arg.split("=", 1)[0] for arg in args[1:] if arg.startswith("-")}
    unknown = flags - _help_flags(args[0])
    assert not unknown, f"ray-sampler {args[0]}: no such options {sorted(unknown)}"


def _run_ray_sampler(args: list[str], cwd: Path, expected_output: list[str], ray_address: str) -> None:
    args = [match for arg in args for match in (sorted(glob.glob(arg, root_dir=cwd)) or [arg] if "*" in arg else [arg])]
    command = args[0] if args else ""
    if command in BUDGETS and "--help" not in args:
        budget_flag = BUDGETS[command][0]
        if budget_flag not in args:
            args = [*args, *BUDGETS[command]]
        elif command == "train" and int(args[args.index(budget_flag) + 1]) > MAX_DOC_ITERATIONS:
            args[args.index(budget_flag) + 1] = str(MAX_DOC_ITERATIONS)
    proc = subprocess.run(
        [str(_BIN / "ray-sampler"), *args],
        cwd=cwd,
        env=_env(ray_address),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    shown = " ".join(["ray-sampler", *args])
    output = proc.stdout + proc.stderr
    if any("error:" in line for line in expected_output):
        assert proc.returncode == 2, f"{shown}: exit {proc.returncode}, a usage error was shown\n{output[-3000:]}"
    else:
        allowed = {0, 1} if command in TRAINING else {0}
        assert proc.returncode in allowed, f"{shown}: exit {proc.returncode}\n{output[-3000:]}"
    if expected_output:
        prefix = re.split(r"\d", expected_output[0], maxsplit=1)[0]
        assert any(line.startswith(prefix) for line in output.splitlines()), f"{shown}: no line starts {prefix!r}"


def _check_exists(path: str, what: str) -> None:
    assert (ROOT / path).exists(), f"{what} names {path!r}, which is not in the repository"


def _handle(
    command: list[str], *, line: str, cwd: Path, expected_output: list[str], ray_address: str, run: bool = True
) -> None:
    while command and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", command[0]):
        command = command[1:]  # environment assignments of this command
    program, args = command[0], command[1:]
    name = Path(program).name
    if name == "ray-sampler" and not run:
        _check_ray_sampler_flags(args)
    elif name == "ray-sampler":
        _run_ray_sampler(args, cwd, expected_output, ray_address)
    elif program == "export":
        assert all("=" in arg for arg in args), line
    elif name.startswith("python") and args[:2] == ["-m", "venv"]:
        assert len(args) == 3, line
    elif name.startswith("python") and args[:2] == ["-m", "pytest"]:
        ci_last_line = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
        assert line.strip() == ci_last_line, "the test command must be exactly what .ci/run runs"
    elif name == "pip" and args[:1] == ["install"]:
        for spec in (arg for arg in args[1:] if not arg.startswith("-")):
            if spec.startswith("torch=="):  # the pinned torch CI installs before the extras
                assert f"pip install -q {spec} " in (ROOT / ".ci" / "run").read_text(), f"{line}: not CI's torch pin"
                continue
            match = re.fullmatch(r"(\.|ray-sampler)(?:\[([\w,-]+)\])?", spec)
            assert match, f"{line}: installs {spec!r}, not this project"
            unknown = set(filter(None, (match.group(2) or "").split(","))) - _extras()
            assert not unknown, f"{line}: no such extras {sorted(unknown)} in pyproject.toml"
    elif name.startswith("python") and args and args[0].endswith(".py"):
        _check_exists(args[0], line)
    elif program == "ray" and args[:1] and args[0] in ("up", "down", "dashboard", "attach"):
        _check_exists(next(arg for arg in args[1:] if not arg.startswith("-")), line)
    elif program == "ray" and args[:2] == ["job", "submit"]:
        if "--working-dir" in args:
            _check_exists(args[args.index("--working-dir") + 1], line)
        entrypoint = args[args.index("--") + 1 :]
        if Path(entrypoint[0]).name == "ray-sampler":
            _check_ray_sampler_flags(entrypoint[1:])
    elif program == "kubectl" and args[:1] == ["apply"]:
        _check_exists(args[args.index("-f") + 1], line)
    elif (program == "ray" and args[:1] in (["start"], ["stop"], ["get-auth-token"])) or program == "ssh":
        pass  # see the module docstring: a head-starting block runs in test_cli_cluster.py
    else:
        raise AssertionError(f"no rule for {line!r}: add one to tests/test_readme.py's docstring and code")


def starts_a_head(block_text: str) -> bool:
    """Whether a bash block starts a Ray head (``ray start --head``; see the module docstring)."""
    commands = (command for line in logical_lines(block_text) for command in shell_commands(line))
    return any(command[:3] == ["ray", "start", "--head"] for command in commands)


def _start_in_background(command: list[str], cwd: Path, ray_address: str) -> subprocess.Popen[str]:
    """A ``ray-sampler`` command ending in ``&``: started with its budget (see the module docstring)."""
    assert Path(command[0]).name == "ray-sampler", f"only ray-sampler runs in the background ({command})"
    args = command[1:]
    if args and args[0] in BUDGETS and BUDGETS[args[0]][0] not in args:
        args = [*args, *BUDGETS[args[0]]]
    return subprocess.Popen(
        [str(_BIN / "ray-sampler"), *args], cwd=cwd, env=_env(ray_address), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _run_example(command: list[str], cwd: Path, ray_address: str) -> None:
    """``python examples/SCRIPT ...`` beside a background command: run from the repository's copy."""
    _check_exists(command[1], " ".join(command))
    proc = subprocess.run(
        [sys.executable, str(ROOT / command[1]), *command[2:]], cwd=cwd, env=_env(ray_address),
        capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, f"{' '.join(command)}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}"


@pytest.mark.parametrize("block", _of("bash"), ids=lambda block: block.id)
def test_bash_block(block: Block, tmp_path: Path, ray_address: str) -> None:
    run = not starts_a_head(block.text)
    background: list[tuple[list[str], subprocess.Popen[str]]] = []
    try:
        for line in logical_lines(block.text):
            code = line.split("#", 1)[0].rstrip()
            commands = shell_commands(line)
            if run and code.endswith("&") and not code.endswith("&&") and Path(commands[-1][0]).name == "ray-sampler":
                (command,) = commands
                background.append((command, _start_in_background(command, tmp_path, ray_address)))
                continue
            for command in shell_commands(line):
                if (
                    background
                    and command[0].startswith("python")
                    and command[1:2]
                    and command[1].startswith("examples/")
                ):
                    _run_example(command, tmp_path, ray_address)
                else:
                    _handle(command, line=line, cwd=tmp_path, expected_output=[], ray_address=ray_address, run=run)
        for command, proc in background:
            output, _ = proc.communicate(timeout=COMMAND_TIMEOUT_S)
            allowed = {0, 1} if command[1] in TRAINING else {0}
            assert proc.returncode in allowed, f"{' '.join(command)} &: exit {proc.returncode}\n{output[-3000:]}"
    finally:
        for _, proc in background:
            proc.kill()


@pytest.mark.parametrize("block", _of("console"), ids=lambda block: block.id)
def test_console_block(block: Block, tmp_path: Path) -> None:
    entries: list[tuple[str, list[str]]] = []
    for line in logical_lines(block.text):
        if line.startswith("$ "):
            entries.append((line[2:], []))
        else:
            assert entries, f"{block.id}: output before any command"
            entries[-1][1].append(line)
    assert entries, f"{block.id}: a console block shows at least one '$ ' command"
    for line, output in entries:
        for command in shell_commands(line):
            _handle(command, line=line, cwd=tmp_path, expected_output=output, ray_address="local")


# -- python --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", _of("python"), ids=lambda block: block.id)
def test_python_block(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    needs_own_ray = "ray.init" not in block.text
    proc = subprocess.run(
        [sys.executable, "-c", block.text],
        cwd=tmp_path,
        env=_env("local" if needs_own_ray else request.getfixturevalue("ray_address")),
        capture_output=True,
        text=True,
        timeout=PYTHON_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"{block.id} failed:\n{proc.stderr[-4000:]}"


@pytest.mark.parametrize("block", _of("toml"), ids=lambda block: block.id)
def test_toml_block(block: Block, tmp_path: Path) -> None:
    from ray_sampler.cli.options import UsageError
    from ray_sampler.cli.train import TrainDQN, TrainPPO, command_from_args

    data = tomllib.loads(block.text)
    path = tmp_path / "config.toml"
    path.write_text(block.text)
    if "algo" in data:  # a sweep file
        from ray_sampler.cli.sweep import check_sweep_file

        check_sweep_file(path)
        return
    errors = []
    for command in (TrainPPO, TrainDQN):
        try:
            command_from_args(command, ["--config", str(path)], prog="ray-sampler").to_config()
            return
        except UsageError as e:
            errors.append(str(e))
    raise AssertionError(f"{block.id} is no --config file of train or train-dqn: {errors}")


def test_every_block_names_a_known_language() -> None:
    unknown = [block.id for block in BLOCKS if block.language not in LANGUAGES]
    assert not unknown, f"fenced blocks without a language from {sorted(LANGUAGES)}: {unknown}"


def test_the_readme_opens_with_the_main_job_and_the_test_command() -> None:
    first = _blocks(ROOT / "README.md")[0]
    lines = logical_lines(first.text)
    assert first.language == "bash" and len(lines) == 2
    assert lines[0].endswith("ray-sampler train")
    assert lines[1] == (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]


# -- links ---------------------------------------------------------------------------------------------


def _prose(path: Path, *, keep_inline: bool = False) -> str:
    """The document without its fenced blocks, and without its inline code unless ``keep_inline``."""
    text = re.sub(r"^ *```.*?^ *```", "", path.read_text(), flags=re.S | re.M)
    return text if keep_inline else re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", _prose(path))
    missing = [t for t in targets if not t.startswith("#") and not (path.parent / t.split("#")[0]).exists()]
    assert not missing, f"{path.name}: links to missing files {missing}"
    for target in targets:
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.is_relative_to(ROOT), f"{path.name}: {target} leaves the repository"
        if anchor:
            assert anchor in _anchors(resolved), f"{path.name}: {target} names no heading of {resolved.name}"


def _anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"^ *```.*?^ *```", "", path.read_text(), flags=re.S | re.M), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_links_outside_the_repository(path: Path) -> None:
    found = re.findall(r"https?://\S+", _prose(path))
    assert not found, f"{path.name}: links outside the repository {found}"


def test_docs_are_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in DOCUMENTS[1:] if f"(docs/{p.name}" not in readme]
    assert not unlinked, f"docs pages not linked from README.md: {unlinked}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_cited_tests_exist(path: Path) -> None:
    """``tests/x.py::name`` (and a following ``::name`` or bare ``test_name``, which refer to the
    last file cited) names a file of the repository and a test or test class in it."""
    cited: Path | None = None
    for span in re.findall(r"`([^`\n]+)`", _prose(path, keep_inline=True)):
        match = re.fullmatch(r"(tests/[\w/]+\.py)?((?:::)?\w+(?:::\w+)*)?", span)
        if not match or not (match.group(1) or "::" in span or span.startswith("test_")):
            continue
        if match.group(1):
            cited = ROOT / match.group(1)
            assert cited.is_file(), f"{path.name} cites {match.group(1)}, which does not exist"
        assert cited is not None, f"{path.name}: {span!r} before any test file is cited"
        source = cited.read_text()
        for name in filter(None, (match.group(2) or "").split("::")):
            assert re.search(rf"^\s*(def|class) {name}\b", source, re.M), f"{path.name}: no {name} in {cited.name}"


# -- the front page and the history -----------------------------------------------------------------

ISSUE_REFERENCE = re.compile(r"\b[Ii]ssues? #?\d|(?<![\w&/#])#\d+\b")
"""``issue #12``, ``issues #12 and #13``, ``issue 12``, ``(#12)``; not an anchor (``file.md#1``)
or an HTML entity (``&#123;``)."""


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move reference text to a page under docs/"
    )


@pytest.mark.parametrize("path", [*DOCUMENTS, CHANGELOG], ids=lambda path: str(path.relative_to(ROOT)))
def test_no_issue_numbers(path: Path) -> None:
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    found = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ISSUE_REFERENCE.search(line)
    ]
    assert not found, f"{path.name} names issues by number (describe the feature instead): {found}"


@pytest.mark.parametrize(
    ("text", "is_reference"),
    [
        ("what issue #12 added", True),
        ("issues #12 and #13", True),
        ("Issue 9", True),
        ("stacked samples (#12)", True),
        ("a fix, #7.", True),
        ("[replay](replay.md#sampling)", False),
        ("the [table](cli.md#1-step)", False),
        ("`<id>#<its end t>`", False),
        ("# 512: 2 runners", False),
        ("&#123;", False),
        ("ray://host:10001", False),
    ],
)
def test_issue_reference_pattern(text: str, is_reference: bool) -> None:
    assert bool(ISSUE_REFERENCE.search(text)) == is_reference


def test_the_changelog_has_the_current_version() -> None:
    assert CHANGELOG.is_file(), "CHANGELOG.md is missing: what each version added, by feature"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    headings = re.findall(r"^## (\S+)", CHANGELOG.read_text(), re.M)
    assert version in headings, f"CHANGELOG.md has no '## {version}' section (it has {headings})"
