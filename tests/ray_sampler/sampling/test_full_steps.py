"""The multi-agent runner's fast engine (``full_steps``): the same chunks as the general engine, for the
same seeds, over every env family the tests use, both batch modes, with and without lookback; it is
picked where it applies and left, with no step lost or changed, where a sub-env stops fitting."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from connectors.env_to_module import FrameStackingEnvToModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from tests.ray_sampler.ma_envs import CallGame, RandomScheduleEnv, SignalEnv, TurnTakingEnv
from tests.ray_sampler.rllib_style_envs import LateJoinerEnv, SimultaneousEnv


class SameDictsEnv(SimultaneousEnv):
    """SimultaneousEnv handing back the same five dicts every step, changed in place (as some envs do)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self._out: tuple[dict, ...] = ({}, {}, {}, {}, {})

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        for mine, fresh in zip(self._out, super().step(action_dict), strict=True):
            mine.clear()
            mine.update(fresh)
        return self._out  # type: ignore[return-value]


ENVS: dict[str, Any] = {
    "cartpole2": make_multi_agent("CartPole-v1", num_agents=2),  # agents end alone: the engine switches
    "random-schedule": RandomScheduleEnv,  # joins, skips, hanging actions, rewards before the first observation
    "turn-taking": TurnTakingEnv,
    "signal": SignalEnv,
    "call-game": CallGame,
    "simultaneous": SimultaneousEnv,
    "same-dicts": SameDictsEnv,
    "late-joiner": LateJoinerEnv,
    "simple-spread": "pettingzoo:mpe2.simple_spread_v3",
}


_WALL_CLOCK = {"start_time", "last_step_time"}  # when a step was recorded: the one thing that may differ


def _equal(got: Any, want: Any, where: str = "") -> None:
    """Exactly equal, but for floating-point arrays a module computed (model outputs): within 1e-6."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for key in want:
            if key not in _WALL_CLOCK:
                _equal(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _equal(g, w, f"{where}[{k}]")
    elif isinstance(want, np.ndarray) and np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=where)
    elif isinstance(want, np.ndarray):
        assert np.array_equal(got, want), where
    else:
        assert got == want, where


def _runs(env: str, **config: Any) -> list[tuple[list[dict[str, Any]], Any]]:
    """Four ``sample()`` calls on each engine: every chunk's state, and the calls' metrics."""
    base = EnvRunnerConfig(
        env=ENVS[env], num_envs_per_env_runner=3, rollout_fragment_length=16, seed=5,
        multi_agent=MultiAgentConfig(), **config,
    )  # fmt: skip
    out = []
    for fast in (True, False):
        runner = MultiAgentEnvRunner(dataclasses.replace(base, columnar_sampling=fast))
        assert runner.uses_full_steps is fast
        runner._id_prefix = "run-"  # noqa: SLF001  # both runners name their episodes alike
        calls = []
        for _ in range(4):
            chunks = runner.sample()
            metrics = runner.get_metrics()
            calls.append(([ep.get_state() for ep in chunks], (metrics.num_env_steps, metrics.num_agent_steps,
                          metrics.episode_returns, metrics.episode_lengths)))  # fmt: skip
        out.append((calls, runner.num_full_steps))
        runner.stop()
    return out


@pytest.mark.parametrize("env", list(ENVS))
@pytest.mark.parametrize(
    "mode",
    [
        {"batch_mode": "truncate_episodes"},
        {"batch_mode": "truncate_episodes", "episode_lookback_horizon": 3},
        {"batch_mode": "complete_episodes"},
        {"batch_mode": "truncate_episodes", "count_steps_by": "agent_steps"},
    ],
    ids=["truncate", "lookback-3", "complete", "agent-steps"],
)
def test_both_engines_give_the_same_chunks(env: str, mode: dict[str, Any]) -> None:
    (fast, full_steps), (general, none) = _runs(env, **mode)
    assert none == 0
    for k, ((got, got_metrics), (want, want_metrics)) in enumerate(zip(fast, general, strict=True)):
        _equal(got_metrics, want_metrics, f"call {k} metrics")
        _equal(got, want, f"call {k}")
    if env in ("cartpole2", "signal", "call-game", "simultaneous", "same-dicts", "simple-spread"):
        assert full_steps > 0  # every agent acts at every step there: the fast engine ran
    if env == "turn-taking":
        assert full_steps == 0  # one player at a time: never a full step


def test_the_fast_engine_hands_over_mid_episode_when_an_agent_ends_alone() -> None:
    config = EnvRunnerConfig(
        env=ENVS["cartpole2"], num_envs_per_env_runner=1, rollout_fragment_length=400, seed=1,
        multi_agent=MultiAgentConfig(),
    )  # fmt: skip
    runner = MultiAgentEnvRunner(config)
    chunks = runner.sample()
    both = [ep for ep in chunks if ep.is_done]
    # In some episode one pole fell first: that agent ended alone, the other went on, one step at a time.
    lengths = [sorted(len(sa) for sa in ep.agent_episodes.values()) for ep in both]
    assert any(short < long for short, long in lengths)
    assert 0 < runner.num_full_steps < sum(len(ep) for ep in chunks)
    assert sum(len(ep) for ep in chunks) == 400  # no step lost at the hand-over


def test_history_pieces_or_columnar_sampling_off_keep_the_general_engine() -> None:
    base = EnvRunnerConfig(env=ENVS["cartpole2"], multi_agent=MultiAgentConfig(), seed=0)
    assert MultiAgentEnvRunner(base).uses_full_steps
    assert not MultiAgentEnvRunner(dataclasses.replace(base, columnar_sampling=False)).uses_full_steps
    stacked = dataclasses.replace(base, env_to_module_connectors=(FrameStackingEnvToModule(num_frames=2),))
    assert not MultiAgentEnvRunner(stacked).uses_full_steps  # it reads the episodes' past every step
