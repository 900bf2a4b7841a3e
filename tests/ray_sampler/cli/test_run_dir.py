"""The run directory: its name, config.toml (None values included), metrics.csv, TensorBoard events, curve.png."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import struct
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tensorboardX.crc32c import crc32c
from tensorboardX.proto.event_pb2 import Event

from learner.metrics import IterationRecord
from ray_sampler.cli.run_dir import RunDirectory, load_config, read_metrics, run_title
from ray_sampler.errors import ConfigError
from tests.ray_sampler.cli.fake_run import block_import, cartpole_like_records, make_record, png_size

START = datetime(2026, 11, 23, 15, 33, 14)

CONFIG: dict[str, Any] = {
    "algo": "ppo",
    "seed": None,
    "total_env_steps": 100_000,
    "target_return": 475.0,
    "is_verbose": False,
    "runners": {"num_env_runners": 2, "env_config": {}, "restart": {"max_restarts": None, "timeout_s": 30.5}},
    "ppo": {"lr": 3e-4, "grad_clip": None, "hidden_sizes": [64, 64], "schedule": [[0, 1.0], [1000, 0.5]]},
    "only_none": {"a": None},
    "tags": [],
}


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask (022) while the test runs: new files are 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


TWO_AGENTS_BY = {"module/shared": 0.0, "agent/x": 0.25, "agent/o": -0.25}
OUTCOMES = {
    "win/x": 0.5, "draw/x": 0.25, "loss/x": 0.25,
    "win/o": 0.25, "draw/o": 0.25, "loss/o": 0.5,
}  # fmt: skip
"""A two-agent record's outcomes (a zero-sum game: ``x`` won 2 of 4, drew 1, lost 1)."""


def _create(root: Path, config: dict[str, Any] | None = None, **kwargs: Any) -> RunDirectory:
    return RunDirectory.create(
        root, "ppo", "CartPole-v1", CONFIG if config is None else config, started_at=START, **kwargs
    )


class TestName:
    def test_is_algo_env_and_start_time(self, tmp_path: Path) -> None:
        run = _create(tmp_path / "runs")
        assert run.path == tmp_path / "runs" / "ppo-CartPole-v1-20261123-153314"
        assert run.path.is_dir()

    def test_a_taken_name_gets_a_number(self, tmp_path: Path) -> None:
        names = [_create(tmp_path).path.name for _ in range(3)]
        assert names == [
            "ppo-CartPole-v1-20261123-153314",
            "ppo-CartPole-v1-20261123-153314-2",
            "ppo-CartPole-v1-20261123-153314-3",
        ]

    def test_a_slash_in_the_env_name_becomes_an_underscore(self, tmp_path: Path) -> None:
        run = RunDirectory.create(tmp_path, "dqn", "ALE/Pong-v5", {}, started_at=START)
        assert run.path.name == "dqn-ALE_Pong-v5-20261123-153314"

    def test_title_comes_from_the_name(self, tmp_path: Path) -> None:
        assert run_title(tmp_path / "ppo-CartPole-v1-20261123-153314-2") == "ppo on CartPole-v1"
        assert run_title(tmp_path / "my-run") == "my-run"


class TestConfigToml:
    def test_round_trip_gives_back_the_config(self, tmp_path: Path) -> None:
        run = _create(tmp_path)
        assert load_config(run.path) == CONFIG
        assert load_config(run.path / "config.toml") == CONFIG

    def test_none_values_are_listed_by_dotted_path(self, tmp_path: Path) -> None:
        text = (_create(tmp_path).path / "config.toml").read_text()
        assert (
            'none = [\n    "seed",\n    "runners.restart.max_restarts",\n    "ppo.grad_clip",\n    "only_none.a",\n]'
            in text
        )
        assert "[ppo]\nlr = 0.0003\n" in text

    def test_a_config_without_none_has_no_none_key(self, tmp_path: Path) -> None:
        run = _create(tmp_path, {"ppo": {"lr": 0.1}})
        assert "none" not in (run.path / "config.toml").read_text().split("\n", 1)[1]
        assert load_config(run.path) == {"ppo": {"lr": 0.1}}

    @pytest.mark.parametrize(
        ("config", "match"),
        [
            ({"a": {"b": [1, None]}}, "config value 'a.b\\[1\\]' must be a str, int, float, bool or a list of them"),
            ({"none": 1}, "config key 'none' is reserved in config.toml"),
            ({"a": {"b.c": 1}}, "config keys must be non-empty strings without '.' \\(got 'a.b.c'\\)"),
            ({"out": Path("x")}, "config value 'out' must be a str, int, float, bool .*PosixPath"),
        ],
        ids=["none-in-list", "reserved-key", "dotted-key", "path-value"],
    )
    def test_a_value_toml_cannot_keep_is_refused_before_any_directory(
        self, tmp_path: Path, config: dict[str, Any], match: str
    ) -> None:
        with pytest.raises(ConfigError, match=match):
            _create(tmp_path / "runs", config)
        assert not (tmp_path / "runs").exists()

    def test_write_leaves_no_temp_file(self, tmp_path: Path) -> None:
        run = _create(tmp_path)
        assert sorted(p.name for p in run.path.iterdir()) == ["config.toml"]

    def test_a_failed_write_leaves_no_file_and_no_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def fail_rename(src: str, dst: str) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(os, "replace", fail_rename)
        with pytest.raises(OSError, match="disk full"):
            _create(tmp_path)
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.usefixtures("umask_022")
    def test_config_toml_gets_the_mode_of_the_runs_other_files(self, tmp_path: Path) -> None:
        with _create(tmp_path) as run:
            for record in cartpole_like_records(3):
                run.append(record)
        modes = {p.name: p.stat().st_mode & 0o777 for p in run.path.iterdir()}
        assert modes == {"config.toml": 0o644, "metrics.csv": 0o644, "curve.png": 0o644}

    def test_a_rewritten_metrics_csv_keeps_its_mode(self, tmp_path: Path) -> None:
        with _create(tmp_path) as run:
            for iteration in (1, 2, 3):
                run.append(make_record(iteration=iteration))
        (run.path / "metrics.csv").chmod(0o640)
        assert RunDirectory.open(run.path).drop_rows_after(1) == 2
        assert (run.path / "metrics.csv").stat().st_mode & 0o777 == 0o640
        assert [row["iteration"] for row in read_metrics(run.path)] == [1]

    def test_load_config_of_a_missing_file_names_it(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=f"no run config at {tmp_path / 'config.toml'}"):
            load_config(tmp_path)


class TestMetricsCsv:
    def test_header_is_the_record_fields_then_the_loss_terms(self, tmp_path: Path) -> None:
        with _create(tmp_path) as run:
            run.append(make_record())
        with (run.path / "metrics.csv").open(newline="") as f:
            header = next(csv.reader(f))
        assert header == [
            "iteration",
            "env_steps",
            "episodes",
            "return_mean",
            "return_min",
            "return_max",
            "window",
            "best_return_mean",
            "env_steps_per_s",
            "elapsed_s",
            "num_env_runner_restarts",
            "num_env_steps_lost",
            "loss/policy_loss",
            "loss/vf_loss",
        ]

    def test_read_metrics_gives_back_every_row(self, tmp_path: Path) -> None:
        records = cartpole_like_records(4)  # the first has no full window yet: best_return_mean NaN
        with _create(tmp_path) as run:
            for record in records:
                run.append(record)
        rows = read_metrics(run.path)
        assert [_nan_as_str(row) for row in rows] == [_nan_as_str(_flat(r)) for r in records]
        assert rows[0]["best_return_mean"] != rows[0]["best_return_mean"]  # NaN comes back as NaN
        assert [type(rows[1][k]) for k in ("iteration", "env_steps", "return_mean")] == [int, int, float]

    def test_a_run_that_evaluates_has_evaluation_columns_and_a_second_curve(self, tmp_path: Path) -> None:
        records = cartpole_like_records(4)
        nan = dict.fromkeys(("episode_return_mean", "num_episodes"), math.nan)
        evaluated = [{"episode_return_mean": 100.0 + i, "num_episodes": 10.0} for i in range(4)]
        records = [dataclasses.replace(r, evaluation=evaluated[i] if i % 2 else nan) for i, r in enumerate(records)]
        with _create(tmp_path) as run:
            for record in records:
                run.append(record)
        rows = read_metrics(run.path)
        assert [r["evaluation/episode_return_mean"] for r in rows[1::2]] == [101.0, 103.0]
        assert all(math.isnan(r["evaluation/episode_return_mean"]) for r in rows[::2])
        assert (run.path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # drawn, NaN rows and all

    def test_a_multi_agent_record_adds_a_column_per_module_and_agent(self, tmp_path: Path) -> None:
        returns_by = {"module/p0": 12.5, "module/p1": float("nan"), "agent/0": 12.5, "agent/1": float("nan")}
        with _create(tmp_path) as run:
            run.append(make_record(iteration=1, returns_by=returns_by, losses={"policy_loss": 0.5}))
        header = (run.path / "metrics.csv").read_text().splitlines()[0].split(",")
        assert header[-5:] == [
            "return/module/p0",
            "return/module/p1",
            "return/agent/0",
            "return/agent/1",
            "loss/policy_loss",
        ]
        (row,) = read_metrics(run.path)
        assert row["return/module/p0"] == 12.5 and math.isnan(row["return/module/p1"])

    def test_a_two_agent_record_adds_the_outcome_columns_and_the_zero_sum_flag(self, tmp_path: Path) -> None:
        with _create(tmp_path) as run:
            run.append(make_record(returns_by=TWO_AGENTS_BY, outcomes=OUTCOMES, is_zero_sum=True, losses={}))
        header = (run.path / "metrics.csv").read_text().splitlines()[0].split(",")
        assert header[-10:] == [
            "return/module/shared", "return/agent/x", "return/agent/o",
            "outcome/win/x", "outcome/draw/x", "outcome/loss/x",
            "outcome/win/o", "outcome/draw/o", "outcome/loss/o",
            "outcome/zero_sum",
        ]  # fmt: skip
        assert "outcomes" not in header and "is_zero_sum" not in header
        (row,) = read_metrics(run.path)
        assert {k: v for k, v in row.items() if k.startswith("outcome/")} == {
            "outcome/win/x": 0.5, "outcome/draw/x": 0.25, "outcome/loss/x": 0.25,
            "outcome/win/o": 0.25, "outcome/draw/o": 0.25, "outcome/loss/o": 0.5,
            "outcome/zero_sum": 1,
        }  # fmt: skip

    def test_an_asynchronous_record_adds_the_lag_and_the_steps_not_learned_from(self, tmp_path: Path) -> None:
        figures = {
            "policy_lag_mean": 1.5, "policy_lag_max": 3.0, "num_env_steps_dropped": 256.0,
            "num_env_steps_unused": 0.0,
        }  # fmt: skip
        with RunDirectory.create(tmp_path, "appo", "CartPole-v1", {}, started_at=START) as run:
            run.append(make_record(asynchronous=figures, num_env_steps_lost=512))
        (row,) = read_metrics(run.path)
        assert run.path.name == "appo-CartPole-v1-20261123-153314"
        assert {k: v for k, v in row.items() if k.startswith("async/") or k == "num_env_steps_lost"} == {
            "num_env_steps_lost": 512,
            "async/policy_lag_mean": 1.5,
            "async/policy_lag_max": 3.0,
            "async/num_env_steps_dropped": 256,
            "async/num_env_steps_unused": 0,
        }
        assert list(row)[12:16] == [
            "async/policy_lag_mean", "async/policy_lag_max", "async/num_env_steps_dropped", "async/num_env_steps_unused"
        ]  # fmt: skip

    def test_rows_are_on_disk_before_close(self, tmp_path: Path) -> None:
        run = _create(tmp_path)
        run.append(make_record(iteration=1))
        run.append(make_record(iteration=2))
        assert [row["iteration"] for row in read_metrics(run.path)] == [1, 2]
        run.close()

    def test_a_missing_loss_term_is_an_empty_cell_and_a_new_one_is_left_out(self, tmp_path: Path) -> None:
        with _create(tmp_path) as run:
            run.append(make_record(iteration=1, losses={"policy_loss": 0.5, "vf_loss": 2.0}))
            run.append(make_record(iteration=2, losses={"vf_loss": 1.5, "kl": 0.01}))
        lines = (run.path / "metrics.csv").read_text().splitlines()
        assert lines[0].endswith(",loss/policy_loss,loss/vf_loss")
        assert lines[2].endswith(",0,0,,1.5")
        rows = read_metrics(run.path)
        assert math.isnan(rows[1]["loss/policy_loss"]) and "loss/kl" not in rows[1]

    def test_open_appends_under_the_existing_header(self, tmp_path: Path) -> None:
        with _create(tmp_path) as run:
            run.append(make_record(iteration=1, losses={"vf_loss": 2.0}))
        with RunDirectory.open(run.path) as resumed:
            assert (resumed.algo, resumed.env) == ("ppo", "CartPole-v1")
            resumed.append(make_record(iteration=2, losses={"vf_loss": 1.0, "policy_loss": 0.1}))
        lines = (run.path / "metrics.csv").read_text().splitlines()
        assert len(lines) == 3 and lines[0].endswith("num_env_steps_lost,loss/vf_loss")
        assert [(row["iteration"], row["loss/vf_loss"]) for row in read_metrics(run.path)] == [(1, 2.0), (2, 1.0)]

    def test_open_of_a_directory_without_config_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=f"{tmp_path} is not a run directory: it has no config.toml"):
            RunDirectory.open(tmp_path)

    def test_read_metrics_errors_name_the_path(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=f"run directory {tmp_path / 'gone'} does not exist"):
            read_metrics(tmp_path / "gone")
        with pytest.raises(ConfigError, match=f"{tmp_path} has no metrics.csv"):
            read_metrics(tmp_path)

    def test_append_after_close_raises(self, tmp_path: Path) -> None:
        run = _create(tmp_path)
        run.close()
        with pytest.raises(RuntimeError, match="append\\(\\) after close\\(\\)"):
            run.append(make_record())


def _flat(record: IterationRecord) -> dict[str, Any]:
    nested = ("losses", "returns_by", "outcomes", "is_zero_sum", "asynchronous", "evaluation")
    row = {k: v for k, v in record.items() if k not in nested}
    row.update({f"return/{k}": v for k, v in record.returns_by.items()})
    row.update({f"evaluation/{k}": v for k, v in record.evaluation.items()})
    row.update({f"loss/{k}": v for k, v in record.losses.items()})
    return row


def _nan_as_str(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with NaN as "nan", so that rows compare equal (NaN != NaN)."""
    return {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def _events(path: Path) -> list[Event]:
    """The records of a TensorBoard event file (TFRecord framing: length, its masked CRC, data, its
    masked CRC), each CRC checked."""

    def masked(data: bytes) -> int:
        crc = crc32c(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    data, events, at = path.read_bytes(), [], 0
    while at < len(data):
        header = data[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8 : at + 12])
        body = data[at + 12 : at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length : at + 16 + length])
        assert (length_crc, body_crc) == (masked(header), masked(body))
        events.append(Event.FromString(body))
        at += 16 + length
    return events


class TestTensorboard:
    def test_events_hold_returns_throughput_and_losses_against_env_steps(self, tmp_path: Path) -> None:
        with _create(tmp_path, tensorboard=True) as run:
            run.append(make_record(iteration=1, env_steps=2048, return_mean=20.0, best_return_mean=math.nan))
            run.append(make_record(iteration=2, env_steps=4096, return_mean=25.0, losses={"vf_loss": 3.0}))
        (event_file,) = run.path.glob("events.out.tfevents.*")
        scalars = [(e.step, v.tag, v.simple_value) for e in _events(event_file) for v in e.summary.value]
        assert scalars == [
            (2048, "return/mean", 20.0),
            (2048, "return/min", 9.0),
            (2048, "return/max", 88.0),
            (2048, "throughput/env_steps_per_s", 41234.0),
            (2048, "loss/policy_loss", pytest.approx(-0.02)),
            (2048, "loss/vf_loss", 12.5),
            (4096, "return/mean", 25.0),
            (4096, "return/min", 9.0),
            (4096, "return/max", 88.0),
            (4096, "throughput/env_steps_per_s", 41234.0),
            (4096, "loss/vf_loss", 3.0),
        ]

    def test_an_asynchronous_run_adds_its_lag_and_step_counts(self, tmp_path: Path) -> None:
        figures = {
            "policy_lag_mean": 1.5, "policy_lag_max": 3.0, "num_env_steps_dropped": 256.0,
            "num_env_steps_unused": 0.0,
        }  # fmt: skip
        with _create(tmp_path, tensorboard=True) as run:
            run.append(make_record(env_steps=2048, losses={}, asynchronous=figures, num_env_steps_lost=512))
        (event_file,) = run.path.glob("events.out.tfevents.*")
        scalars = [(e.step, v.tag, v.simple_value) for e in _events(event_file) for v in e.summary.value]
        assert scalars[4:] == [
            (2048, "async/policy_lag_mean", 1.5),
            (2048, "async/policy_lag_max", 3.0),
            (2048, "async/num_env_steps_dropped", 256.0),
            (2048, "async/num_env_steps_unused", 0.0),
            (2048, "async/num_env_steps_lost", 512.0),
        ]

    def test_a_two_agent_run_adds_its_outcome_shares(self, tmp_path: Path) -> None:
        with _create(tmp_path, tensorboard=True) as run:
            run.append(make_record(env_steps=2048, returns_by={}, outcomes=OUTCOMES, is_zero_sum=True, losses={}))
        (event_file,) = run.path.glob("events.out.tfevents.*")
        scalars = [(e.step, v.tag, v.simple_value) for e in _events(event_file) for v in e.summary.value]
        assert scalars[4:] == [
            (2048, "outcome/win/x", 0.5), (2048, "outcome/draw/x", 0.25), (2048, "outcome/loss/x", 0.25),
            (2048, "outcome/win/o", 0.25), (2048, "outcome/draw/o", 0.25), (2048, "outcome/loss/o", 0.5),
        ]  # fmt: skip

    def test_nan_values_are_left_out(self, tmp_path: Path) -> None:
        nan = math.nan
        with _create(tmp_path, tensorboard=True) as run:
            run.append(make_record(return_mean=nan, return_min=nan, return_max=nan, losses={"vf_loss": nan}))
        (event_file,) = run.path.glob("events.out.tfevents.*")
        assert [v.tag for e in _events(event_file) for v in e.summary.value] == ["throughput/env_steps_per_s"]

    def test_without_tensorboardx_says_how_to_install_it(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        block_import(monkeypatch, "tensorboardX")
        with pytest.raises(
            ConfigError, match=r"^'tensorboard' needs tensorboardX: pip install 'ray-sampler\[tensorboard\]'$"
        ):
            _create(tmp_path / "runs", tensorboard=True)
        assert not (tmp_path / "runs").exists()


class TestCurve:
    def test_close_draws_curve_png(self, tmp_path: Path) -> None:
        run = _create(tmp_path)
        for record in cartpole_like_records():
            run.append(record)
        line = run.close(target_return=475.0)
        assert line == f"learning curve: {run.path / 'curve.png'}"
        assert png_size(run.path / "curve.png") == (1080, 600)

    def test_without_matplotlib_close_says_how_to_get_the_picture(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        run = _create(tmp_path)
        run.append(make_record())
        block_import(monkeypatch, "matplotlib")
        assert run.close() == (
            f"no learning curve without matplotlib: pip install 'ray-sampler[plot]', then ray-sampler plot {run.path}"
        )
        assert not (run.path / "curve.png").exists()

    def test_close_before_any_iteration_draws_nothing(self, tmp_path: Path) -> None:
        run = _create(tmp_path)
        assert run.close() == "no learning curve: no iteration finished"
        assert sorted(p.name for p in run.path.iterdir()) == ["config.toml"]
