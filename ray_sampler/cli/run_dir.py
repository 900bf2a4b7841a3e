"""A training run's directory: ``config.toml``, ``metrics.csv``, optional TensorBoard events and ``curve.png``.

``runs/<algo>-<env>-<YYYYmmdd-HHMMSS>/`` (``<algo>`` the algorithm's name: ppo, a2c, appo, impala, a3c,
dqn) holds the run's resolved config (written once, atomically),
one ``metrics.csv`` row per iteration (flushed as it is written, so a killed run keeps its rows), with
``--tensorboard`` the same scalars as TensorBoard events, and at the end its learning curve.

TOML has no null: ``config.toml`` leaves out the keys whose value is None and lists their dotted
paths in a top-level ``none`` array, which ``load_config`` puts back.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
import secrets
import tomllib
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

import tomli_w

from ray_sampler.cli.curve import PLOT_EXTRA_HINT, draw_curves_apart
from ray_sampler.errors import ConfigError

if TYPE_CHECKING:  # learner (and so Ray) loads only in a training command; records come from it
    from learner.metrics import IterationRecord

__all__ = [
    "ASYNC_PREFIX",
    "CONFIG_FILE",
    "CURVE_FILE",
    "EVALUATION_PREFIX",
    "LOSS_PREFIX",
    "METRICS_FILE",
    "NONE_KEY",
    "OUTCOME_PREFIX",
    "RETURN_PREFIX",
    "TENSORBOARD_EXTRA_HINT",
    "ZERO_SUM_COLUMN",
    "RunDirectory",
    "load_config",
    "read_metrics",
    "run_env",
    "run_title",
]

CONFIG_FILE = "config.toml"
METRICS_FILE = "metrics.csv"
CURVE_FILE = "curve.png"
NONE_KEY = "none"
"""The top-level key of ``config.toml`` listing the dotted paths of the config's None values."""
LOSS_PREFIX = "loss/"
"""The prefix of a loss term's column in ``metrics.csv`` and its TensorBoard tag (``loss/vf_loss``)."""
RETURN_PREFIX = "return/"
"""Multi-agent runs' columns of ``IterationRecord.returns_by``: ``return/module/<id>``, ``return/agent/<id>``."""
OUTCOME_PREFIX = "outcome/"
"""Two-agent runs' columns of ``IterationRecord.outcomes`` (``outcome/win/<agent>``, ``outcome/draw/<agent>``,
``outcome/loss/<agent>``: shares of the window, also TensorBoard tags) and ``outcome/zero_sum`` (1: the
window's episodes all summed to 0; metrics.csv only). Not ``loss/<agent>``: that prefix is the loss terms'."""
ZERO_SUM_COLUMN = f"{OUTCOME_PREFIX}zero_sum"
ASYNC_PREFIX = "async/"
"""The asynchronous optimizers' runs (APPO, IMPALA, A3C): ``IterationRecord.asynchronous``' columns
(``async/policy_lag_mean``, ``_max``, ``async/num_env_steps_dropped``, ``_unused``) and TensorBoard
tags (with ``async/num_env_steps_lost`` there)."""
EVALUATION_PREFIX = "evaluation/"
"""Runs that evaluate: ``IterationRecord.evaluation``'s columns (``evaluation/episode_return_mean``)."""
TENSORBOARD_EXTRA_HINT = "pip install 'ray-sampler[tensorboard]'"
"""How to get tensorboardX, the optional dependency of ``tensorboard=True``."""

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_RUN_NAME = re.compile(r"^(?P<algo>[^-]+)-(?P<env>.+)-\d{8}-\d{6}(?:-\d+)?$")


class RunDirectory:
    """A run directory open for writing; make one with ``create`` (new run) or ``open`` (resume).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> run = RunDirectory.create(root, "ppo", "CartPole-v1", {"lr": 3e-4, "grad_clip": None},
    ...                           started_at=datetime(2026, 1, 2, 3, 4, 5))
    >>> run.path.name
    'ppo-CartPole-v1-20260102-030405'
    >>> load_config(run.path)
    {'lr': 0.0003, 'grad_clip': None}
    >>> run.close()
    'no learning curve: no iteration finished'
    >>> import shutil; shutil.rmtree(root)
    """

    def __init__(self, path: Path, *, algo: str | None, env: str | None, tensorboard: bool) -> None:
        """Use ``create`` or ``open``."""
        self.path = path
        """The run directory."""
        self.algo = algo
        """The algorithm's name (None: unknown, a directory not named by ``create``)."""
        self.env = env
        """The env's name (None: unknown)."""
        self._columns: list[str] | None = None
        self._csv_file: IO[str] | None = None
        self._csv: Any = None  # csv.writer; its type is private to the csv module
        self._tb_writer: Any = _tensorboard_writer(path) if tensorboard else None
        self._is_closed = False
        metrics = path / METRICS_FILE
        if metrics.exists() and metrics.stat().st_size > 0:
            with metrics.open(newline="") as f:
                self._columns = next(csv.reader(f))

    @classmethod
    def create(
        cls,
        root: Path | str,
        algo: str,
        env: str,
        config: Mapping[str, Any],
        *,
        tensorboard: bool = False,
        started_at: datetime | None = None,
    ) -> RunDirectory:
        """Makes ``root/<algo>-<env>-<YYYYmmdd-HHMMSS>/`` (``-2``, ``-3``, ... appended if taken) and
        writes ``config`` (a nested dict of str/int/float/bool/list/None) to its ``config.toml``.

        ``started_at`` names the directory (default: now, local time). ``tensorboard``: also write
        TensorBoard events (needs tensorboardX). Raises ``ConfigError`` before making anything if
        ``config`` holds a value TOML cannot keep."""
        text = _config_toml(config)
        if tensorboard:
            _tensorboard_writer_class()  # raises without tensorboardX, before any directory is made
        stamp = (started_at or datetime.now()).strftime("%Y%m%d-%H%M%S")
        base = f"{_safe_name(algo)}-{_safe_name(env)}-{stamp}"
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        path = _make_unique_dir(root, base)
        try:
            _write_atomic(path / CONFIG_FILE, text)
        except BaseException:
            path.rmdir()  # a run directory always has its config
            raise
        return cls(path, algo=algo, env=env, tensorboard=tensorboard)

    @classmethod
    def open(cls, path: Path | str, *, tensorboard: bool = False) -> RunDirectory:
        """Reopens an existing run directory (to resume a run): rows go on at the end of its
        ``metrics.csv``, under its header. Raises ``ConfigError`` if ``path`` holds no ``config.toml``."""
        path = Path(path)
        if not (path / CONFIG_FILE).is_file():
            raise ConfigError(f"{path} is not a run directory: it has no {CONFIG_FILE}")
        match = _RUN_NAME.match(path.name)
        algo, env = (match["algo"], match["env"]) if match else (None, None)
        return cls(path, algo=algo, env=env, tensorboard=tensorboard)

    def drop_rows_after(self, iteration: int) -> int:
        """Removes the ``metrics.csv`` rows of iterations after ``iteration`` (a resumed run carries
        on from its checkpoint's); returns how many were removed. Rewritten atomically."""
        if not self.metrics_path.is_file():
            return 0
        lines = self.metrics_path.read_text(encoding="utf-8").splitlines(keepends=True)
        if not lines:
            return 0
        column = next(csv.reader([lines[0]])).index("iteration")
        kept = [line for line in lines[1:] if int(next(csv.reader([line]))[column]) <= iteration]
        _write_atomic(self.metrics_path, "".join([lines[0], *kept]))
        return len(lines) - 1 - len(kept)

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def curve_path(self) -> Path:
        return self.path / CURVE_FILE

    @property
    def title(self) -> str:
        """The learning curve's title."""
        return run_title(self.path) if self.algo is None or self.env is None else f"{self.algo} on {self.env}"

    def append(self, record: IterationRecord) -> None:
        """Adds ``record`` as a row of ``metrics.csv`` (flushed) and, with TensorBoard, as scalars
        against its env steps.

        The columns are every field of the record but ``losses``, ``returns_by``, ``outcomes``,
        ``is_zero_sum``, ``asynchronous`` and ``evaluation``, then (multi-agent) ``return/module/<id>``
        and ``return/agent/<id>``, then (two agents) ``outcome/<win|draw|loss>/<agent>`` and
        ``outcome/zero_sum``, then (an asynchronous optimizer's run) ``async/<key>``, then (a run that evaluates)
        ``evaluation/<key>``, then ``loss/<term>`` per loss term of the
        first record the file gets; a term missing from a later record is an empty cell, and a
        term the first record did not have goes to TensorBoard only."""
        if self._is_closed:
            raise RuntimeError(f"RunDirectory {self.path} is closed: append() after close()")
        row = _row(record)
        if self._csv is None:
            is_new = self._columns is None
            self._csv_file = self.metrics_path.open("a", newline="")
            self._csv = csv.writer(self._csv_file)
            if self._columns is None:
                self._columns = list(row)
            if is_new:
                self._csv.writerow(self._columns)
        assert self._csv_file is not None and self._columns is not None
        self._csv.writerow([_cell(row.get(c)) for c in self._columns])
        self._csv_file.flush()
        if self._tb_writer is not None:
            _add_scalars(self._tb_writer, record)

    def row(self, record: IterationRecord) -> dict[str, Any]:
        """``record`` as the row ``append`` writes: metrics.csv's columns and values (None: an empty cell)."""
        row = _row(record)
        return {c: row.get(c) for c in (self._columns or list(row))}

    def close(self, *, target_return: float | None = None) -> str:
        """Closes the files and draws ``curve.png`` (with ``target_return`` as a dashed line);
        returns one line for the log: where the curve is, or how to get it (without matplotlib)."""
        if self._is_closed:
            raise RuntimeError(f"RunDirectory {self.path} is closed: close() twice")
        self._is_closed = True
        if self._csv_file is not None:
            self._csv_file.close()
        if self._tb_writer is not None:
            self._tb_writer.close()
        rows = read_metrics(self.path) if self.metrics_path.exists() else []
        if not rows:
            return "no learning curve: no iteration finished"
        try:
            draw_curves_apart({self.path.name: rows}, self.curve_path, title=self.title, target_return=target_return)
        except ConfigError:
            return f"no learning curve without matplotlib: {PLOT_EXTRA_HINT}, then ray-sampler plot {self.path}"
        return f"learning curve: {self.curve_path}"

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._is_closed:
            self.close()


def write_config(path: Path | str, config: Mapping[str, Any]) -> None:
    """Replaces the ``config.toml`` of the run directory ``path`` with ``config`` (atomically): a run
    resumed with other values of options that may change mid-run (a population-based training
    trial that took another trial's checkpoint)."""
    _write_atomic(Path(path) / CONFIG_FILE, _config_toml(config))


def load_config(path: Path | str) -> dict[str, Any]:
    """The config a run directory's ``config.toml`` holds (``path``: the directory or the file),
    exactly as ``RunDirectory.create`` got it, None values included."""
    path = Path(path)
    file = path / CONFIG_FILE if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"no run config at {file}")
    with file.open("rb") as f:
        data = tomllib.load(f)
    for dotted in data.pop(NONE_KEY, []):
        *parents, key = dotted.split(".")
        table = data
        for name in parents:
            table = table.setdefault(name, {})
        table[key] = None
    return data


def read_metrics(path: Path | str) -> list[dict[str, int | float]]:
    """The rows of a run directory's ``metrics.csv`` (``path``: the directory or the file), one dict
    per iteration keyed by column; counts are ints, the rest floats, an empty cell NaN."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"run directory {path} does not exist")
    file = path / METRICS_FILE if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"{path} has no {METRICS_FILE} (not a run directory, or no iteration finished yet)")
    with file.open(newline="") as f:
        return [{k: _parse_cell(v) for k, v in row.items()} for row in csv.DictReader(f)]


def run_env(path: Path | str) -> str | None:
    """The env a run directory's run trained on: its ``config.toml``'s ``env``, else the one its name
    gives (``ppo-CartPole-v1-<time>``); None if neither says."""
    path = Path(path)
    try:
        env = load_config(path).get("env")
    except (OSError, ConfigError, tomllib.TOMLDecodeError):
        env = None
    if isinstance(env, str):
        return env
    match = _RUN_NAME.match(path.name)
    return match["env"] if match else None


def run_title(path: Path) -> str:
    """A run's title from its directory's name (``ppo on CartPole-v1``), else the name itself."""
    match = _RUN_NAME.match(path.name)
    return f"{match['algo']} on {match['env']}" if match else path.name


def _safe_name(name: str) -> str:
    """``name`` as a piece of a directory name (``ALE/Pong-v5`` -> ``ALE_Pong-v5``)."""
    return _UNSAFE_NAME_CHARS.sub("_", name).strip("_") or "_"


def _make_unique_dir(root: Path, base: str) -> Path:
    """Makes ``root/base``, or ``base-2``, ``base-3``, ... if taken (mkdir fails on a taken name, so two
    runs started in the same second never share one)."""
    for n in range(1, 10_000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ConfigError(f"no free run directory name {base}-N under {root}")


def _config_toml(config: Mapping[str, Any]) -> str:
    """The text of ``config.toml``: ``config`` less its None values, listed under ``none``."""
    if NONE_KEY in config:
        raise ConfigError(f"config key {NONE_KEY!r} is reserved in {CONFIG_FILE} (it lists the None values)")
    none_paths: list[str] = []
    kept = _without_none(config, "", none_paths)
    header = f"# The resolved config of this run. TOML has no null: `{NONE_KEY}` lists the keys whose value is None.\n"
    body: dict[str, Any] = {NONE_KEY: none_paths, **kept} if none_paths else kept
    return header + tomli_w.dumps(body)


def _without_none(table: Mapping[str, Any], prefix: str, none_paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if not isinstance(key, str) or not key or "." in key:
            raise ConfigError(f"config keys must be non-empty strings without '.' (got {path!r})")
        if value is None:
            none_paths.append(path)
        elif isinstance(value, Mapping):
            out[key] = _without_none(value, f"{path}.", none_paths)
        else:
            _check_toml_value(value, path)
            out[key] = value
    return out


def _check_toml_value(value: Any, path: str) -> None:
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_toml_value(item, f"{path}[{i}]")
    elif not isinstance(value, str | int | float | bool):
        what = "None (TOML has no null; None is kept only as a table's value)" if value is None else type(value)
        raise ConfigError(f"config value {path!r} must be a str, int, float, bool or a list of them (got {what})")


def _write_atomic(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` through a temp file in the same directory, fsynced then renamed
    over it, so a reader never sees half a file; the temp file is gone whatever happens.

    The file gets the mode of the file it replaces, or a new file's (0666 less the umask: 0644 as a
    rule, as ``metrics.csv`` and ``curve.png`` get), not ``mkstemp``'s 0600."""
    fd, tmp = _create_temp(path)
    try:
        if path.exists():
            os.fchmod(fd, path.stat().st_mode & 0o777)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # the rename itself survives a crash once the directory is synced
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new, empty temp file beside ``path``, opened for writing, with the mode ``open()`` gives a
    new file (the umask applies; ``tempfile.mkstemp`` would make it 0600 whatever the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # 48 random bits taken: try another name
            continue
    raise FileExistsError(f"no free temp file name beside {path}")


def _row(record: IterationRecord) -> dict[str, Any]:
    nested = ("losses", "returns_by", "outcomes", "is_zero_sum", "asynchronous", "evaluation")
    kept = [f.name for f in dataclasses.fields(record) if f.name not in nested]
    row = {name: getattr(record, name) for name in kept}
    row.update({f"{RETURN_PREFIX}{key}": value for key, value in record.returns_by.items()})
    if record.outcomes:
        row.update({f"{OUTCOME_PREFIX}{key}": value for key, value in record.outcomes.items()})
        row[ZERO_SUM_COLUMN] = int(record.is_zero_sum)
    row.update({f"{ASYNC_PREFIX}{key}": _count_or_value(key, value) for key, value in record.asynchronous.items()})
    row.update({f"{EVALUATION_PREFIX}{key}": value for key, value in record.evaluation.items()})
    row.update({f"{LOSS_PREFIX}{name}": value for name, value in record.losses.items()})
    return row


def _count_or_value(key: str, value: float) -> int | float:
    """A count (``num_*``) as an int cell, anything else as it is."""
    return int(value) if key.startswith("num_") else value


def _cell(value: Any) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def _parse_cell(text: str) -> int | float:
    if text == "":
        return math.nan
    try:
        return int(text)
    except ValueError:
        return float(text)


def _tensorboard_writer_class() -> Any:
    try:
        from tensorboardX import SummaryWriter
    except ImportError as e:
        raise ConfigError(f"'tensorboard' needs tensorboardX: {TENSORBOARD_EXTRA_HINT}") from e
    return SummaryWriter


def _tensorboard_writer(path: Path) -> Any:
    return _tensorboard_writer_class()(logdir=str(path))


def _add_scalars(writer: Any, record: IterationRecord) -> None:
    """The record's returns, throughput and loss terms against its env steps (NaN left out: TensorBoard
    draws it as a spike)."""
    scalars = {
        "return/mean": record.return_mean,
        "return/min": record.return_min,
        "return/max": record.return_max,
        "throughput/env_steps_per_s": record.env_steps_per_s,
        **{f"{RETURN_PREFIX}{key}": value for key, value in record.returns_by.items()},
        **{f"{OUTCOME_PREFIX}{key}": value for key, value in record.outcomes.items()},
        **{f"{ASYNC_PREFIX}{key}": value for key, value in record.asynchronous.items()},
        **({f"{ASYNC_PREFIX}num_env_steps_lost": float(record.num_env_steps_lost)} if record.asynchronous else {}),
        **{f"{EVALUATION_PREFIX}{key}": value for key, value in record.evaluation.items()},
        **{f"{LOSS_PREFIX}{name}": value for name, value in record.losses.items()},
    }
    for tag, value in scalars.items():
        if not math.isnan(value):
            writer.add_scalar(tag, value, global_step=record.env_steps)
    writer.flush()
