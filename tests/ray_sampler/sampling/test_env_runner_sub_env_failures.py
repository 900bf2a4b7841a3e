"""EnvRunner (plain class, no Ray): sub-env failures, with and without restarts, on every engine."""

from __future__ import annotations

from typing import Any

import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EnvError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.ray_sampler.sampling.checks import assert_steps_once_and_continuous, stamps
from tests.ray_sampler.sampling.faults import FAULTY_STAMP_ID, EnvBoom, FaultPlan, faulty_creator

ENGINES = [("truncate_episodes", True), ("truncate_episodes", False), ("complete_episodes", False)]
ENGINE_IDS = ["truncate-vectorized", "truncate-per_step", "complete-per_step"]


def _faulty_config(plan: FaultPlan, batch_mode: str, columnar: bool, **kwargs: Any) -> EnvRunnerConfig:
    base: dict[str, Any] = {
        "env": faulty_creator,
        "env_config": {"plan": plan},
        "num_envs_per_env_runner": 3,
        "rollout_fragment_length": 5,
        "batch_mode": batch_mode,
        "columnar_sampling": columnar,
        "restart_failed_sub_environments": True,
    }
    return EnvRunnerConfig(**{**base, **kwargs})


def _sample(runner: EnvRunner, calls: int) -> tuple[list[SingleAgentEpisode], list[Any]]:
    chunks, metrics = [], []
    for _ in range(calls):
        chunks += runner.sample()
        metrics.append(runner.get_metrics())
    return chunks, metrics


def _expected_dropped_steps(chunks: list[SingleAgentEpisode], ended: list[tuple[int, int, int]]) -> int:
    """Each ended episode (vector, episode, t when it ended) loses its steps after its last shipped one."""
    shipped: dict[tuple[int, int], int] = {}
    for c in chunks:
        for _, v, e, t in stamps(c):
            shipped[(v, e)] = max(shipped.get((v, e), 0), t)
    return sum(t - shipped.get((v, e), 0) for v, e, t in ended)


class TestSubEnvFailures:
    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_restarted_sub_env_drops_exactly_its_unshipped_steps(self, batch_mode: str, columnar: bool) -> None:
        # Sub-env 0 fails in steps 3 and 17, sub-env 1 in its first reset, step 10 and an autoreset;
        # sub-env 2 never fails.
        plan = FaultPlan(steps={(0, 3), (1, 10), (0, 17)}, resets={(1, 1), (1, 3)})
        runner = EnvRunner(_faulty_config(plan, batch_mode, columnar), worker_index=1)
        chunks, metrics = _sample(runner, 8)
        assert_steps_once_and_continuous(chunks)
        assert [(v, e) for v, e, _ in plan.step_faults] == [(0, 1), (1, 200), (0, 102)]
        assert plan.num_reset_faults == 2
        assert sum(m.num_sub_env_restarts for m in metrics) == 5
        assert sum(m.num_episodes_dropped_env_error for m in metrics) == 3
        dropped = sum(m.num_env_steps_dropped for m in metrics)
        assert dropped == _expected_dropped_steps(chunks, plan.step_faults) > 0
        held = sum(len(c) for c in runner.drain()[0])
        if batch_mode == "truncate_episodes":
            assert [m.num_env_steps for m in metrics] == [15] * 8
            assert plan.num_ok_steps == 15 * 8 + dropped + held  # every step made: shipped, dropped or held
        for v, e, _ in plan.step_faults:  # a failed episode never ends: it is never shipped as done
            assert not any(c.is_done for c in chunks if stamps(c)[0][1:3] == (v, e))
        # The sub-env that never failed went on untouched: consecutive episodes, all steps there.
        joined = [c for c in chunks if stamps(c)[0][1] == 2]
        episodes = sorted({stamps(c)[0][2] for c in joined})
        assert episodes == list(range(len(episodes))) and len(episodes) > 3

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_randomized_faults_in_one_percent_of_steps(self, batch_mode: str, columnar: bool) -> None:
        plan = FaultPlan(p=0.01, seed=5)
        config = _faulty_config(plan, batch_mode, columnar, num_envs_per_env_runner=4, rollout_fragment_length=25)
        runner = EnvRunner(config, worker_index=1)
        chunks, metrics = _sample(runner, 25)
        assert_steps_once_and_continuous(chunks)
        assert len(plan.step_faults) >= 10 and plan.num_reset_faults >= 1
        assert sum(m.num_sub_env_restarts for m in metrics) == len(plan.step_faults) + plan.num_reset_faults
        assert sum(m.num_episodes_dropped_env_error for m in metrics) == len(plan.step_faults)
        dropped = sum(m.num_env_steps_dropped for m in metrics)
        assert dropped == _expected_dropped_steps(chunks, plan.step_faults)
        held = sum(len(c) for c in runner.drain()[0])
        if batch_mode == "truncate_episodes":
            assert [m.num_env_steps for m in metrics] == [100] * 25
            assert plan.num_ok_steps == 100 * 25 + dropped + held

    @pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
    def test_native_vector_env_is_rebuilt_whole(self, mode: str) -> None:
        plan = FaultPlan(steps={(0, 7)})
        config = _faulty_config(
            plan,
            "truncate_episodes",
            False,
            env=FAULTY_STAMP_ID,
            vectorization_mode="vector_entry_point",
            env_config={"plan": plan, "autoreset_mode": mode},
        )
        runner = EnvRunner(config, worker_index=1)
        chunks, metrics = _sample(runner, 6)
        assert_steps_once_and_continuous(chunks)
        assert sum(m.num_sub_env_restarts for m in metrics) == 1
        assert [m.num_env_steps for m in metrics] == [15] * 6
        after = [c for c in chunks if stamps(c)[0][2] >= 100]
        assert {stamps(c)[0][1] for c in after} == {0, 1, 2}  # every sub-env is a new instance
        if mode == "SameStep":  # each sub-env had a running episode; sub-env 0 raised first, none had stepped
            assert sum(m.num_episodes_dropped_env_error for m in metrics) == 3
            running = [(v, e, t) for v, (e, t) in plan.snapshots[0].items()]
            assert sum(m.num_env_steps_dropped for m in metrics) == _expected_dropped_steps(chunks, running) > 0

    @pytest.mark.parametrize("columnar", [True, False])
    def test_native_masked_reset_failure_keeps_the_ended_episode(self, columnar: bool) -> None:
        plan = FaultPlan(resets={(0, 2)})  # sub-env 0's first masked reset, after its 2-step episode
        config = _faulty_config(
            plan,
            "truncate_episodes",
            columnar,
            env=FAULTY_STAMP_ID,
            vectorization_mode="vector_entry_point",
            env_config={"plan": plan, "autoreset_mode": "Disabled"},
        )
        runner = EnvRunner(config, worker_index=1)
        chunks, metrics = _sample(runner, 3)
        assert_steps_once_and_continuous(chunks)
        assert [m.num_env_steps for m in metrics] == [15] * 3
        assert sum(m.num_sub_env_restarts for m in metrics) == 1
        assert sum(m.num_episodes_dropped_env_error for m in metrics) == 2  # sub-envs 1 and 2 were running
        assert any(c.is_done and stamps(c)[-1] == (0, 0, 0, 2) for c in chunks)  # sub-env 0's episode ended
        # Sub-envs 1 and 2 lose their two steps each (the 2nd step was made, then the env was rebuilt).
        assert sum(m.num_env_steps_dropped for m in metrics) == 4

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_env_error_names_the_sub_env_and_keeps_the_cause(self, batch_mode: str, columnar: bool) -> None:
        plan = FaultPlan(steps={(1, 7)})
        runner = EnvRunner(
            _faulty_config(plan, batch_mode, columnar, restart_failed_sub_environments=False), worker_index=4
        )
        with pytest.raises(
            EnvError,
            match=r"^sub-env worker_index=4, vector_index=1 raised in step\(\): EnvBoom\('step 7 of sub-env 1'\)$",
        ) as info:
            _sample(runner, 3)
        assert isinstance(info.value.__cause__, EnvBoom)
        assert info.value.__cause__.__traceback__ is not None

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_after_env_error_only_fresh_episodes_are_shipped(self, batch_mode: str, columnar: bool) -> None:
        plan = FaultPlan(steps={(1, 12)})
        runner = EnvRunner(
            _faulty_config(plan, batch_mode, columnar, restart_failed_sub_environments=False), worker_index=1
        )
        before: list[SingleAgentEpisode] = []
        with pytest.raises(EnvError):
            for _ in range(10):
                before += runner.sample()
        made_before = plan.num_ok_steps
        after, metrics = _sample(runner, 4)
        assert_steps_once_and_continuous(before + after)
        assert not {c.id_ for c in before} & {c.id_ for c in after}
        assert all(stamps(c)[0][2] >= 100 for c in after)  # every sub-env was rebuilt and reset
        assert {stamps(c)[0][1] for c in after} == {0, 1, 2}
        assert metrics[0].num_env_steps_dropped == made_before - sum(len(c) for c in before)
        assert metrics[0].num_episodes_dropped_env_error == 3
        assert [m.num_env_steps_dropped for m in metrics[1:]] == [0, 0, 0]

    @pytest.mark.parametrize("seed", [0, None])
    def test_failed_first_reset_without_restarts_raises_then_recovers(self, seed: int | None) -> None:
        plan = FaultPlan(resets={(0, 1)})
        config = _faulty_config(plan, "truncate_episodes", True, restart_failed_sub_environments=False, seed=seed)
        runner = EnvRunner(config, worker_index=2)
        with pytest.raises(EnvError, match=r"^sub-env worker_index=2, vector_index=0 raised in reset\(\): EnvBoom"):
            runner.sample()
        chunks, metrics = _sample(runner, 2)
        assert_steps_once_and_continuous(chunks)
        assert {stamps(c)[0][1:3] for c in chunks if c.t_started == 0} >= {(0, 100), (1, 100), (2, 100)}
        assert [(m.num_sub_env_restarts, m.num_env_steps_dropped, m.num_env_steps) for m in metrics] == [
            (1, 0, 15),
            (0, 0, 15),
        ]
