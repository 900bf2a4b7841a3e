"""``draw_curves``: the one function behind curve.png and ``ray-sampler plot``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ray_sampler.cli.curve import draw_curves, draw_curves_apart
from ray_sampler.cli.phases import mark
from ray_sampler.errors import ConfigError
from tests.ray_sampler.cli.fake_run import block_import, cartpole_like_records, png_size

ROOT = Path(__file__).resolve().parents[3]


def _rows(num_iterations: int) -> list[dict[str, float]]:
    return [{k: v for k, v in r.items() if k != "losses"} for r in cartpole_like_records(num_iterations)]


def test_draws_a_png_at_out_and_makes_its_folder(tmp_path: Path) -> None:
    out = draw_curves({"run": _rows(10)}, tmp_path / "a" / "b.png", title="ppo on CartPole-v1", target_return=475.0)
    assert out == tmp_path / "a" / "b.png"
    assert png_size(out) == (1080, 600)


def test_rows_before_the_first_episode_are_left_out(tmp_path: Path) -> None:
    rows = _rows(10)
    nan = math.nan
    before = [{**rows[0], "return_mean": nan, "return_min": nan, "return_max": nan, "window": 0, "env_steps": 0}]
    with_nan = draw_curves({"run": before + rows}, tmp_path / "with.png", title="t").read_bytes()
    without = draw_curves({"run": rows}, tmp_path / "without.png", title="t").read_bytes()
    assert with_nan == without


def test_the_target_line_changes_the_picture(tmp_path: Path) -> None:
    plain = draw_curves({"run": _rows(10)}, tmp_path / "a.png", title="t").read_bytes()
    with_target = draw_curves({"run": _rows(10)}, tmp_path / "b.png", title="t", target_return=475.0).read_bytes()
    assert plain != with_target


def test_without_matplotlib_raises_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block_import(monkeypatch, "matplotlib")
    with pytest.raises(ConfigError, match=r"pip install 'ray-sampler\[plot\]'"):
        draw_curves({"run": _rows(2)}, tmp_path / "x.png", title="t")


def test_a_multi_agent_run_gets_a_curve_per_module(tmp_path: Path) -> None:
    rows = _rows(10)
    with_modules = [{**r, "return/module/p0": r["return_mean"] / 3, "return/agent/0": 1.0} for r in rows]
    plain = draw_curves({"run": rows}, tmp_path / "a.png", title="t").read_bytes()
    one = draw_curves({"run": with_modules}, tmp_path / "b.png", title="t").read_bytes()
    two = [{**r, "return/module/p1": r["return_mean"] / 2} for r in with_modules]
    assert plain != one != draw_curves({"run": two}, tmp_path / "c.png", title="t").read_bytes()
    # Agent columns draw nothing of their own.
    only_agents = [{**r, "return/agent/0": 1.0} for r in rows]
    assert draw_curves({"run": only_agents}, tmp_path / "d.png", title="t").read_bytes() == plain


def _two_agent_rows(*, zero_sum: int, wins: tuple[float, float] = (0.5, 0.3)) -> list[dict[str, float]]:
    """A two-agent run's rows: their summed return as in ``_rows``, and each agent's outcome shares."""
    outcomes = {
        "outcome/win/x": wins[0], "outcome/draw/x": 0.2, "outcome/loss/x": wins[1],
        "outcome/win/o": wins[1], "outcome/draw/o": 0.2, "outcome/loss/o": wins[0],
        "outcome/zero_sum": zero_sum,
    }  # fmt: skip
    return [{**r, **outcomes} for r in _rows(10)]


def test_a_zero_sum_run_draws_the_win_rates_not_the_summed_return(tmp_path: Path) -> None:
    rates = draw_curves({"run": _two_agent_rows(zero_sum=1)}, tmp_path / "a.png", title="t").read_bytes()
    other_returns = [{**r, "return_mean": 0.0, "return_min": -1.0} for r in _two_agent_rows(zero_sum=1)]
    assert draw_curves({"run": other_returns}, tmp_path / "b.png", title="t").read_bytes() == rates
    other_wins = _two_agent_rows(zero_sum=1, wins=(0.6, 0.2))
    assert draw_curves({"run": other_wins}, tmp_path / "c.png", title="t").read_bytes() != rates


def test_a_zero_sum_run_that_evaluates_against_the_random_opponent_draws_that_win_rate(tmp_path: Path) -> None:
    rows = _two_agent_rows(zero_sum=1)
    plain = draw_curves({"run": rows}, tmp_path / "a.png", title="t").read_bytes()
    against = [{**r, "evaluation/win": math.nan if i % 2 else 0.5 + i / 40} for i, r in enumerate(rows)]
    drawn = draw_curves({"run": against}, tmp_path / "b.png", title="t").read_bytes()
    assert drawn != plain
    higher = [{**r, "evaluation/win": r["evaluation/win"] + 0.2} for r in against]
    assert draw_curves({"run": higher}, tmp_path / "c.png", title="t").read_bytes() != drawn
    unevaluated = [{**r, "evaluation/win": math.nan} for r in rows]  # a run that never evaluated: no line
    assert draw_curves({"run": unevaluated}, tmp_path / "d.png", title="t").read_bytes() == plain


def test_a_two_agent_run_that_is_not_zero_sum_keeps_its_return_curve(tmp_path: Path) -> None:
    plain = draw_curves({"run": _rows(10)}, tmp_path / "a.png", title="t").read_bytes()
    rows = _two_agent_rows(zero_sum=0)
    assert draw_curves({"run": rows}, tmp_path / "b.png", title="t").read_bytes() == plain


def test_a_run_s_curve_is_drawn_in_a_child_process_byte_for_byte(tmp_path: Path) -> None:
    rows = [{**r, "return_mean": math.nan} if i == 0 else r for i, r in enumerate(_rows(10))]  # a NaN crosses too
    here = draw_curves({"run": rows}, tmp_path / "here.png", title="t", target_return=475.0).read_bytes()
    apart = draw_curves_apart({"run": rows}, tmp_path / "apart.png", title="t", target_return=475.0)
    assert apart.read_bytes() == here


def test_the_training_driver_never_loads_matplotlib_or_pyarrow(tmp_path: Path) -> None:
    # The driver's peak memory: the curve is drawn in a child, replay loads pyarrow only to save or restore.
    code = (
        "import json, sys, pathlib; import ray_sampler.cli.train, learner.learner_group, replay; "
        "from ray_sampler.cli.curve import draw_curves_apart; "
        f"rows = json.loads({json.dumps(_rows(3))!r}); "
        f"draw_curves_apart({{'run': rows}}, pathlib.Path({str(tmp_path / 'c.png')!r}), title='t'); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'pyarrow'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]" and (tmp_path / "c.png").is_file()


def test_phase_stamps_are_silent_unless_asked(capsys: pytest.CaptureFixture[str]) -> None:
    mark("imports")
    assert capsys.readouterr().err == ""
