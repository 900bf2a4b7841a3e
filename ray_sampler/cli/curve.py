"""The learning-curve picture: mean return against env steps, with the window's min/max as a band
(a zero-sum two-agent game: each agent's win rate and the draw rate instead).

One function draws it, for a run's ``curve.png`` (run_dir.py, through ``draw_curves_apart``) and for
``ray-sampler plot`` (plot.py). It uses matplotlib's object API on the Agg canvas, so it never touches
pyplot's global backend.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ray_sampler.errors import ConfigError

__all__ = ["PLOT_EXTRA_HINT", "draw_curves", "draw_curves_apart"]

PLOT_EXTRA_HINT = "pip install 'ray-sampler[plot]'"
"""How to get matplotlib, the optional dependency of every picture."""

_MODULE_COLUMN = "return/module/"
"""A multi-agent run's per-module return columns (``run_dir.RETURN_PREFIX`` + ``module/``)."""
_WIN_COLUMN = "outcome/win/"
"""A two-agent run's win-rate columns, one per agent (``run_dir.OUTCOME_PREFIX`` + ``win/``)."""
_DRAW_COLUMN = "outcome/draw/"
_ZERO_SUM_COLUMN = "outcome/zero_sum"
_AGAINST_COLUMN = "evaluation/win"
"""An evaluation's win rate against the random opponent (``evaluation_opponent``; NaN in other rows)."""
"""1 in a row whose window's episodes all summed to 0 (``run_dir.ZERO_SUM_COLUMN``)."""
_FIGSIZE_IN = (9.0, 5.0)
_DPI = 120


EVALUATION_COLUMN = "evaluation/episode_return_mean"
"""The ``metrics.csv`` column of an evaluation's mean return (NaN in rows that did not evaluate)."""


def draw_curves(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    out: Path,
    *,
    title: str,
    target_return: float | None = None,
) -> Path:
    """Draws each run's rows (``metrics.csv`` rows, as ``read_metrics`` gives them) as one curve
    labelled with its key (a multi-agent run's: the summed return, and a dashed curve per module;
    a run that evaluates: its evaluations' mean return, dotted), and saves the PNG at ``out``;
    returns ``out``. Where every run is a zero-sum two-agent game (its last row says so), the
    summed return is 0 by construction: the picture is each agent's win rate instead, with the draw
    rate dotted, and a run that evaluates against the random opponent its win rate there (no band,
    target or return line).

    Rows before the first finished episode (mean return NaN) are left out. Raises ``ConfigError``
    without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import EngFormatter, PercentFormatter
    except ImportError as e:
        raise ConfigError(f"drawing a learning curve needs matplotlib: {PLOT_EXTRA_HINT}") from e

    fig = Figure(figsize=_FIGSIZE_IN, dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    max_window = 0
    is_rates = bool(runs) and all(rows and rows[-1].get(_ZERO_SUM_COLUMN) == 1 for rows in runs.values())
    for label, rows in runs.items():
        kept = [r for r in rows if not math.isnan(float(r["return_mean"]))]
        steps = [int(r["env_steps"]) for r in kept]
        marker = "o" if len(kept) <= 20 else None  # a short run's points stay visible (one alone has no line)
        max_window = max([max_window, *(int(r["window"]) for r in kept)])
        if is_rates:
            _draw_rates(ax, label, kept, steps, marker)
            continue
        means = [float(r["return_mean"]) for r in kept]
        (line,) = ax.plot(steps, means, linewidth=1.8, marker=marker, markersize=4, label=label)
        ax.fill_between(
            steps,
            [float(r["return_min"]) for r in kept],
            [float(r["return_max"]) for r in kept],
            color=line.get_color(),
            alpha=0.18,
            linewidth=0,
        )
        for column in sorted(c for c in (rows[0] if rows else {}) if c.startswith(_MODULE_COLUMN)):
            values = [float(r[column]) for r in kept]  # a multi-agent run: each module's own return, dashed
            module_label = column.removeprefix(_MODULE_COLUMN)
            ax.plot(steps, values, linewidth=1.2, linestyle="--", label=f"{label}: module {module_label}")
        evaluated = [r for r in rows if not math.isnan(float(r.get(EVALUATION_COLUMN, math.nan)))]
        if evaluated:  # a run that evaluates: the greedy return of each evaluation, a second line
            ax.plot(
                [int(r["env_steps"]) for r in evaluated],
                [float(r[EVALUATION_COLUMN]) for r in evaluated],
                color=line.get_color(), linewidth=1.4, linestyle=":", marker="s", markersize=4,
                label=f"{label}: evaluation",
            )  # fmt: skip
    if target_return is not None and not is_rates:
        ax.axhline(target_return, color="0.3", linestyle="--", linewidth=1.2, label=f"target {target_return:g}")
    ax.set_title(title)
    ax.set_xlabel("env steps")
    window = f"last {max_window} episodes" if max_window else "no episode finished"
    if is_rates:
        ax.set_ylabel(f"share of the {window}")
        ax.set_ylim(-0.02, 1.02)
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    else:
        ax.set_ylabel(f"episode return (mean of the {window})")
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.01)
    legend_title = "zero-sum: win rates, draws dotted" if is_rates else "band: min to max of the window"
    ax.legend(title=legend_title, loc="best", fontsize="small", title_fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    return out


def draw_curves_apart(
    runs: Mapping[str, Sequence[Mapping[str, Any]]],
    out: Path,
    *,
    title: str,
    target_return: float | None = None,
) -> Path:
    """``draw_curves`` in a child Python process, so that matplotlib never loads into this one: a
    training driver's peak memory is its own, not matplotlib's (about 27 MiB, imported once the loop
    is done). The same picture, byte for byte; ``ConfigError`` without matplotlib, as ``draw_curves``."""
    if _find_spec("matplotlib") is None:  # checked here, without importing it
        raise ConfigError(f"drawing a learning curve needs matplotlib: {PLOT_EXTRA_HINT}")
    if not sys.executable:  # an embedded interpreter: no Python to start
        return draw_curves(runs, out, title=title, target_return=target_return)
    request = {"runs": runs, "out": str(out), "title": title, "target_return": target_return}
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _CHILD, __file__, str(Path(__file__).resolve().parents[2])],
        input=json.dumps(request),  # NaN cells pass as NaN; ints stay ints
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == _EXIT_CONFIG_ERROR:
        lines = proc.stderr.strip().splitlines()
        raise ConfigError(lines[-1] if lines else f"drawing a learning curve needs matplotlib: {PLOT_EXTRA_HINT}")
    if proc.returncode != 0:
        raise RuntimeError(f"drawing {out} failed in its child process: {proc.stderr.strip()[-600:]}")
    return out


_EXIT_CONFIG_ERROR = 2
"""The child's exit status for a ``ConfigError`` (its message: the last line on its stderr)."""
_CHILD = "import runpy, sys; sys.path.insert(0, sys.argv[2]); runpy.run_path(sys.argv[1], run_name='__main__')"
"""Runs this file as ``__main__``, with this process's ``ray_sampler`` first on the path, without
importing ``ray_sampler.cli`` (Ray, gymnasium) in the child."""


def _find_spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except ValueError:  # in sys.modules without a spec
        return None


def _draw_from_stdin() -> None:
    """The child's side of ``draw_curves_apart``: the request as JSON on stdin."""
    request = json.loads(sys.stdin.read())
    try:
        draw_curves(
            request["runs"], Path(request["out"]), title=request["title"], target_return=request["target_return"]
        )
    except ConfigError as e:
        print(e, file=sys.stderr)
        raise SystemExit(_EXIT_CONFIG_ERROR) from None


def _draw_rates(ax: Any, label: str, rows: Sequence[Mapping[str, Any]], steps: list[int], marker: str | None) -> None:
    """A zero-sum run's curves: each agent's win rate, and the draw rate (the first agent's: a drawn
    game is drawn for both), dotted."""
    columns = [c for c in (rows[0] if rows else {}) if c.startswith(_WIN_COLUMN)]
    for column in columns:
        agent = column.removeprefix(_WIN_COLUMN)
        wins = [float(r[column]) for r in rows]
        ax.plot(steps, wins, linewidth=1.8, marker=marker, markersize=4, label=f"{label}: {agent} won")
    if columns:
        draws = [float(r[f"{_DRAW_COLUMN}{columns[0].removeprefix(_WIN_COLUMN)}"]) for r in rows]
        ax.plot(steps, draws, color="0.4", linewidth=1.2, linestyle=":", label=f"{label}: drawn")
    evaluated = [r for r in rows if not math.isnan(float(r.get(_AGAINST_COLUMN, math.nan)))]
    if evaluated:  # evaluations against the random opponent: the trained side's win rate
        ax.plot(
            [int(r["env_steps"]) for r in evaluated], [float(r[_AGAINST_COLUMN]) for r in evaluated],
            color="black", linewidth=1.4, linestyle="-.", marker="s", markersize=4,
            label=f"{label}: evaluation, won against random",
        )  # fmt: skip


if __name__ == "__main__":
    _draw_from_stdin()
