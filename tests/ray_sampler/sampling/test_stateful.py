"""Stateful modules in the runner: every step's state_in is the previous step's state_out, or the
initial state at an episode's start, in both batch modes, both engines, every autoreset mode,
across cuts and sample() calls, and after a failed sub-env is rebuilt."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.env_runner import EnvRunner
from tests.ray_sampler.sampling.checks import MODES, stamp_config, stamps
from tests.ray_sampler.sampling.counter_module import CounterModule
from tests.ray_sampler.sampling.faults import FaultPlan, faulty_creator


def _counts(state_out: Any) -> list[float]:
    """The ``count`` of each step's state (a batched dict, or a list of per-step dicts)."""
    if isinstance(state_out, list):
        return [float(s["count"][0]) for s in state_out]
    return np.asarray(state_out["count"])[:, 0].tolist()


def _check_counts(chunks: list[SingleAgentEpisode]) -> int:
    """Each step's stored state_out is its episode step t + 1 (so the state_in it saw was t), and a
    continuation chunk's lookback ends with the state_out of the step before it; returns the steps."""
    steps = 0
    for c in chunks:
        ts = [s[3] for s in stamps(c)[:-1]]  # the observation each step acted on: its episode step
        assert ts == list(range(c.t_started, c.t_started + len(c)))
        seen = np.asarray(c.get_extra_model_outputs("seen")).tolist()
        counts = _counts(c.get_extra_model_outputs("state_out"))
        assert seen == ts
        assert counts == [t + 1 for t in ts]
        if c.t_started > 0:
            assert c.len_lookback_buffer >= 1
            before = c.get_extra_model_outputs("state_out", -1, neg_index_as_lookback=True)
            assert before["count"].tolist() == [c.t_started]
        steps += len(c)
    return steps


@pytest.mark.parametrize("columnar", [True, False], ids=["vectorized", "per-step"])
@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
@pytest.mark.parametrize("mode", MODES)
def test_state_in_is_the_previous_state_out(mode: str, batch_mode: str, columnar: bool) -> None:
    config = stamp_config(mode, module_class=CounterModule, batch_mode=batch_mode, columnar_sampling=columnar)
    runner = EnvRunner(config)
    try:
        calls = [runner.sample() for _ in range(4)] + [runner.sample(num_episodes=2)]
    finally:
        runner.stop()
    num_steps = sum(_check_counts(chunks) for chunks in calls)
    assert num_steps >= 4 * 15
    assert any(c.t_started > 0 for chunks in calls for c in chunks) or batch_mode == "complete_episodes"


def test_a_rebuilt_sub_env_starts_from_the_initial_state() -> None:
    plan = FaultPlan(steps={(0, 3), (1, 7)})
    config = stamp_config(
        "sync",
        env=faulty_creator,
        env_config={"plan": plan},
        module_class=CounterModule,
        restart_failed_sub_environments=True,
    )
    runner = EnvRunner(config)
    try:
        calls = [runner.sample() for _ in range(3)]
    finally:
        runner.stop()
    assert len(plan.step_faults) == 2
    for chunks in calls:
        _check_counts(chunks)


def test_a_stateful_module_needs_a_lookback_step_in_truncate_mode() -> None:
    with pytest.raises(ConfigError, match=r"'episode_lookback_horizon' must be >= 1 .*CounterModule"):
        EnvRunner(stamp_config(module_class=CounterModule, episode_lookback_horizon=0))
    runner = EnvRunner(
        stamp_config(module_class=CounterModule, episode_lookback_horizon=0, batch_mode="complete_episodes")
    )
    runner.stop()


class _NoStateOut(CounterModule):
    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = super().forward_exploration(batch)
        del out["state_out"]
        return out


class _NoInitialState(CounterModule):
    def get_initial_state(self) -> dict[str, np.ndarray]:
        return {}


def test_a_stateful_module_without_state_out_or_initial_state_is_refused() -> None:
    runner = EnvRunner(stamp_config(module_class=_NoStateOut))
    try:
        with pytest.raises(ConfigError, match=r"must output 'state_out'"):
            runner.sample()
    finally:
        runner.stop()
    with pytest.raises(ConfigError, match=r"get_initial_state\(\) must return a non-empty dict"):
        EnvRunner(stamp_config(module_class=_NoInitialState))
