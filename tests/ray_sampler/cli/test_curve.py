"""``draw_curves``: the one function behind curve.png and ``ray-sampler plot``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ray_sampler.cli.curve import draw_curves
from ray_sampler.errors import ConfigError
from tests.ray_sampler.cli.fake_run import block_import, cartpole_like_records, png_size


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
