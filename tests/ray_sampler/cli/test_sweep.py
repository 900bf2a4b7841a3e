"""``ray-sampler tune``: a sweep from a TOML file, on a ``ray start`` cluster (6 logical CPUs, dashboard on
localhost) the command attaches to.

- ASHA over four learning rates: the best trial reaches the target, the summary names it, and each
  trial ASHA stopped had its placement group removed and its actors dead while another trial still
  ran (Ray's state API, polled by a separate process through the dashboard).
- Population-based training, cut off by Ctrl-C (exit 130, the state kept) and finished by
  ``--resume``: each trial goes on from its checkpoint with no gap and no repeated
  row; a trial that exploits another carries the other's curve and checkpoint on, with the mutated
  options in its config.toml, inside their declared ranges.
- A bad sweep file is one line, exit status 2, before Ray starts."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ray_sampler.cli import EXIT_INTERRUPTED, EXIT_USAGE, main
from ray_sampler.cli.run_dir import load_config, read_metrics
from ray_sampler.cli.sweep import ClampToRange, check_sweep_file, read_sweep, trial_run_dir
from tests.ray_start import RayStartCluster

CLI = [sys.executable, "-m", "ray_sampler", "tune"]
CPUS = 6  # a trial: 1 (its process, the learner) + 0.5 (its runner): four at a time

POLLER = """
import json, os, sys, time
from ray.util.state import list_actors, list_placement_groups
url, out, stop = sys.argv[1:4]
with open(out, "w") as f:
    while not os.path.exists(stop):
        try:
            actors = list_actors(address=url, limit=10000, detail=True, raise_on_missing_output=False)
            groups = list_placement_groups(address=url, limit=10000, raise_on_missing_output=False)
        except Exception as e:  # the dashboard busy: the next poll
            f.write(json.dumps({"error": str(e)}) + "\\n")
        else:
            f.write(json.dumps({
                "actors": [[a.actor_id, a.class_name, a.pid, a.placement_group_id, a.state] for a in actors],
                "groups": {g.placement_group_id: g.state for g in groups},
            }) + "\\n")
        f.flush()
        time.sleep(0.25)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayStartCluster]:
    with RayStartCluster(num_cpus=CPUS) as started:
        yield started


def sweep_file(path: Path, text: str, config: str | None = None) -> Path:
    """``text``, then (given ``config``) the [config] every test sweep shares and ``config``'s lines."""
    body = textwrap.dedent(text) if config is None else textwrap.dedent(text) + COMMON + textwrap.dedent(config)
    path.write_text(body, encoding="utf-8")
    return path


COMMON = """
[config]
env_runner_group.num_env_runners = 1
env_runner_group.num_cpus_per_env_runner = 0.5
stop_window = 20
"""


def trials_of(sweep_dir: Path) -> dict[str, dict]:
    """summary.csv's rows by trial id."""
    with open(sweep_dir / "summary.csv", newline="", encoding="utf-8") as f:
        return {row["trial"]: row for row in csv.DictReader(f)}


def tune_rows(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line]


def test_asha_stops_bad_trials_frees_their_actors_and_names_the_best(cluster: RayStartCluster, tmp_path: Path) -> None:
    config = sweep_file(
        tmp_path / "asha.toml",
        """
        algo = "ppo"
        scheduler = "asha"
        max_concurrent_trials = 2
        """,
        """
        max_iterations = 16
        target_return = 100.0

        [space]
        ppo.lr = { grid = [3e-3, 1e-5, 2e-3, 3e-5] }  # two at a time: a good and a bad one, twice

        [asha]
        grace_period = 3
        reduction_factor = 2
        """,
    )
    polls, stop = tmp_path / "polls.jsonl", tmp_path / "stop"
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, cluster.dashboard_url, str(polls), str(stop)], env=cluster.env
    )
    try:
        done = subprocess.run(
            [*CLI, "--config", str(config), "--address", cluster.address, "--sweeps-dir", str(tmp_path),
             "--name", "asha"],
            env=cluster.env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        stop.touch()
        poller.wait(timeout=30)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sweep_dir = tmp_path / "asha"
    trials = trials_of(sweep_dir)
    assert len(trials) == 4
    best = min(trials.values(), key=lambda t: int(t["rank"]))
    assert best["status"] == "reached" and float(best["best_return_mean"]) >= 100.0
    assert max(float(t["best_return_mean"]) for t in trials.values()) == float(best["best_return_mean"])
    assert f"best: trial {best['trial']} (ppo.lr={float(best['ppo.lr']):.4g}): best_return_mean" in done.stdout
    stopped = [t for t in trials.values() if t["status"] == "stopped"]
    assert stopped, trials  # lr 1e-5 and 3e-5 cannot keep up with 2e-3 and 3e-3 after 3 iterations
    assert (sweep_dir / "curves.png").stat().st_size > 0
    for trial in trials.values():  # each trial's run directory under the sweep's
        assert Path(trial["run_dir"]).parent.parent == sweep_dir
        assert [r["iteration"] for r in read_metrics(trial["run_dir"])] == list(range(1, int(trial["iterations"]) + 1))

    snapshots = [json.loads(line) for line in polls.read_text().splitlines()]
    snapshots = [s for s in snapshots if "actors" in s]
    assert snapshots
    freed_mid_sweep = []
    for trial in stopped:
        pids = {row["pid"] for row in tune_rows(Path(trial["run_dir"]).parent)}
        groups = {a[3] for s in snapshots for a in s["actors"] if a[2] in pids and a[1] == "ImplicitFunc"}
        assert len(groups) == 1, (trial, groups)
        (group,) = groups
        released = [
            s for s in snapshots
            if s["groups"].get(group) == "REMOVED" and all(a[4] == "DEAD" for a in s["actors"] if a[3] == group)
        ]  # fmt: skip
        assert released, f"trial {trial['trial']}: group {group} never seen removed with its actors dead"
        assert sum(a[3] == group for a in snapshots[-1]["actors"]) >= 2  # the trial's process and its runner
        # ... while another trial was still running: its resources freed for the rest of the sweep
        freed_mid_sweep += [
            trial["trial"]
            for s in released[:1]
            if any(a[1] == "ImplicitFunc" and a[4] == "ALIVE" and a[3] != group for a in s["actors"])
        ]
    # The last bad trial (3e-5) is stopped at the first rung, below the two before it, while the
    # good one started beside it still runs; a bad trial stopped as the sweep ends is not counted.
    assert freed_mid_sweep, "no stopped trial's group was seen removed while another trial ran"
    assert all(state == "REMOVED" for state in snapshots[-1]["groups"].values())


def test_pbt_cut_off_by_ctrl_c_resumes_and_its_exploits_carry_the_curve_within_range(
    cluster: RayStartCluster, tmp_path: Path
) -> None:
    """Ctrl-C as a trial restarts after its first exploit (exit 130, the state kept, a trial
    unfinished), then ``--resume``: every trial finishes from its checkpoints with each iteration
    once, and the exploits hold (see the module docstring)."""
    config = sweep_file(
        tmp_path / "pbt.toml",
        """
        algo = "ppo"
        scheduler = "pbt"
        """,
        """
        max_iterations = 17  # the last perturbation (16) leaves an iteration to run
        target_return = "none"
        ppo.num_epochs = 16  # slower iterations: the two trials overlap even when one starts late

        [space]
        ppo.lr = { grid = [1e-5, 3e-3] }

        [pbt]
        perturbation_interval = 4
        quantile_fraction = 0.5
        resample_probability = 0.5
        [pbt.mutations]
        ppo.lr = { loguniform = [1e-4, 5e-3] }
        ppo.clip_param = { uniform = [0.1, 0.3] }
        ppo.entropy_coeff = { choice = [0.0, 0.01] }
        """,
    )
    args = [*CLI, "--config", str(config), "--address", cluster.address, "--sweeps-dir", str(tmp_path), "--name", "pbt"]
    sweep_dir = tmp_path / "pbt"
    process = subprocess.Popen(args, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:  # Ctrl-C once, as a trial restarts after its first exploit (its second start)
        lines.append(line)
        if "started:" in line and sum("started:" in seen for seen in lines) == 3:
            process.send_signal(signal.SIGINT)
    code = process.wait(timeout=120)
    out = "".join(lines)
    assert code == EXIT_INTERRUPTED, out
    assert f"go on with: ray-sampler tune --resume {sweep_dir}" in out
    assert "unfinished" in {t["status"] for t in trials_of(sweep_dir).values()}
    done = subprocess.run(
        [*CLI, "--resume", str(sweep_dir), "--address", cluster.address], env=cluster.env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    exploits = [json.loads(line) for line in (sweep_dir / "pbt_global.txt").read_text().splitlines()]
    assert exploits, "no trial exploited another"
    trials = trials_of(sweep_dir)
    assert all(t["status"] == "done" for t in trials.values())
    for trial in trials.values():
        run = Path(trial["run_dir"])
        assert [r["iteration"] for r in read_metrics(run)] == list(range(1, 18))
    # Each exploit's new options within their declared ranges
    for exploit in exploits:
        new_config = exploit[5]
        assert 1e-4 <= new_config["ppo.lr"] <= 5e-3
        assert 0.1 <= new_config["ppo.clip_param"] <= 0.3
        assert new_config["ppo.entropy_coeff"] in (0.0, 0.01)
    # The last exploit (pbt_global.txt: trial, donor, donor's iteration, trial's, old and new
    # config): the trial's newest run directory starts from the donor's checkpoint, and its
    # config.toml holds the new options, which Tune reports for the rows after it.
    trial, donor, at, _, _, new_config = exploits[-1]
    by_index = {int(t["trial"].split("_")[1]): t for t in trials.values()}
    run = Path(by_index[int(trial.split("_")[0])]["run_dir"])
    assert run.name.startswith("restored-")
    saved = load_config(run)["ppo"]
    for key in ("lr", "clip_param", "entropy_coeff"):
        assert saved[key] == new_config[f"ppo.{key}"], key
    assert tune_rows(run.parent)[-1]["config"]["ppo.lr"] == saved["lr"]
    assert all(tune_rows(run.parent)[-1]["config"][f"ppo.{k}"] == new_config[f"ppo.{k}"] for k in ("lr", "clip_param"))
    donor_run = Path(by_index[int(donor.split("_")[0])]["run_dir"])
    reported = tune_rows(run.parent)
    tail = len(reported)  # the rows reported with the new options: the last attempt's
    while tail > 0 and reported[tail - 1]["config"] == reported[-1]["config"]:
        tail -= 1
    copied = reported[tail]["iteration"] - 1  # the iteration of the donor's checkpoint it went on from
    if not any(e[0] == donor and e[3] > at for e in exploits):  # the donor kept its line after `at`
        mine, theirs = read_metrics(run)[:copied], read_metrics(donor_run)[:copied]
        assert [(r["episodes"], r["return_mean"]) for r in mine] == [(r["episodes"], r["return_mean"]) for r in theirs]


def test_the_pbt_explore_step_keeps_values_in_their_ranges_and_types() -> None:
    integer = ClampToRange({"ppo.num_epochs": {"uniform": [2, 16]}, "q": {"quniform": [0.0, 1.0, 0.25]}},
                           integers=["ppo.num_epochs"])  # fmt: skip
    assert integer({"ppo.num_epochs": 9.6, "q": 0.4}) == {"ppo.num_epochs": 10, "q": 0.5}  # an int option stays one
    assert integer({"ppo.num_epochs": 19.2, "q": 1.3}) == {"ppo.num_epochs": 16, "q": 1.0}
    clamp = ClampToRange(
        {"ppo.lr": {"loguniform": [1e-4, 1e-2]}, "ppo.num_epochs": {"randint": [2, 9]}, "x": {"choice": [1]}}
    )
    assert clamp({"ppo.lr": 0.012, "ppo.num_epochs": 9.6, "x": 5}) == {"ppo.lr": 0.01, "ppo.num_epochs": 8, "x": 5}
    assert clamp({"ppo.lr": 5e-5, "ppo.num_epochs": 1.2}) == {"ppo.lr": 1e-4, "ppo.num_epochs": 2}
    assert clamp({"ppo.lr": 3e-3, "ppo.num_epochs": 4.4}) == {"ppo.lr": 3e-3, "ppo.num_epochs": 4}


def test_a_trials_run_directory_is_its_newest_start(tmp_path: Path) -> None:
    """By start order (the first run, then restored-<start ns>-... ones), not by rows: a later
    start from an older checkpoint holds fewer."""
    names = (("ppo-CartPole-v1-20261127-120000", 3), ("restored-01795787000000000000-ab", 5),
             ("restored-01795787100000000000-cd", 2))  # fmt: skip
    for name, rows in names:
        (tmp_path / name).mkdir()
        lines = ["iteration,env_steps"] + [f"{i},{i * 10}" for i in range(1, rows + 1)]
        (tmp_path / name / "metrics.csv").write_text("\n".join(lines) + "\n")
    assert trial_run_dir(tmp_path) == tmp_path / names[2][0]
    assert trial_run_dir(tmp_path / names[0][0] / "none") is None


PPO, DQN = 'algo = "ppo"\n', 'algo = "dqn"\n'
BAD_SWEEPS = [
    ("", "'algo' is missing (allowed: ppo, dqn)"),
    ('algo = "a2c"', "algo must be ppo or dqn (got 'a2c')"),
    (PPO + 'schedule = "asha"', "unknown key 'schedule'; did you mean 'scheduler'? (allowed: algo, metric, mode,"),
    (PPO + 'scheduler = "hyperband"', "scheduler must be one of fifo, asha, pbt (got 'hyperband')"),
    (PPO + 'metric = "reward"', "metric: 'reward' is no metrics.csv column of every run (allowed: iteration, "),
    (PPO + 'metric = "loss/vf_los"', "metric: 'loss/vf_los' is no metrics.csv column of every run (allowed: "),
    (
        PPO + 'metric = "return_men"',
        "metric: 'return_men' is no metrics.csv column of every run; did you mean 'return_mean' or 'return_min'? "
        "(allowed: iteration, ",
    ),
    (
        PPO + 'metric = "evaluation/episode_return_mean"',
        "metric 'evaluation/episode_return_mean': only a sweep whose trials evaluate has it: set",
    ),
    (PPO + '[space]\nppo.lr = {}', "space.ppo.lr: an empty table (a value, or a domain: choice,"),
    (PPO + '[space]\nppo.lr = { choice = [1e-3, -1.0] }', "--ppo.lr must be a finite number > 0 (got -1.0)"),
    (PPO + '[space]\nppo.lr = { grid = [1e-3, -1.0] }', "--ppo.lr must be a finite number > 0 (got -1.0)"),
    (
        PPO + 'scheduler = "asha"\n[config]\nmax_iterations = 10\n[asha]\ngrace_period = 50',
        "asha.grace_period must be <= max_t (10; got 50)",
    ),
    (PPO + 'scheduler = "asha"\n[space]\nmax_iterations = { grid = [20, 40] }', "asha.max_t: give it when the trials'"),
    (
        PPO + 'scheduler = "pbt"\n[pbt.mutations]\nppo.gamma = { uniform = [0.9, 1.5] }',
        "pbt.mutations.ppo.gamma: 1.5 is refused: --ppo.gamma must be",
    ),
    (
        PPO + 'scheduler = "pbt"\n[pbt.mutations]\nppo.lr = { choice = 5 }',
        "pbt.mutations.ppo.lr: choice takes a non-empty list",
    ),
    (PPO + 'num_samples = 0', "num_samples must be an integer >= 1 (got 0)"),
    (PPO + '[space]\nppo.lr = 0.001', "space.ppo.lr: a searched option is one domain, such as"),
    (PPO + '[space]\nppo.lr = { loguniform = [0, 1e-2] }', "space.ppo.lr: loguniform takes [low, high]"),
    (
        PPO + '[space]\nppo.lr = { normal = [0, 1] }',
        "space.ppo.lr: 'normal' is no domain; did you mean 'uniform'? (allowed: choice,",
    ),
    (
        PPO + '[space]\nppo.num_epochs = { randint = [4.5, 8] }',
        "space.ppo.num_epochs: randint takes [low, high] (integers",
    ),
    (
        PPO + '[config]\nppo.lr = { choice = [1e-3] }',
        "config.ppo.lr: a fixed value goes here; a domain goes under [space]",
    ),
    (
        PPO + '[config]\nppo.lr = 1e-3\n[space]\nppo.lr = { choice = [1e-3] }',
        "'ppo.lr' is both fixed ([config]) and searched",
    ),
    (PPO + '[space]\nppo.lrr = { choice = [1e-3] }', "'ppo.lrr' is no option"),
    (
        PPO + '[space]\nppo.entropy_coef = { choice = [0.0, 0.01] }',
        "trial config: 'ppo.entropy_coef' is no option of this command; did you mean 'ppo.entropy_coeff'? "
        "(see ray-sampler train --help-all)",
    ),
    (
        PPO + '[config]\nmax_iteration = 30',
        "trial config: 'max_iteration' is no option of this command; did you mean 'max_iterations'? "
        "(see ray-sampler train --help-all)",
    ),
    (
        DQN + '[config]\nmax_env_step = 3000',
        "trial config: 'max_env_step' is no option of this command; did you mean 'max_env_steps'? "
        "(see ray-sampler train-dqn --help-all)",
    ),
    (
        PPO + '[space]\nppo.lr = { logunifrom = [1e-4, 1e-2] }',
        "space.ppo.lr: 'logunifrom' is no domain; did you mean 'loguniform'? (allowed: choice, grid,",
    ),
    (PPO + '[space]\nppo.lr = { choice = [-1.0] }', "--ppo.lr must be a finite number > 0 (got -1.0)"),
    (
        PPO + '[asha]\ngrace = 2',
        "[asha]: unknown key 'grace' (allowed: time_attr, max_t, grace_period, reduction_factor)",
    ),
    (PPO + 'scheduler = "pbt"', "pbt.mutations: population-based training needs at least one option to mutate"),
    (
        PPO + 'scheduler = "pbt"\n[pbt.mutations]\nppo.observation_filter = { choice = ["mean_std"] }',
        "pbt.mutations: 'ppo.observation_filter' cannot change mid-run, so population-based training may not",
    ),
    (
        DQN + 'scheduler = "pbt"\n[pbt.mutations]\nreplay.capacity = { choice = [1000, 2000] }',
        "'replay.capacity' cannot change mid-run",
    ),
    (PPO + 'scheduler = "pbt"\n[pbt.mutations]\nppo.lr = { grid = [1e-3] }', "a mutation is a choice or a range"),
    (
        PPO + 'scheduler = "pbt"\n[pbt]\nquantile_fraction = 0.7\n[pbt.mutations]\nppo.lr = { choice = [1e-3] }',
        "pbt.quantile_fraction must be a number > 0 and <= 0.5 (got 0.7)",
    ),
    (PPO + '[asha]\ntime_attr = "episodes"', "asha.time_attr must be one of iteration, env_steps, elapsed_s"),
    ("algo = [", "is not valid TOML"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD_SWEEPS)
def test_a_bad_sweep_file_is_one_line_naming_the_key(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = sweep_file(tmp_path / "sweep.toml", text)
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--config", str(config), "--sweeps-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == EXIT_USAGE
    assert err.count("\n") == 1 and err.startswith("ray-sampler tune: error: ") and message in err, err
    assert list(tmp_path.iterdir()) == [config]  # no sweep directory made


def test_tune_help_says_where_the_trial_options_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "The trials' options are the training command's, keyed as in its config.toml (ppo.lr for --ppo.lr): "
        'ray-sampler train --help-all lists them (algo "ppo"), train-dqn --help-all for "dqn".'
    ) in text


def test_resume_and_config_are_one_or_the_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, message in (
        ([], "--config FILE starts a sweep and --resume DIR goes on with one: give one of them"),
        (
            ["--resume", str(tmp_path)],
            f"--resume: a sweep directory with a sweep.toml is allowed (got {str(tmp_path)!r})",
        ),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["tune", *args])
        assert exit_info.value.code == EXIT_USAGE
        assert message in capsys.readouterr().err


def test_the_example_sweep_file_reads_and_the_sweep_page_shows_it() -> None:
    root = Path(__file__).resolve().parents[3]
    example = root / "examples" / "sweep_cartpole.toml"
    sweep = check_sweep_file(example)
    assert (sweep.algo, sweep.scheduler, sweep.num_samples) == ("ppo", "asha", 4)
    assert sorted(sweep.space) == ["ppo.entropy_coeff", "ppo.lr"]
    body = example.read_text()[example.read_text().index('algo = "ppo"') :]
    assert body in (root / "docs" / "tune.md").read_text()


def test_a_sweep_whose_trials_evaluate_may_rank_them_by_the_evaluation_return(tmp_path: Path) -> None:
    text = 'algo = "ppo"\nmetric = "evaluation/episode_return_mean"\n[config]\nevaluation.evaluation_interval = 2\n'
    sweep = read_sweep(sweep_file(tmp_path / "s.toml", text))
    assert sweep.metric == "evaluation/episode_return_mean"


def test_the_flags_override_the_files_samples_and_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sweep_file(tmp_path / "s.toml", 'algo = "ppo"\nnum_samples = 2\nscheduler = "asha"\n')
    assert (read_sweep(path).num_samples, read_sweep(path).scheduler) == (2, "asha")
    overridden = read_sweep(path, num_samples=5, scheduler="fifo")
    assert (overridden.num_samples, overridden.scheduler) == (5, "fifo")
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--config", str(path), "--num-samples", "0"])
    assert exit_info.value.code == EXIT_USAGE
    assert "--num-samples must be an integer >= 1 (got 0)" in capsys.readouterr().err
