"""``plot_runs``: several runs' curves on one figure, and its one-line errors."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from ray_sampler.cli import main
from ray_sampler.cli.plot import plot_runs
from ray_sampler.cli.run_dir import RunDirectory
from ray_sampler.errors import ConfigError
from tests.ray_sampler.cli.fake_run import block_import, cartpole_like_records, png_size


def _run(root: Path, env: str, *, num_iterations: int = 60, scale: float = 1.0) -> Path:
    with RunDirectory.create(root, "ppo", env, {}, started_at=datetime(2026, 11, 23, 15, 33, 14)) as run:
        for record in cartpole_like_records(num_iterations, scale=scale):
            run.append(record)
    return run.path


def test_two_runs_make_one_png(tmp_path: Path) -> None:
    runs = [_run(tmp_path, "CartPole-v1"), _run(tmp_path, "CartPole-v1", num_iterations=45, scale=0.8)]
    out = plot_runs(runs, tmp_path / "out" / "both.png", target_return=475.0)
    assert out == tmp_path / "out" / "both.png"
    assert png_size(out) == (1080, 600)


def test_two_runs_differ_from_one(tmp_path: Path) -> None:
    first, second = _run(tmp_path, "CartPole-v1"), _run(tmp_path, "CartPole-v1", scale=0.5)
    one = plot_runs([first], tmp_path / "one.png").read_bytes()
    both = plot_runs([first, second], tmp_path / "both.png").read_bytes()
    assert one != both


def test_no_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'run_dirs' must name at least one run directory \\(got none\\)"):
        plot_runs([], tmp_path / "x.png")


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    good = _run(tmp_path, "CartPole-v1", num_iterations=2)
    with pytest.raises(ConfigError, match=f"^run directory {tmp_path / 'gone'} does not exist$"):
        plot_runs([good, tmp_path / "gone"], tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_a_file_instead_of_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "f.csv").write_text("")
    with pytest.raises(ConfigError, match=f"^run directory {tmp_path / 'f.csv'} is a file, not a run directory$"):
        plot_runs([tmp_path / "f.csv"], tmp_path / "x.png")


def test_a_directory_without_metrics_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'empty'} has no metrics.csv"):
        plot_runs([tmp_path / "empty"], tmp_path / "x.png")


def test_metrics_without_a_row_are_named(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.csv").write_text("iteration,env_steps\n")
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'r'} has no iteration in its metrics.csv yet$"):
        plot_runs([tmp_path / "r"], tmp_path / "x.png")


def test_without_matplotlib_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path, "CartPole-v1", num_iterations=2)
    block_import(monkeypatch, "matplotlib")
    with pytest.raises(
        ConfigError, match=r"^drawing a learning curve needs matplotlib: pip install 'ray-sampler\[plot\]'$"
    ):
        plot_runs([run], tmp_path / "x.png")


def test_the_plot_command_draws_the_run_directories_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_run(tmp_path, "CartPole-v1"), _run(tmp_path, "CartPole-v1", num_iterations=30)]
    out = tmp_path / "curves.png"
    main(["plot", *map(str, runs), "--out", str(out), "--target-return", "475"])
    assert capsys.readouterr().out.strip() == f"learning curves of 2 run(s): {out}"
    assert png_size(out) == (1080, 600)
