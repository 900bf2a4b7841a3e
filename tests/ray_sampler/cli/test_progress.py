"""The training progress display: plain lines off a terminal, the live display on one, the summary block."""

from __future__ import annotations

import io
import math
import re
from pathlib import Path
from typing import Any

import pytest

from learner.metrics import IterationRecord, PPOTrainResult, TrainResult
from learner.train import PPOTrainingConfig, train_ppo
from ray_sampler.cli.progress import (
    Outcome,
    RunSummary,
    TrainingProgress,
    format_duration,
    format_rate,
    iteration_line,
)
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from tests.ray_sampler.cli.fake_run import make_record

ZERO_SUM_OUTCOMES = {
    "win/player_1": 0.45, "draw/player_1": 0.1, "loss/player_1": 0.45,
    "win/player_2": 0.45, "draw/player_2": 0.1, "loss/player_2": 0.45,
}  # fmt: skip
"""A two-agent run's ``IterationRecord.outcomes``: a zero-sum game between even players."""
TICTACTOE_BY = {"module/shared": 0.0, "agent/player_1": 0.0, "agent/player_2": 0.0}


def _zero_sum_record(**overrides: Any) -> IterationRecord:
    """A record of a zero-sum two-agent run (one module for both agents, as tictactoe gets by default)."""
    fields = {"returns_by": TICTACTOE_BY, "outcomes": ZERO_SUM_OUTCOMES, "is_zero_sum": True, "return_mean": 0.0}
    return make_record(**{**fields, "best_return_mean": 0.0, **overrides})


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class _Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _text(stream: io.StringIO) -> str:
    """What a terminal shows, less the escape codes (cursor moves, colours)."""
    return _ANSI.sub("", stream.getvalue())


def _summary(**overrides: Any) -> RunSummary:
    fields: dict[str, Any] = {
        "outcome": Outcome.TARGET_REACHED,
        "return_mean": 487.25,
        "window": 100,
        "target_return": 475.0,
        "env_steps": 204_800,
        "episodes": 1523,
        "elapsed_s": 72.0,
    }
    fields.update(overrides)
    return RunSummary(**fields)


class TestPlainMode:
    def test_prints_one_line_per_iteration_with_its_figures(self) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=True) as progress:
            progress.update(make_record())
            progress.update(
                make_record(iteration=4, env_steps=8192, episodes=80, return_mean=42.0, window=80, elapsed_s=61.0)
            )
        assert out.getvalue().splitlines() == [
            "iter 3: 6144 env steps, 41.2k steps/s, 57 episodes, mean return 31.5 (last 57), best -, 1.2 s",
            "iter 4: 8192 env steps, 41.2k steps/s, 80 episodes, mean return 42.0 (last 80), best -, 1 min 01 s",
        ]

    def test_a_stream_that_is_not_a_terminal_gets_plain_lines(self) -> None:
        out = io.StringIO()
        progress = TrainingProgress(out)
        progress.update(make_record())
        progress.close()
        assert not progress.is_live
        assert out.getvalue().startswith("iter 3: 6144 env steps")

    def test_plain_true_overrides_a_terminal(self) -> None:
        out = _Terminal()
        progress = TrainingProgress(out, plain=True)
        progress.update(make_record())
        progress.close()
        assert not progress.is_live
        assert out.getvalue() == (
            "iter 3: 6144 env steps, 41.2k steps/s, 57 episodes, mean return 31.5 (last 57), best -, 1.2 s\n"
        )

    def test_env_step_budget_follows_the_env_steps(self) -> None:
        line = iteration_line(make_record(), total_env_steps=100_000)
        assert line.startswith("iter 3: 6144/100000 env steps, ")

    def test_iteration_budget_follows_the_iteration(self) -> None:
        line = iteration_line(make_record(best_return_mean=30.25), total_iterations=50)
        assert line == (
            "iter 3/50: 6144 env steps, 41.2k steps/s, 57 episodes, mean return 31.5 (last 57), best 30.2, 1.2 s"
        )

    def test_an_asynchronous_line_gives_the_policy_lag_and_the_steps_not_learned_from(self) -> None:
        figures = {
            "policy_lag_mean": 1.25, "policy_lag_max": 4.0, "num_env_steps_dropped": 256.0,
            "num_env_steps_unused": 512.0,
        }  # fmt: skip
        line = iteration_line(make_record(asynchronous=figures, num_env_steps_lost=128), total_env_steps=100_000)
        assert line == (
            "iter 3: 6144/100000 env steps, 41.2k steps/s, 57 episodes, mean return 31.5 (last 57), best -, "
            "lag 1.25 (max 4), dropped/unused/lost 256/512/128, 1.2 s"
        )

    def test_a_multi_agent_line_gives_the_summed_return_and_each_modules(self) -> None:
        by = {"module/p0": 20.25, "module/p1": math.nan, "agent/0": 20.25, "agent/1": math.nan}
        line = iteration_line(make_record(returns_by=by, best_return_mean=30.25), total_iterations=50)
        assert line == (
            "iter 3/50: 6144 env steps, 41.2k steps/s, 57 episodes, summed return 31.5 (last 57); p0 20.2, p1 -, "
            "best 30.2, 1.2 s"
        )

    def test_a_zero_sum_line_gives_each_agents_rates_in_place_of_the_summed_return(self) -> None:
        line = iteration_line(_zero_sum_record(), total_iterations=50)
        assert line == (
            "iter 3/50: 6144 env steps, 41.2k steps/s, 57 episodes, player_1 won 45% drew 10% lost 45%, "
            "player_2 won 45% drew 10% lost 45% (last 57), 1.2 s"
        )

    def test_a_zero_sum_line_keeps_the_returns_of_several_modules(self) -> None:
        by = {"module/main": 0.25, "module/random": -0.25, "agent/player_1": 0.0, "agent/player_2": 0.0}
        line = iteration_line(_zero_sum_record(returns_by=by))
        assert "player_2 won 45% drew 10% lost 45% (last 57); main 0.25, random -0.25, 1.2 s" in line

    def test_a_two_agent_game_that_is_not_zero_sum_keeps_the_summed_return(self) -> None:
        record = _zero_sum_record(is_zero_sum=False, return_mean=1.5, best_return_mean=1.25)
        assert iteration_line(record) == (
            "iter 3: 6144 env steps, 41.2k steps/s, 57 episodes, summed return 1.5 (last 57); shared 0, "
            "best 1.25, 1.2 s"
        )

    def test_an_iteration_that_evaluated_gives_the_evaluation_return(self) -> None:
        evaluated = make_record(best_return_mean=30.25, evaluation={"episode_return_mean": 412.5, "num_episodes": 10})
        assert iteration_line(evaluated).endswith("(last 57), best 30.2, evaluation 412.5, 1.2 s")
        skipped = make_record(best_return_mean=30.25, evaluation={"episode_return_mean": math.nan})
        assert iteration_line(skipped).endswith("(last 57), best 30.2, 1.2 s")

    def test_an_evaluation_against_the_random_opponent_gives_its_rates(self) -> None:
        against = {"episode_return_mean": 0.5, "win": 0.7, "draw": 0.1, "loss": 0.2, "win/player_1": 0.9}
        line = iteration_line(_zero_sum_record(evaluation=against))
        assert line.endswith("(last 57), evaluation against random won 70% drew 10% lost 20%, 1.2 s")
        skipped = {**against, "episode_return_mean": math.nan, "win": math.nan}
        assert "evaluation" not in iteration_line(_zero_sum_record(evaluation=skipped))

    def test_no_window_before_the_first_episode(self) -> None:
        record = make_record(iteration=1, episodes=0, window=0, return_mean=math.nan, return_min=math.nan)
        assert "0 episodes, mean return -, best -," in iteration_line(record)

    def test_log_lines_print_in_order_between_iterations(self) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=True) as progress:
            progress.update(make_record(iteration=1))
            progress.log("runner 2 died (ActorDiedError); restarted (restart 1 of 1000)")
            progress.update(make_record(iteration=2))
        lines = out.getvalue().splitlines()
        assert [line[:6] for line in lines] == ["iter 1", "runner", "iter 2"]
        assert lines[1] == "runner 2 died (ActorDiedError); restarted (restart 1 of 1000)"

    def test_close_prints_the_summary_block(self) -> None:
        out = io.StringIO()
        progress = TrainingProgress(out, plain=True)
        summary = _summary(
            num_env_runner_restarts=2,
            num_env_steps_lost=512,
            run_dir=Path("runs/ppo-CartPole-v1-20261123-153314"),
            notes=("learning curve: runs/ppo-CartPole-v1-20261123-153314/curve.png",),
        )
        progress.close(summary)
        assert out.getvalue().splitlines() == [
            "Target reached: mean return 487.2 over the last 100 episodes (target 475)",
            "  env steps   204,800",
            "  episodes    1,523",
            "  wall time   1 min 12 s",
            "  throughput  2.84k env steps/s",
            "  failures    2 env runner restarts, 512 env steps lost",
            "  run dir     runs/ppo-CartPole-v1-20261123-153314",
            "learning curve: runs/ppo-CartPole-v1-20261123-153314/curve.png",
        ]

    def test_the_summary_says_what_stopped_the_run_and_the_asynchronous_figures(self) -> None:
        out = io.StringIO()
        figures = {
            "policy_lag_mean": 1.25, "policy_lag_max": 4.0, "num_env_steps_dropped": 0.0,
            "num_env_steps_unused": 1024.0,
        }  # fmt: skip
        stopped_by = "--max-env-steps 204,800 (the first budget reached)"
        summary = _summary(outcome=Outcome.TARGET_MISSED, stopped_by=stopped_by, asynchronous=figures)
        TrainingProgress(out, plain=True).close(summary)
        assert out.getvalue().splitlines()[5:] == [
            "  stopped by  --max-env-steps 204,800 (the first budget reached)",
            "  policy lag  mean 1.25, max 4 updates",
            "  not learned 0 dropped, 1,024 unused, 0 lost env steps",
        ]


class TestLiveMode:
    def test_a_terminal_stream_gets_the_live_display(self) -> None:
        progress = TrainingProgress(_Terminal())
        assert progress.is_live
        progress.close()

    def test_renders_the_figures_of_the_last_update(self) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=False, total_env_steps=100_000) as progress:
            progress.update(make_record(iteration=2, env_steps=4096))
            progress.update(make_record(best_return_mean=30.25))
        text = _text(out)
        assert "6% iter 3 · 6,144 / 100,000 env steps" in text
        last = text[text.rindex("6% iter 3") :]
        for figure in ("41.2k steps/s", "57 episodes", "mean return 31.5 (last 57)", "best 30.2", "1.2 s"):
            assert figure in last

    def test_with_both_budgets_the_bar_follows_the_one_nearer_its_end(self) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=False, total_env_steps=100_000, total_iterations=12) as progress:
            progress.update(make_record())
        assert "25% iter 3/12 · 6,144 / 100,000 env steps" in _text(out)

    def test_a_zero_sum_run_shows_the_rates(self) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=False) as progress:
            progress.update(_zero_sum_record())
        text = re.sub(r"\s+", " ", _text(out))  # wrapped at 80
        assert "player_1 won 45% drew 10% lost 45%, player_2 won 45% drew 10% lost 45% (last 57)" in text
        assert "summed return" not in text and "best" not in text

    def test_the_display_keeps_the_last_evaluation_against_the_opponent(self) -> None:
        out = io.StringIO()
        against = {"episode_return_mean": 0.5, "win": 0.7, "draw": 0.1, "loss": 0.2}
        with TrainingProgress(out, plain=False) as progress:
            progress.update(_zero_sum_record(evaluation=against))
            progress.update(_zero_sum_record(iteration=4, evaluation=dict.fromkeys(against, math.nan)))
        assert "evaluation against random won 70% drew 10% lost 20%" in re.sub(r"\s+", " ", _text(out))

    def test_an_asynchronous_run_shows_the_policy_lag(self) -> None:
        out = io.StringIO()
        figures = {"policy_lag_mean": 0.5, "policy_lag_max": 2.0, "num_env_steps_dropped": 0.0}
        with TrainingProgress(out, plain=False) as progress:
            progress.update(make_record(asynchronous={**figures, "num_env_steps_unused": 0.0}))
        assert "lag 0.5 (max 2), dropped/unused/lost 0/0/0" in re.sub(r"\s+", " ", _text(out))  # wrapped at 80

    def test_iteration_budget_shows_iteration_of_total(self) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=False, total_iterations=30) as progress:
            progress.update(make_record())
        assert "10% iter 3/30 · 6,144 env steps" in _text(out)

    def test_log_line_prints_above_the_display(self) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=False) as progress:
            progress.update(make_record(iteration=1))
            progress.log("runner 0 died; restarted")
            progress.update(make_record(iteration=2))
        text = _text(out)
        assert "runner 0 died; restarted" in text
        assert text.rindex("runner 0 died; restarted") < text.rindex("iter 2")

    @pytest.mark.parametrize(
        ("outcome", "mark", "bar", "label"),
        [
            (Outcome.TARGET_REACHED, "✓", "━" * 30, "target reached: iter 55/120 · 56,320 env steps"),
            (Outcome.TARGET_MISSED, "✗", "━" * 30, "target missed: iter 55/120 · 56,320 env steps"),
            (Outcome.BUDGET_USED, "✓", "━" * 30, "budget used: iter 55/120 · 56,320 env steps"),
            (Outcome.INTERRUPTED, "■", "━" * 13 + "╸" + "━" * 16, "interrupted: 46% iter 55/120 · 56,320 env steps"),
        ],
        ids=["reached-early", "missed", "budget", "interrupted"],
    )
    def test_the_last_frame_says_how_the_run_ended(self, outcome: Outcome, mark: str, bar: str, label: str) -> None:
        # A run that stops early (its target reached at iteration 55 of 120) ends with its bar full,
        # not frozen at 46%; an interrupted one keeps its bar where it stopped.
        out = io.StringIO()
        with TrainingProgress(out, plain=False, total_iterations=120) as progress:
            progress.update(make_record(iteration=55, env_steps=56_320))
            progress.close(_summary(outcome=outcome))
        text = _text(out)
        frames = re.findall(r"(\S) (━+╸?━*) ([^\n]*iter 55/120[^\n]*)", text[: text.index("run summary")])
        assert frames[-1] == (mark, bar, label)

    @pytest.mark.parametrize(
        ("outcome", "headline"),
        [
            (Outcome.TARGET_REACHED, "Target reached: mean return 487.2 over the last 100 episodes (target 475)"),
            (Outcome.TARGET_MISSED, "Target missed: mean return 487.2 over the last 100 episodes (target 475)"),
            (Outcome.INTERRUPTED, "Interrupted: mean return 487.2 over the last 100 episodes (target 475)"),
        ],
        ids=["reached", "missed", "interrupted"],
    )
    def test_summary_block_names_the_outcome(self, outcome: Outcome, headline: str) -> None:
        out = io.StringIO()
        with TrainingProgress(out, plain=False) as progress:
            progress.update(make_record())
            progress.close(_summary(outcome=outcome, run_dir=Path("runs/ppo-x")))
        text = _text(out)
        summary = text[text.index("run summary") :]
        assert headline in summary
        assert re.search(r"run dir\s+runs/ppo-x", summary)
        assert re.search(r"throughput\s+2\.84k env steps/s", summary)
        assert "failures" not in summary


def _result(*, reached: bool, target: float | None) -> TrainResult:
    return PPOTrainResult(
        reached=reached,
        target_return=target,
        mean_return=480.0,
        env_steps=1000,
        seconds=2.0,
        iterations=5,
        sample_s=1.0,
        update_s=1.0,
        learner_connector_s=0.1,
    )


class TestRunSummary:
    @pytest.mark.parametrize(
        ("result", "outcome"),
        [
            (_result(reached=True, target=475.0), Outcome.TARGET_REACHED),
            (_result(reached=False, target=475.0), Outcome.TARGET_MISSED),
            (_result(reached=False, target=None), Outcome.BUDGET_USED),
            (None, Outcome.INTERRUPTED),
        ],
        ids=["reached", "missed", "budget", "interrupted"],
    )
    def test_of_a_result_names_how_the_run_ended(self, result: TrainResult | None, outcome: Outcome) -> None:
        assert RunSummary.of(result, make_record()).outcome == outcome

    def test_of_takes_totals_from_the_last_record_and_the_mean_from_the_result(self) -> None:
        last = make_record(num_env_runner_restarts=1, num_env_steps_lost=64)
        summary = RunSummary.of(_result(reached=True, target=475.0), last, run_dir=Path("r"), notes=("n",))
        assert summary == RunSummary(
            outcome=Outcome.TARGET_REACHED,
            return_mean=480.0,
            window=57,
            target_return=475.0,
            env_steps=6144,
            episodes=57,
            elapsed_s=1.2,
            num_env_runner_restarts=1,
            num_env_steps_lost=64,
            run_dir=Path("r"),
            notes=("n",),
        )

    def test_of_a_zero_sum_run_gives_the_rates_in_the_headline(self) -> None:
        summary = RunSummary.of(_result(reached=False, target=None), _zero_sum_record())
        assert summary.headline() == (
            "Budget used: player_1 won 45% drew 10% lost 45%, player_2 won 45% drew 10% lost 45% "
            "over the last 57 episodes"
        )

    def test_of_a_two_agent_run_that_is_not_zero_sum_keeps_the_summed_headline(self) -> None:
        summary = RunSummary.of(_result(reached=False, target=None), _zero_sum_record(is_zero_sum=False))
        assert summary.headline() == "Budget used: summed return 480.0 over the last 57 episodes"

    def test_a_run_stopped_on_its_evaluations_gives_the_last_one_in_the_headline(self) -> None:
        against = {"episode_return_mean": 0.755, "win": 0.86, "draw": 0.04, "loss": 0.1}
        summary = RunSummary.of(
            _result(reached=True, target=0.75), _zero_sum_record(), evaluation=against, stop_on_evaluation=True
        )
        assert summary.headline() == (
            "Target reached: last evaluation against random won 86% drew 4% lost 10%, return 0.755 (target 0.75)"
        )
        greedy = RunSummary.of(
            _result(reached=True, target=475.0), make_record(), evaluation={"episode_return_mean": 500.0},
            stop_on_evaluation=True,
        )  # fmt: skip
        assert greedy.headline() == "Target reached: last evaluation return 500.0 (target 475)"
        on_training = RunSummary.of(_result(reached=True, target=475.0), make_record(), evaluation=against)
        assert on_training.headline().startswith("Target reached: mean return 480.0 over the last 57 episodes")

    def test_interrupted_before_any_iteration_says_no_episode_finished(self) -> None:
        summary = RunSummary.of(None, None)
        assert summary.headline() == "Interrupted: no episode finished"
        assert summary.rows()[:3] == [("env steps", "0"), ("episodes", "0"), ("wall time", "0.0 s")]

    def test_budget_used_headline_has_no_target(self) -> None:
        assert _summary(outcome=Outcome.BUDGET_USED, target_return=None).headline() == (
            "Budget used: mean return 487.2 over the last 100 episodes"
        )


class TestLifecycle:
    def test_budget_below_one_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="'total_iterations' must be an int >= 1 \\(got 0\\)"):
            TrainingProgress(io.StringIO(), total_iterations=0)

    def test_update_after_close_raises(self) -> None:
        progress = TrainingProgress(io.StringIO(), plain=True)
        progress.close()
        with pytest.raises(RuntimeError, match="update\\(\\) after close\\(\\)"):
            progress.update(make_record())

    def test_leaving_the_block_on_an_error_stops_the_display_without_a_summary(self) -> None:
        out = io.StringIO()
        with pytest.raises(KeyboardInterrupt), TrainingProgress(out, plain=False) as progress:
            progress.update(make_record())
            raise KeyboardInterrupt
        assert "iter 3" in _text(out)
        assert "run summary" not in _text(out)


@pytest.mark.parametrize(
    ("per_s", "text"),
    [(850.4, "850"), (41_234.0, "41.2k"), (1_250_000.0, "1.25M"), (math.nan, "-")],
    ids=["units", "thousands", "millions", "nan"],
)
def test_format_rate(per_s: float, text: str) -> None:
    assert format_rate(per_s) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1.24, "1.2 s"), (59.94, "59.9 s"), (245.0, "4 min 05 s"), (7385.0, "2 h 03 min")],
    ids=["seconds", "under-a-minute", "minutes", "hours"],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.usefixtures("ray_session")
def test_a_tictactoe_run_shows_each_players_rates() -> None:
    runner = EnvRunnerConfig(
        env="pettingzoo:tictactoe_v3", num_envs_per_env_runner=2, rollout_fragment_length=64, seed=0
    )
    group = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)
    records: list[IterationRecord] = []
    out = io.StringIO()
    with TrainingProgress(out, plain=True) as progress:

        def on_iteration(record: IterationRecord) -> None:
            records.append(record)
            progress.update(record)

        train_ppo(
            PPOTrainingConfig(env_runner=runner, env_runner_group=group, max_iterations=2),
            on_iteration=on_iteration,
            log=lambda line: None,
        )
    for record in records:  # a game is won by one player, lost by the other, or drawn
        assert record.is_zero_sum and record.return_mean == 0.0
        for agent in ("player_1", "player_2"):
            shares = [record.outcomes[f"{kind}/{agent}"] for kind in ("win", "draw", "loss")]
            assert sum(shares) == pytest.approx(1.0)
        assert record.outcomes["win/player_1"] == record.outcomes["loss/player_2"]
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["iter 1: 128 env steps", "iter 2: 256 env steps"]
    assert re.fullmatch(
        r"iter 2: 256 env steps, \S+ steps/s, \d+ episodes, player_1 won \d+% drew \d+% lost \d+%, "
        r"player_2 won \d+% drew \d+% lost \d+% \(last \d+\), [\d.]+ s",
        lines[1],
    )
