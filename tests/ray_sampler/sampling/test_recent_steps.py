"""RecentSteps: the vectorized engine's view of the running episodes equals the per-step engine's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from connectors.env_to_module import RunningEpisodesView
from ray_sampler.sampling.env_runner import EnvRunner
from tests.helpers import assert_episodes_equal
from tests.ray_sampler.sampling.checks import MODES
from tests.ray_sampler.sampling.frames import frame_config, ordered

CASES: dict[str, dict[str, Any]] = {
    "discrete": {},
    "box_actions": {"box_actions": True},
    "nested_frames": {"nested": True},
}
CALLS: list[dict[str, Any]] = [{}, {}, {"num_timesteps": 7}, {"num_episodes": 2}, {}, {"force_reset": True}, {}, {}]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_vectorized_engine_with_trajectory_views_equals_per_step_engine(mode: str, case: dict[str, Any]) -> None:
    # The module stores what it saw (stacked frames, previous actions and rewards) with every step,
    # so equal episodes mean equal actions and equal module inputs at every step.
    fast, slow = EnvRunner(frame_config(mode, **case)), EnvRunner(frame_config(mode, columnar_sampling=False, **case))
    assert fast.is_vectorized and fast.vectorized_fallback is None and not slow.is_vectorized
    for kwargs in CALLS:
        a, b = ordered(fast.sample(**kwargs)), ordered(slow.sample(**kwargs))
        assert [len(c) for c in a] == [len(c) for c in b]
        for x, y in zip(a, b):
            assert_episodes_equal(x, y, compare_ids=False)


def test_views_of_a_runner_without_history_pieces_are_not_kept() -> None:
    runner = EnvRunner(frame_config(env_to_module_connectors=()))
    assert runner.is_vectorized and runner.config.episode_lookback_horizon == 1
    chunks = runner.sample()
    assert "seen_prev_actions" not in chunks[0].extra_model_outputs


def test_view_from_episodes_fills_before_the_episode_and_keeps_uint8() -> None:
    runner = EnvRunner(frame_config(columnar_sampling=False))
    runner.sample()
    running = runner.ongoing.as_episodes()
    view = RunningEpisodesView.from_episodes(running, lookback_steps=3)
    frames = view.get_observations(4)
    assert frames.dtype == np.uint8 and frames.shape == (3, 4, 2, 3)
    for i, ep in enumerate(running):
        expected = ep.get_observations(slice(len(ep) - 3, len(ep) + 1), neg_index_as_lookback=True, fill=0)
        assert frames[i].tolist() == np.asarray(expected).tolist()
        assert view.get_rewards(2)[i].tolist() == list(
            ep.get_rewards(slice(len(ep) - 2, len(ep)), neg_index_as_lookback=True, fill=0.0)
        )
