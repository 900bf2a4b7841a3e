"""ReturnTracker: the window of finished episodes' returns, and a two-agent run's win, draw and loss rates."""

from __future__ import annotations

import math

import pytest

from learner.checkpoint import TrainingState
from learner.metrics import IterationRecord
from learner.return_tracker import ReturnTracker

AGENTS = ["agent/player_1", "agent/player_2"]


def _two_agents(
    player_1: list[float], player_2: list[float], *, window: int = 100, target: float | None = None
) -> ReturnTracker:
    """A tracker of a two-agent run (its agent windows expected from the start, as the loops do) that
    got one episode per pair of returns."""
    tracker = ReturnTracker(target, window=window)
    tracker.expect(["module/shared", *AGENTS])
    summed = [a + b for a, b in zip(player_1, player_2)]
    tracker.add(summed, by={"module/shared": summed, AGENTS[0]: player_1, AGENTS[1]: player_2})
    return tracker


def _record(tracker: ReturnTracker) -> IterationRecord:
    return tracker.record(1, 10, losses={})


class TestOutcomes:
    def test_shares_of_the_window_won_drawn_and_lost_per_agent(self) -> None:
        tracker = _two_agents([1.0, -1.0, 0.0], [-1.0, 1.0, 0.0])
        third = 1 / 3
        expected = {f"{kind}/{agent}": third for agent in ("player_1", "player_2") for kind in ("win", "draw", "loss")}
        assert _record(tracker).outcomes == pytest.approx(expected)

    def test_keys_come_agent_by_agent_in_their_order(self) -> None:
        tracker = _two_agents([1.0, 1.0, -1.0, 0.0], [-1.0, -1.0, 1.0, 0.0])
        assert list(_record(tracker).outcomes.items()) == [
            ("win/player_1", 0.5), ("draw/player_1", 0.25), ("loss/player_1", 0.25),
            ("win/player_2", 0.25), ("draw/player_2", 0.25), ("loss/player_2", 0.5),
        ]  # fmt: skip

    def test_a_return_within_1e_9_of_zero_is_a_draw(self) -> None:
        tracker = _two_agents([1e-10, 2e-9], [-1e-10, -2e-9])
        outcomes = _record(tracker).outcomes
        assert (outcomes["win/player_1"], outcomes["draw/player_1"], outcomes["loss/player_1"]) == (0.5, 0.5, 0.0)

    def test_only_the_last_window_of_episodes_counts(self) -> None:
        tracker = _two_agents([-1.0, 1.0, 1.0], [1.0, -1.0, -1.0], window=2)
        assert _record(tracker).outcomes["win/player_1"] == 1.0

    def test_every_share_is_nan_before_the_first_episode(self) -> None:
        tracker = ReturnTracker(None)
        tracker.expect(["module/shared", *AGENTS])
        record = _record(tracker)
        assert list(record.outcomes) == [
            "win/player_1", "draw/player_1", "loss/player_1", "win/player_2", "draw/player_2", "loss/player_2",
        ]  # fmt: skip
        assert all(math.isnan(v) for v in record.outcomes.values()) and not record.is_zero_sum

    def test_a_single_agent_run_has_none(self) -> None:
        tracker = ReturnTracker(None)
        tracker.add([0.0, 1.0])
        record = _record(tracker)
        assert record.outcomes == {} and not record.is_zero_sum

    def test_a_run_of_three_agents_has_none(self) -> None:
        tracker = ReturnTracker(None)
        by = {"agent/a": [1.0], "agent/b": [-1.0], "agent/c": [0.0]}
        tracker.add([0.0], by=by)
        record = _record(tracker)
        assert record.outcomes == {} and not record.is_zero_sum

    def test_a_restored_tracker_gives_the_same_outcomes(self) -> None:
        tracker = _two_agents([1.0, -1.0, 0.0, 1.0], [-1.0, 1.0, 0.0, -1.0])
        state = TrainingState(algo="ppo", env="e", observation_space="s", iteration=1, env_steps=10,
                              **tracker.checkpoint_fields())  # fmt: skip
        restored = ReturnTracker(None)
        restored.restore(state)
        assert _record(restored).outcomes == _record(tracker).outcomes
        assert restored.is_zero_sum


class TestZeroSum:
    def test_a_window_whose_every_episode_sums_to_zero_is_zero_sum(self) -> None:
        tracker = _two_agents([1.0, -1.0, 0.0], [-1.0, 1.0, 0.0])
        assert _record(tracker).is_zero_sum

    def test_a_sum_within_1e_6_of_zero_is_zero_sum(self) -> None:
        tracker = _two_agents([1.0, -1.0], [-1.0 + 5e-7, 1.0])
        assert tracker.is_zero_sum

    def test_one_episode_that_does_not_sum_to_zero_makes_it_not_zero_sum(self) -> None:
        tracker = _two_agents([1.0, -1.0, 1.0], [-1.0, 1.0, 1.0])
        record = _record(tracker)
        assert not record.is_zero_sum and record.outcomes["win/player_2"] == pytest.approx(2 / 3)

    def test_a_zero_sum_run_without_a_target_ends_on_its_rates(self) -> None:
        lines: list[str] = []
        result = _two_agents([1.0, -1.0, 1.0, 0.0], [-1.0, 1.0, -1.0, 0.0]).finish(8, lines.append)
        assert lines[0].startswith(
            "budget used (no target): player_1 won 50% drew 25% lost 25%, player_2 won 25% drew 25% lost 50% "
            "(last 4 episodes) after 8 env steps in "
        )
        assert result.mean_return == 0.0

    def test_with_a_target_the_verdict_stays_on_the_summed_return(self) -> None:
        tracker = _two_agents([1.0, -1.0], [-1.0, 1.0], window=2, target=0.5)
        lines: list[str] = []
        tracker.finish(8, lines.append)
        assert lines[0].startswith("did not reach summed return 0.5: 0.0 (last 2 episodes) after 8 env steps")
