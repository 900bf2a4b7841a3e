"""``ray-sampler plot``: the learning curves of one or more run directories on one figure."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import tyro

from ray_sampler.cli.curve import draw_curves
from ray_sampler.cli.run_dir import read_metrics, run_env, run_title
from ray_sampler.errors import ConfigError

__all__ = ["OUT_FILE", "PlotCommand", "default_out", "mixed_envs_warning", "plot_runs", "run_plot"]

OUT_FILE = "curves.png"
"""The figure's name in the runs directory (``ray-sampler plot`` without ``--out``)."""


def plot_runs(run_dirs: Sequence[Path], out: Path, *, target_return: float | None = None) -> Path:
    """Draws each run's ``metrics.csv`` as one curve (labelled with the run directory's name), and
    ``target_return`` as a dashed line if given; saves the PNG at ``out`` and returns it.

    Raises ``ConfigError`` (one line naming the path) for no run, a missing run directory, one without
    ``metrics.csv`` or without a row, or without matplotlib."""
    if not run_dirs:
        raise ConfigError("'run_dirs' must name at least one run directory (got none)")
    runs: dict[str, list[dict[str, int | float]]] = {}
    for run_dir in map(Path, run_dirs):
        if not run_dir.is_dir():
            what = "is a file, not a run directory" if run_dir.exists() else "does not exist"
            raise ConfigError(f"run directory {run_dir} {what}")
        rows = read_metrics(run_dir)
        if not rows:
            raise ConfigError(f"{run_dir} has no iteration in its metrics.csv yet")
        # Labelled by the directory's name (".": the working directory's), unless two runs under
        # different roots share it.
        name = _named(run_dir).name
        runs[str(run_dir) if name in runs else name] = rows
    titles = {run_title(_named(Path(d))) for d in run_dirs}
    title = titles.pop() if len(titles) == 1 else "learning curves"
    title += f" ({len(runs)} runs)" if len(runs) > 1 else ""
    return draw_curves(runs, Path(out), title=title, target_return=target_return)


def _named(path: Path) -> Path:
    """``path`` with a name: ``.`` and ``..`` as the directories they stand for."""
    return Path(os.path.abspath(path)) if path.name in ("", ".", "..") else path


def default_out(run_dirs: Sequence[Path]) -> Path:
    """Where ``ray-sampler plot`` puts its figure without ``--out``: ``curves.png`` in the run
    directories' common parent (the runs directory), relative to the working directory if under it
    (none given: in the working directory)."""
    if not run_dirs:
        return Path(OUT_FILE)
    parents = [os.path.dirname(os.path.abspath(d)) for d in run_dirs]
    out = Path(os.path.commonpath(parents)) / OUT_FILE
    return Path(os.path.relpath(out)) if out.is_relative_to(Path.cwd()) else out


def mixed_envs_warning(run_dirs: Sequence[Path]) -> str | None:
    """A warning line if the runs trained on different envs (their returns are not comparable on one
    axis); None if they share one (a run whose env is unknown is left out)."""
    counts = Counter(env for env in map(run_env, run_dirs) if env is not None)
    if len(counts) < 2:
        return None
    each = ", ".join(f"{env}: {n} run{'s' if n > 1 else ''}" for env, n in sorted(counts.items()))
    return f"warning: the runs trained on different envs ({each}); their returns share one axis"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlotCommand:
    """Draw the learning curves of one or more run directories on one figure (mean return of the
    stop rule's window against env steps, min and max shaded)."""

    run_dirs: tyro.conf.Positional[tuple[Path, ...]]
    """Run directories (runs/<algo>-<env>-<time>/) to draw."""
    out: Path | None = None
    """Where the PNG goes (default: curves.png in the run directories' common parent, the runs
    directory)."""
    target_return: float | None = None
    """A target drawn as a dashed line (none by default)."""


def run_plot(command: PlotCommand) -> Path:
    """``ray-sampler plot``: draws the runs, prints where the PNG went (and a warning on stderr if the
    runs trained on different envs).

    A PNG file among the paths is left out: ``ray-sampler plot runs/*`` run again finds the
    ``runs/curves.png`` it drew before."""
    run_dirs = tuple(d for d in command.run_dirs if not (d.suffix.lower() == ".png" and d.is_file()))
    out = command.out if command.out is not None else default_out(run_dirs)
    out = plot_runs(run_dirs, out, target_return=command.target_return)
    warning = mixed_envs_warning(run_dirs)
    if warning is not None:
        print(warning, file=sys.stderr)
    print(f"learning curves of {len(run_dirs)} run(s): {out}")
    return out
