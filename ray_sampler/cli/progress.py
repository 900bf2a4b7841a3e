"""The progress display of a training run: a live line on a terminal, one plain line per iteration elsewhere.

A training loop's ``on_iteration`` callback feeds it ``IterationRecord``\\s; ``log`` prints a line above
the live display (runner restarts, warnings); ``close`` ends it with a summary block.

>>> import io
>>> out = io.StringIO()
>>> with TrainingProgress(out, plain=True) as progress:
...     progress.log("runner 2 died; restarted")
>>> out.getvalue()
'runner 2 died; restarted\\n'
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ray_sampler.validate import check_int

if TYPE_CHECKING:  # learner (and so Ray) loads only in a training command; records come from it
    from learner.metrics import IterationRecord, TrainResult

__all__ = ["Outcome", "RunSummary", "TrainingProgress", "format_duration", "format_rate", "iteration_line"]


class Outcome(str, enum.Enum):
    """How a run ended."""

    TARGET_REACHED = "target reached"
    TARGET_MISSED = "target missed"
    """It had a target and used its budget without reaching it."""
    BUDGET_USED = "budget used"
    """It had no target and used its budget."""
    INTERRUPTED = "interrupted"
    """It stopped before its loop returned (Ctrl-C)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSummary:
    """What ``TrainingProgress.close`` prints at the end of a run."""

    outcome: Outcome
    """How the run ended."""
    return_mean: float
    """Mean return over the last ``window`` finished episodes (NaN if none finished)."""
    window: int
    """Finished episodes that mean is over."""
    target_return: float | None = None
    """The run's target (None: none)."""
    env_steps: int
    """Env steps trained on in all."""
    episodes: int
    """Episodes finished in all."""
    elapsed_s: float
    """Wall time of the run."""
    num_env_runner_restarts: int = 0
    """Runner actors replaced."""
    num_env_steps_lost: int = 0
    """Env steps lost with failed actors."""
    run_dir: Path | None = None
    """The run directory (None: the run kept none)."""
    notes: tuple[str, ...] = ()
    """Lines printed last (e.g. where the learning curve is)."""
    summed: bool = False
    """A multi-agent run: the return is the sum over every agent."""
    stopped_by: str = ""
    """What ended the run (``--max-env-steps 500,000 (the first budget reached)``); empty: not known."""
    asynchronous: dict[str, float] = dataclasses.field(default_factory=dict)
    """An asynchronous optimizer's run (APPO, IMPALA, A3C): ``IterationRecord.asynchronous``' figures
    at its end; empty for the others."""
    outcomes: dict[str, float] = dataclasses.field(default_factory=dict)
    """A two-agent run: each agent's win, draw and loss rates at its end (``IterationRecord.outcomes``)."""
    is_zero_sum: bool = False
    """A zero-sum two-agent game: the headline gives ``outcomes`` (its summed return is 0 by construction)."""
    evaluation: dict[str, float] = dataclasses.field(default_factory=dict)
    """The run's last evaluation (``IterationRecord.evaluation``; empty: none)."""
    stop_on_evaluation: bool = False
    """The target applied to the evaluations: the headline gives the last one."""

    @classmethod
    def of(
        cls,
        result: TrainResult | None,
        last: IterationRecord | None,
        *,
        run_dir: Path | None = None,
        notes: tuple[str, ...] = (),
        stopped_by: str = "",
        evaluation: Mapping[str, float] | None = None,
        stop_on_evaluation: bool = False,
    ) -> RunSummary:
        """The summary of a run from what its loop returned (None: it was interrupted) and its last
        iteration's record (totals since the run began; None: no iteration finished). An asynchronous
        run's figures are the result's (its unused env steps counted to the end), else the last record's."""
        if result is None:
            outcome = Outcome.INTERRUPTED
        elif result.reached:
            outcome = Outcome.TARGET_REACHED
        else:
            outcome = Outcome.BUDGET_USED if result.target_return is None else Outcome.TARGET_MISSED
        if last is not None:
            env_steps, elapsed_s = last.env_steps, last.elapsed_s
        else:
            env_steps, elapsed_s = (result.env_steps, result.seconds) if result is not None else (0, 0.0)
        return cls(
            outcome=outcome,
            return_mean=result.mean_return if result is not None else last.return_mean if last else math.nan,
            window=last.window if last is not None else 0,
            target_return=result.target_return if result is not None else None,
            env_steps=env_steps,
            episodes=last.episodes if last is not None else 0,
            elapsed_s=elapsed_s,
            num_env_runner_restarts=last.num_env_runner_restarts if last is not None else 0,
            num_env_steps_lost=last.num_env_steps_lost if last is not None else 0,
            run_dir=run_dir,
            notes=notes,
            summed=bool(last.returns_by) if last is not None else False,
            stopped_by=stopped_by,
            asynchronous=(result.asynchronous if result is not None else {}) or (last.asynchronous if last else {}),
            outcomes=last.outcomes if last is not None else {},
            is_zero_sum=last.is_zero_sum if last is not None else False,
            evaluation=dict(evaluation or {}),
            stop_on_evaluation=stop_on_evaluation,
        )

    def headline(self) -> str:
        """The first line: the outcome, with the mean return it ended on (a zero-sum game: the rates).

        >>> RunSummary(outcome=Outcome.TARGET_REACHED, return_mean=487.25, window=100, target_return=475.0,
        ...            env_steps=1, episodes=1, elapsed_s=1.0).headline()
        'Target reached: mean return 487.2 over the last 100 episodes (target 475)'
        """
        word = "summed" if self.summed else "mean"
        figure = _rates(self.outcomes) if self.is_zero_sum else f"{word} return {_num(self.return_mean)}"
        mean = f"{figure} over the last {self.window} episodes" if self.window else ""
        target = f"target {self.target_return:g}" if self.target_return is not None else ""
        evaluated = self.evaluation.get("episode_return_mean", math.nan)
        if self.stop_on_evaluation and not math.isnan(evaluated):  # the target was on the evaluations
            from learner.metrics import format_against  # loaded already: the figures came from a learner's loop

            against = format_against(self.evaluation)
            mean = f"last evaluation {against + ', ' if against else ''}return {_num(evaluated)}"
        text = self.outcome.value.capitalize() + (f": {mean}" if mean else ": no episode finished")
        return text + (f" ({target})" if target else "")

    def rows(self) -> list[tuple[str, str]]:
        """The block's (label, value) rows after the headline."""
        rate = self.env_steps / self.elapsed_s if self.elapsed_s > 0 else math.nan
        rows = [
            ("env steps", f"{self.env_steps:,}"),
            ("episodes", f"{self.episodes:,}"),
            ("wall time", format_duration(self.elapsed_s)),
            ("throughput", f"{format_rate(rate)} env steps/s"),
        ]
        if self.stopped_by:
            rows.append(("stopped by", self.stopped_by))
        if self.asynchronous:
            lag = self.asynchronous
            rows.append(
                ("policy lag", f"mean {_num(lag['policy_lag_mean'])}, max {_whole(lag['policy_lag_max'])} updates")
            )
            dropped, unused = int(lag["num_env_steps_dropped"]), int(lag["num_env_steps_unused"])
            rows.append(
                ("not learned", f"{dropped:,} dropped, {unused:,} unused, {self.num_env_steps_lost:,} lost env steps")
            )
        if self.num_env_runner_restarts or self.num_env_steps_lost:
            restarts = _count(self.num_env_runner_restarts, "env runner restart")
            rows.append(("failures", f"{restarts}, {_count(self.num_env_steps_lost, 'env step')} lost"))
        if self.run_dir is not None:
            rows.append(("run dir", str(self.run_dir)))
        return rows


class TrainingProgress:
    """Shows a run's progress on ``stream`` (default: stdout).

    ``plain``: None decides from the stream (a live display if ``stream.isatty()``, else one line per
    iteration, flushed); True forces plain lines; False forces the live display. The budgets, if
    known, are ``total_env_steps`` and ``total_iterations`` (the bar shows the one nearer its end)."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        total_env_steps: int | None = None,
        total_iterations: int | None = None,
        plain: bool | None = None,
    ) -> None:
        self._total_env_steps = (
            None if total_env_steps is None else check_int("total_env_steps", total_env_steps, minimum=1)
        )
        self._total_iterations = (
            None if total_iterations is None else check_int("total_iterations", total_iterations, minimum=1)
        )
        self._stream = stream if stream is not None else sys.stdout
        is_tty = self._stream.isatty() if plain is None else not plain
        self._console = Console(file=self._stream, force_terminal=True) if is_tty else None
        self._live: Live | None = None
        self._last: IterationRecord | None = None
        self._last_evaluation = math.nan  # the newest evaluation's mean return (NaN: none yet)
        self._last_against = ""  # the newest evaluation against an opponent, in words (empty: none)
        self._last_at = time.monotonic()
        self._spinner = Spinner("dots", style="cyan")
        self._outcome: Outcome | None = None  # set by close(summary): the display's last frame shows it
        self._is_closed = False

    def _evaluation_words(self) -> str:
        return f"evaluation {self._last_against or _num(self._last_evaluation)}"

    @property
    def is_live(self) -> bool:
        """Whether it draws a live display (else plain lines)."""
        return self._console is not None

    def update(self, record: IterationRecord) -> None:
        """Shows an iteration's record: redraws the live display, or prints its line."""
        self._check_open("update")
        self._last, self._last_at = record, time.monotonic()
        if not math.isnan(record.evaluation.get("episode_return_mean", math.nan)):
            self._last_evaluation = record.evaluation["episode_return_mean"]
            self._last_against = _against(record)
        if self._console is None:
            self._print_plain(
                iteration_line(record, total_env_steps=self._total_env_steps, total_iterations=self._total_iterations)
            )
        else:
            self._start_live().refresh()

    def log(self, line: str) -> None:
        """Prints ``line`` (above the live display)."""
        self._check_open("log")
        if self._console is None:
            self._print_plain(line)
        else:
            self._start_live()
            self._console.print(Text(line), soft_wrap=True)

    def close(self, summary: RunSummary | None = None) -> None:
        """Ends the live display and prints ``summary``'s block. With a summary, the display's last
        frame says how the run ended: a run that ended by itself (target reached early, target
        missed, budget used) shows its bar full; an interrupted one keeps its bar where it stopped."""
        self._check_open("close")
        self._is_closed = True
        self._outcome = summary.outcome if summary is not None else None
        if self._live is not None:  # stop() draws the last frame
            self._live.stop()
        if summary is None:
            return
        if self._console is None:
            lines = [summary.headline(), *(f"  {label:<11} {value}" for label, value in summary.rows()), *summary.notes]
            self._print_plain("\n".join(lines))
        else:
            self._console.print(_summary_panel(summary))

    def __enter__(self) -> TrainingProgress:
        if self._console is not None:
            self._start_live()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._is_closed:
            self.close()

    def _check_open(self, what: str) -> None:
        if self._is_closed:
            raise RuntimeError(f"TrainingProgress is closed: {what}() after close()")

    def _print_plain(self, text: str) -> None:
        print(text, file=self._stream, flush=True)

    def _start_live(self) -> Live:
        if self._live is None:
            self._live = Live(get_renderable=self._render, console=self._console, refresh_per_second=4, transient=False)
            self._live.start()
        return self._live

    def _render(self) -> RenderableType:
        record = self._last
        if record is None:
            waiting = Table.grid(padding=(0, 1))
            waiting.add_row(self._spinner, Text("waiting for the first iteration"))
            return waiting
        steps = f"{record.env_steps:,}"
        total: int | None = None  # None: no budget known, a pulsing bar
        done = 0
        if self._total_env_steps is not None:
            steps += f" / {self._total_env_steps:,}"
            done, total = record.env_steps, self._total_env_steps
        if self._total_iterations is not None and (
            total is None or record.iteration / self._total_iterations > done / total
        ):
            done, total = record.iteration, self._total_iterations
        outcome = self._outcome
        percent = f"{min(done / total, 1.0):.0%} " if total else ""
        if outcome is not None and outcome is not Outcome.INTERRUPTED:  # it ended by itself: the bar is full
            done, total, percent = 1, 1, ""
        iteration = f"iter {record.iteration}" + (f"/{self._total_iterations}" if self._total_iterations else "")
        label = Text(f"{percent}{iteration} · {steps} env steps")
        if outcome is None:  # running: the clock goes on between iterations
            status: RenderableType = self._spinner
            elapsed = record.elapsed_s + (time.monotonic() - self._last_at)
        else:
            mark, style = _OUTCOME_MARKS[outcome]
            status, elapsed = Text(mark, style=style), record.elapsed_s
            label = Text.assemble((outcome.value, style), ": ", label)
        top = Table.grid(padding=(0, 1))
        top.add_row(status, ProgressBar(total=total, completed=min(done, total or 0), width=30), label)
        figures = Text("  ").join(
            [
                Text(f"{format_rate(record.env_steps_per_s)} steps/s"),
                Text(f"{record.episodes:,} episodes"),
                *_return_figures(record),
                *([] if math.isnan(self._last_evaluation) else [Text(self._evaluation_words())]),
                *([Text(_asynchronous(record))] if record.asynchronous else []),
                Text(format_duration(elapsed)),
            ]
        )
        return Group(top, Text("  ") + figures)


def _return_figures(record: IterationRecord) -> list[Text]:
    """The live display's returns: the (summed) mean and its best, or a zero-sum game's rates (its
    summed return and the best of it are 0 by construction)."""
    if record.is_zero_sum:
        return [Text.assemble((_rates(record.outcomes), "bold"), _window(record), _by_module(record, zero_sum=True))]
    mean = Text.assemble(_return_word(record), (_num(record.return_mean), "bold"), _window(record), _by_module(record))
    return [mean, Text(f"best {_num(record.best_return_mean)}")]


def iteration_line(
    record: IterationRecord, *, total_env_steps: int | None = None, total_iterations: int | None = None
) -> str:
    """An iteration's plain line (the budget, if given, after the counter it is in). A zero-sum
    two-agent game's gives each agent's win, draw and loss rates in place of the summed return and
    its best, which are 0 by construction."""
    iteration = f"iter {record.iteration}" + (f"/{total_iterations}" if total_iterations else "")
    steps = f"{record.env_steps}" + (f"/{total_env_steps}" if total_env_steps else "")
    if record.is_zero_sum:
        returns = f"{_rates(record.outcomes)}{_window(record)}{_by_module(record, zero_sum=True)}"
    else:
        returns = (
            f"{_return_word(record)}{_num(record.return_mean)}{_window(record)}{_by_module(record)}, "
            f"best {_num(record.best_return_mean)}"
        )
    return (
        f"{iteration}: {steps} env steps, {format_rate(record.env_steps_per_s)} steps/s, "
        f"{record.episodes} episodes, {returns}{_evaluation(record)}"
        f"{', ' + _asynchronous(record) if record.asynchronous else ''}, {format_duration(record.elapsed_s)}"
    )


def _asynchronous(record: IterationRecord) -> str:
    """An asynchronous run's part of the line: ``lag 1.2 (max 3), dropped/unused/lost 0/0/0`` (policy
    lag in updates, then env steps not learned from)."""
    a = record.asynchronous
    counts = f"{int(a['num_env_steps_dropped'])}/{int(a['num_env_steps_unused'])}/{record.num_env_steps_lost}"
    return f"lag {_num(a['policy_lag_mean'])} (max {_whole(a['policy_lag_max'])}), dropped/unused/lost {counts}"


def _whole(value: float) -> str:
    """A count kept as a float: ``28``, ``-`` for NaN."""
    return "-" if math.isnan(value) else f"{value:.0f}"


def _evaluation(record: IterationRecord) -> str:
    """``, evaluation 412.5`` in an iteration that evaluated (against an opponent: ``, evaluation
    against random won 70% drew 10% lost 20%``); empty otherwise."""
    mean = record.evaluation.get("episode_return_mean", math.nan)
    return "" if math.isnan(mean) else f", evaluation {_against(record) or _num(mean)}"


def _against(record: IterationRecord) -> str:
    from learner.metrics import format_against  # loaded already: the record came from a learner's loop

    return format_against(record.evaluation)


def format_rate(per_s: float) -> str:
    """A rate in a few digits: ``850``, ``41.2k``, ``1.25M`` (``-`` if NaN)."""
    if math.isnan(per_s):
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.3g}{suffix}"
    return f"{per_s:.0f}"


def format_duration(seconds: float) -> str:
    """``1.2 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _return_word(record: IterationRecord) -> str:
    """``mean return ``, or a multi-agent run's ``summed return `` (the sum over every agent)."""
    return "summed return " if record.returns_by else "mean return "


def _rates(outcomes: Mapping[str, float]) -> str:
    """``player_1 won 45% drew 10% lost 45%, player_2 won 45% ...``: a two-agent run's outcomes."""
    from learner.metrics import format_outcomes  # loaded already: the outcomes came from a learner's loop

    return format_outcomes(outcomes)


def _by_module(record: IterationRecord, *, zero_sum: bool = False) -> str:
    """A multi-agent run's per-module means (``; p0 12.5, p1 9.0``); empty otherwise. ``zero_sum``:
    empty with one module too (both agents map to it: its return is their sum, 0 by construction)."""
    parts = [f"{k.removeprefix('module/')} {_num(v)}" for k, v in record.returns_by.items() if k.startswith("module/")]
    return f"; {', '.join(parts)}" if len(parts) > (1 if zero_sum else 0) else ""


def _num(value: float) -> str:
    """A return: one decimal from 10 up, three significant digits below, ``-`` for NaN."""
    if math.isnan(value):
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _window(record: IterationRecord) -> str:
    return f" (last {record.window})" if record.window else ""


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" if n == 1 else f"{n:,} {what}s"


_OUTCOME_MARKS = {
    Outcome.TARGET_REACHED: ("✓", "bold green"),
    Outcome.BUDGET_USED: ("✓", "bold"),
    Outcome.TARGET_MISSED: ("✗", "bold yellow"),
    Outcome.INTERRUPTED: ("■", "bold yellow"),
}
"""Each outcome's mark in the live display's last frame, and the style of its words."""


def _summary_panel(summary: RunSummary) -> Panel:
    style = _OUTCOME_MARKS[summary.outcome][1]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    for label, value in summary.rows():
        grid.add_row(label, value)
    parts: list[RenderableType] = [Text(summary.headline(), style=style), grid]
    parts += [Text(note) for note in summary.notes]
    return Panel(Group(*parts), title="run summary", title_align="left", expand=False)
