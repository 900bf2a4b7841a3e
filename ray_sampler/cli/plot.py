"""``ray-sampler plot``: the learning curves of one or more run directories on one figure."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import tyro

from ray_sampler.cli.curve import draw_curves
from ray_sampler.cli.run_dir import read_metrics, run_title
from ray_sampler.errors import ConfigError

__all__ = ["PlotCommand", "plot_runs", "run_plot"]


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
        # Labelled by the directory's name, unless two runs under different roots share it.
        runs[str(run_dir) if run_dir.name in runs else run_dir.name] = rows
    titles = {run_title(Path(d)) for d in run_dirs}
    title = titles.pop() if len(titles) == 1 else "learning curves"
    title += f" ({len(runs)} runs)" if len(runs) > 1 else ""
    return draw_curves(runs, Path(out), title=title, target_return=target_return)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlotCommand:
    """Draw the learning curves of one or more run directories on one figure (mean return of the
    stop rule's window against env steps, min and max shaded)."""

    run_dirs: tyro.conf.Positional[tuple[Path, ...]]
    """Run directories (runs/<algo>-<env>-<time>/) to draw."""
    out: Path = Path("curves.png")
    """Where the PNG goes."""
    target_return: float | None = None
    """A target drawn as a dashed line (none by default)."""


def run_plot(command: PlotCommand) -> Path:
    """``ray-sampler plot``: draws the runs, prints where the PNG went."""
    out = plot_runs(command.run_dirs, command.out, target_return=command.target_return)
    print(f"learning curves of {len(command.run_dirs)} run(s): {out}")
    return out
