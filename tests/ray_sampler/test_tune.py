"""ray_sampler.tune: a Ray Tune trial runs the training command by dotted config path, reports
every metrics.csv row and its checkpoints to Tune, takes its runners' bundles from the trial's
placement group, resumes after its process is killed; an APPO trial (no checkpoints) reports its
rows; a bad space fails before any trial. (A
sweep of two DQN trials runs in examples/tune_ppo_cartpole.py, run by tests/examples/test_examples.py.)"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from ray_sampler.cli.run_dir import read_metrics
from ray_sampler.errors import ConfigError
from ray_sampler.tune import check_param_space, trial_resources, tuner
from tests.helpers import cpus_back_to, idle_cpus

pytestmark = pytest.mark.usefixtures("ray_session")

BASE = {
    "env_runner_group.num_env_runners": 1,
    "env_runner_group.num_cpus_per_env_runner": 0.5,
    "env_runner.num_envs_per_env_runner": 2,
    "env_runner.rollout_fragment_length": 64,
    "target_return": "none",
    "checkpoint_every": 1,
}


MULTI_AGENT = {"env": "ma-cartpole:2", "policy_mapping": "per-agent"}


def run_dirs(trial_path: str | Path) -> list[Path]:
    return sorted(p.parent for p in Path(trial_path).rglob("metrics.csv") if p.parent.name != "run")


def assert_same_rows(tune_rows: list[dict[str, Any]], csv_rows: list[dict[str, Any]]) -> None:
    """Every value Tune recorded equals the run's metrics.csv (floats within 1e-12: they went
    through Tune's own files)."""
    assert len(tune_rows) == len(csv_rows)
    for got, want in zip(tune_rows, csv_rows, strict=True):
        for column, value in want.items():
            if isinstance(value, float) and math.isnan(value):
                assert got[column] is None or math.isnan(got[column]), column
            else:
                assert got[column] == pytest.approx(value, rel=1e-12, abs=0), column


def placement_groups_named(part: str) -> set[str]:
    """The ids of the placement groups whose name holds ``part`` (removed ones too, while Ray keeps them)."""
    return {pg_id for pg_id, g in ray.util.placement_group_table().items() if part in g.get("name", "")}


def test_a_trial_reports_its_rows_and_checkpoints_uses_its_bundles_and_resumes_after_a_kill(tmp_path: Path) -> None:
    """One multi-agent trial, its process killed after two iterations: Tune restarts it from its newest
    checkpoint, its run directory goes on without a gap or a repeated row, every row Tune holds
    is the run's, its runner took the trial's bundle (no placement group of its own), and the
    trial's CPUs come back at the end."""
    import psutil
    from ray import tune

    before = idle_cpus()
    runner_groups_before = placement_groups_named("-runners-")
    assert trial_resources("ppo", BASE).bundles == [{"CPU": 1.0}, {"CPU": 0.5}]

    killed: list[str] = []

    def kill_the_trial_after_two_rows() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            files = list(tmp_path.rglob("metrics.csv"))
            if files and len(files[0].read_text().splitlines()) >= 3:  # the header and two rows
                for process in psutil.process_iter(["pid", "cmdline"]):
                    if "ImplicitFunc" in " ".join(
                        process.info["cmdline"] or []
                    ):  # the trial's actor ("ray::ImplicitFunc...")
                        os.kill(process.info["pid"], signal.SIGKILL)
                        killed.append(process.info["pid"])
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_trial_after_two_rows, daemon=True)
    killer.start()
    results = tuner(
        "ppo",
        # A multi-agent run (two agents, a module each): every one of its checkpoints kept (the first
        # is the restored one)
        {**BASE, **MULTI_AGENT, "max_iterations": 5, "keep_checkpoints": 10},
        run_config=tune.RunConfig(
            storage_path=str(tmp_path), name="killed", verbose=0, failure_config=tune.FailureConfig(max_failures=1)
        ),
    ).fit()
    killer.join(timeout=5)
    assert killed and results.num_errors == 0
    (result,) = results
    resumed = [run for run in run_dirs(result.path) if run.name.startswith("restored-")]
    assert len(resumed) == 1
    csv_rows = read_metrics(resumed[0])
    assert [row["iteration"] for row in csv_rows] == [1, 2, 3, 4, 5]  # no gap, no repeat
    returns = sorted(c for c in csv_rows[0] if c.startswith("return/"))  # each module's and agent's
    assert returns == ["return/agent/0", "return/agent/1", "return/module/0", "return/module/1"]
    steps = [row["env_steps"] for row in csv_rows]
    assert steps == sorted(steps) and len(set(steps)) == 5
    # Tune's own progress.csv after a restart: it holds at least every row reported since the
    # checkpoint it restored (k), and may keep rows of the killed attempt (a row it reported after
    # checkpoint k is then there twice, the run's last) or drop the rows before k. Each
    # iteration's last row Tune holds is the run's.
    k = min(int(p.name.split("-")[1]) for p in (resumed[0] / "checkpoints").iterdir())
    tune_rows = result.metrics_dataframe.to_dict("records")
    last = {row["iteration"]: row for row in tune_rows}
    assert set(range(k + 1, 6)) <= set(last) <= {1, 2, 3, 4, 5}
    assert_same_rows([last[i] for i in sorted(last)], [csv_rows[i - 1] for i in sorted(last)])
    with result.checkpoint.as_directory() as saved:  # the newest: the run's own checkpoint, config and curve
        folder = Path(saved) / "run"
        assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["ckpt-0000005"]
        assert (folder / "config.toml").is_file() and len(read_metrics(folder)) == 5
    assert placement_groups_named("-runners-") <= runner_groups_before
    assert cpus_back_to(before)


@pytest.mark.parametrize(
    ("space", "match"),
    [
        ({"ppo.lrr": 1e-3}, r"^trial config: 'ppo\.lrr' is no option of this command"),
        ({"ppo.lr": "grid"}, r"^--ppo\.lr"),
        ({"max_iterations": {"grid_search": [2, 0]}}, r"^--max-iterations must be an int >= 1 \(got 0\)"),
        ({"env_runner_group.num_env_runners": 40}, r"^a trial of .* can never be placed: one trial = 1 x 21 CPU"),
        ({"optimizer": "async_samples", "num_learners": 2}, r"^the asynchronous loop has one learner for now"),
    ],
    ids=["no_such_option", "bad_value", "bad_grid_value", "never_fits", "async_learners"],
)
def test_a_bad_search_space_is_refused_in_one_line_before_any_trial(space: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_param_space("ppo", {**BASE, **space})


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^'algo' must be one of \['dqn', 'ppo'\] \(got 'sac'\)"):
        check_param_space("sac", {})


def test_a_trial_of_the_asynchronous_loop_reports_its_rows(tmp_path: Path) -> None:
    """APPO (runners that never wait) as a trial: it checkpoints as the synchronous loop does, and
    every row is reported, the same as its run directory's."""
    from ray import tune

    results = tuner(
        "ppo",
        {**BASE, "optimizer": "async_samples", "max_iterations": 3},
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="appo", verbose=0),
    ).fit()
    (result,) = results
    assert result.error is None and result.checkpoint is not None
    (run,) = run_dirs(result.path)
    csv_rows = read_metrics(run)
    assert [row["iteration"] for row in csv_rows] == [1, 2, 3]
    assert_same_rows(result.metrics_dataframe.to_dict("records"), csv_rows)


def test_pbt_takes_turns_only_when_the_population_does_not_fit_at_once(tmp_path: Path) -> None:
    """On the session's 4 CPUs: two trials of 1.5 CPUs fit at once (PBT's pauses for waiting
    trials are turned off), three do not (Tune's time sharing stays)."""
    from ray_sampler.cli.sweep import all_trials_fit, read_sweep

    path = tmp_path / "pbt.toml"
    for lrs, fit in (("[1e-3, 2e-3]", True), ("[1e-3, 2e-3, 3e-3]", False)):
        path.write_text(
            'algo = "ppo"\nscheduler = "pbt"\n[config]\nenv_runner_group.num_env_runners = 1\n'
            f"env_runner_group.num_cpus_per_env_runner = 0.5\n[space]\nppo.lr = {{ grid = {lrs} }}\n"
            "[pbt.mutations]\nppo.lr = { choice = [1e-3, 2e-3] }\n"
        )
        assert all_trials_fit(read_sweep(path)) is fit, lrs
