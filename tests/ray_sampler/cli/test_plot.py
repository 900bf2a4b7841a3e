"""``plot_runs``: several runs' curves on one figure, and its one-line errors."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from ray_sampler.cli import main
from ray_sampler.cli.plot import mixed_envs_warning, plot_runs
from ray_sampler.cli.run_dir import RunDirectory
from ray_sampler.errors import ConfigError
from tests.ray_sampler.cli.fake_run import block_import, cartpole_like_records, png_size


def _run(root: Path, env: str, *, num_iterations: int = 60, scale: float = 1.0, config: dict | None = None) -> Path:
    started_at = datetime(2026, 11, 23, 15, 33, 14)
    with RunDirectory.create(root, "ppo", env, config or {}, started_at=started_at) as run:
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


def test_without_out_the_figure_goes_into_the_runs_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [_run(tmp_path / "runs", "CartPole-v1"), _run(tmp_path / "runs", "CartPole-v1", num_iterations=30)]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    main(["plot", *map(str, runs)])
    assert capsys.readouterr() == (f"learning curves of 2 run(s): {tmp_path / 'runs' / 'curves.png'}\n", "")
    assert png_size(tmp_path / "runs" / "curves.png") == (1080, 600)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_plotting_runs_star_again_leaves_out_the_figure_drawn_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(tmp_path / "runs", "CartPole-v1")
    _run(tmp_path / "runs", "CartPole-v1", num_iterations=30)
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # the second time, runs/* has runs/curves.png too
        main(["plot", *sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "runs").iterdir())])
        assert capsys.readouterr() == ("learning curves of 2 run(s): runs/curves.png\n", "")
    assert png_size(tmp_path / "runs" / "curves.png") == (1080, 600)


def test_the_default_figure_path_is_relative_when_the_runs_are_under_the_working_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(tmp_path / "runs", "CartPole-v1", num_iterations=3)
    monkeypatch.chdir(tmp_path)
    main(["plot", f"runs/{run.name}"])
    assert capsys.readouterr().out == "learning curves of 1 run(s): runs/curves.png\n"
    assert (tmp_path / "runs" / "curves.png").is_file()


def test_runs_of_different_envs_get_a_warning_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run(tmp_path, "CartPole-v1"), _run(tmp_path, "CartPole-v1"), _run(tmp_path, "Acrobot-v1")]
    main(["plot", *map(str, runs), "--out", str(tmp_path / "all.png")])
    out, err = capsys.readouterr()
    assert err == (
        "warning: the runs trained on different envs (Acrobot-v1: 1 run, CartPole-v1: 2 runs); "
        "their returns share one axis\n"
    )
    assert out == f"learning curves of 3 run(s): {tmp_path / 'all.png'}\n"


def test_runs_of_one_env_get_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run(tmp_path, "CartPole-v1"), _run(tmp_path, "CartPole-v1", num_iterations=30)]
    main(["plot", *map(str, runs), "--out", str(tmp_path / "all.png")])
    assert capsys.readouterr().err == ""


def test_the_env_comes_from_config_toml_before_the_directory_name(tmp_path: Path) -> None:
    # A renamed run directory still says its env: config.toml's env key (a training run writes it).
    renamed = _run(tmp_path, "CartPole-v1", config={"env": "Acrobot-v1"}).rename(tmp_path / "my-run")
    assert mixed_envs_warning([renamed, _run(tmp_path, "CartPole-v1")]) == (
        "warning: the runs trained on different envs (Acrobot-v1: 1 run, CartPole-v1: 1 run); "
        "their returns share one axis"
    )
    assert mixed_envs_warning([renamed, _run(tmp_path, "Acrobot-v1")]) is None
