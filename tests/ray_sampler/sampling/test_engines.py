"""The sampling engines: the vectorized engine equals the per-step one (a differential test), and
the two hand over to each other without losing or repeating a step."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.helpers import assert_episodes_equal
from tests.ray_sampler.sampling.checks import MODES, assert_steps_once_and_continuous, by_first_step, stamp_config


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("h", [0, 2])
def test_columnar_path_equals_episode_path(mode: str, num_envs: int, h: int) -> None:
    runners = [
        EnvRunner(
            stamp_config(mode, num_envs_per_env_runner=num_envs, episode_lookback_horizon=h, columnar_sampling=columnar)
        )
        for columnar in (True, False)
    ]
    assert runners[0].is_vectorized and not runners[1].is_vectorized
    calls: list[dict] = [{}, {}, {"num_timesteps": 7}, {}, {"force_reset": True}, {}, {"random_actions": True}, {}]
    for kwargs in calls:
        fast, slow = (r.sample(**kwargs) for r in runners)
        assert sum(len(c) for c in fast) == sum(len(c) for c in slow)
        a, b = by_first_step(fast), by_first_step(slow)
        assert a.keys() == b.keys()
        for key in a:
            for field in a[key]:
                if field in ("observations", "actions", "rewards"):
                    np.testing.assert_array_equal(a[key][field], b[key][field], err_msg=f"{key} {field}")
                elif field == "extra_model_outputs":
                    for k in a[key][field]:
                        np.testing.assert_array_equal(a[key][field][k], b[key][field][k], err_msg=f"{key} {k}")
                else:
                    assert a[key][field] == b[key][field], (key, field)
        assert sorted(runners[0].metrics.episode_lengths) == sorted(runners[1].metrics.episode_lengths)
        assert sorted(runners[0].metrics.episode_returns) == sorted(runners[1].metrics.episode_returns)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "episodes"])
def test_num_episodes_calls_between_truncate_calls_keep_every_step_once(mode: str, columnar: bool) -> None:
    # num_episodes takes the episode path; plain calls the columnar one (unless switched off). The
    # steps num_episodes leaves in running episodes make the next call overshoot in every mode.
    runner = EnvRunner(stamp_config(mode, episode_lookback_horizon=2, columnar_sampling=columnar))
    chunks = []
    for kwargs in ({}, {"num_episodes": 2}, {}, {"num_timesteps": 4}, {"num_episodes": 1}, {}, {}):
        out = runner.sample(**kwargs)
        if "num_episodes" not in kwargs:
            assert sum(len(c) for c in out) == (6 if "num_timesteps" in kwargs else 15)
        chunks += out
    drained, dropped = runner.drain()
    assert dropped == 0
    chunks += drained
    assert_steps_once_and_continuous(chunks)


def test_columnar_path_on_cartpole_equals_episode_path() -> None:
    configs = [
        EnvRunnerConfig(
            env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=30, seed=5, columnar_sampling=c
        )
        for c in (True, False)
    ]
    fast_runner, slow_runner = EnvRunner(configs[0]), EnvRunner(configs[1])
    for _ in range(3):
        fast, slow = fast_runner.sample(), slow_runner.sample()
        assert len(fast) == len(slow)
        key = lambda ep: (float(np.asarray(ep.get_observations(0))[0]), ep.t_started)  # noqa: E731
        for x, y in zip(sorted(fast, key=key), sorted(slow, key=key), strict=True):
            y.id_ = x.id_
            assert_episodes_equal(x, y)


# ------------------------------------------------------------------ regressions from the review of issue #3
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "episodes"])
def test_leftovers_larger_than_a_call_are_returned_over_several_calls(mode: str, columnar: bool) -> None:
    runner = EnvRunner(
        stamp_config(
            mode,
            num_envs_per_env_runner=3,
            rollout_fragment_length=1,
            episode_lookback_horizon=1,
            columnar_sampling=columnar,
        )
    )
    chunks = runner.sample(num_episodes=2)  # leaves several steps in the running episodes
    for kwargs in ({}, {}, {"force_reset": True}, {}, {"num_timesteps": 2}, {}):
        out = runner.sample(**kwargs)
        assert sum(len(c) for c in out) == 3
        chunks += out
    chunks += runner.drain()[0]
    assert_steps_once_and_continuous(chunks)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "episodes"])
def test_random_call_sequences_keep_every_step_once(seed: int, mode: str, columnar: bool) -> None:
    rng = np.random.default_rng(seed)
    num_envs = int(rng.integers(1, 5))
    runner = EnvRunner(
        stamp_config(
            mode,
            num_envs_per_env_runner=num_envs,
            columnar_sampling=columnar,
            rollout_fragment_length=int(rng.integers(1, 5)),
            episode_lookback_horizon=int(rng.integers(0, 4)),
        )
    )
    chunks = []
    for _ in range(12):
        kind = rng.integers(0, 5)
        kwargs = [
            {},
            {"num_timesteps": int(rng.integers(1, 12))},
            {"num_episodes": int(rng.integers(1, 4))},
            {"force_reset": True},
            {"random_actions": True, "explore": False},
        ][kind]
        out = runner.sample(**kwargs)
        if "num_episodes" in kwargs:
            assert len(out) == kwargs["num_episodes"] and all(e.t_started == 0 and e.is_done for e in out)
        else:
            per_env = -(-kwargs.get("num_timesteps", runner.config.rollout_fragment_length * num_envs) // num_envs)
            assert sum(len(c) for c in out) == per_env * num_envs
        chunks += out
    chunks += runner.drain()[0]
    assert_steps_once_and_continuous(chunks)
    made = sum(len(e.unwrapped.actions_seen) for e in getattr(runner.env, "envs", []))
    if made:  # every step the envs made was returned
        assert made == sum(len(c) for c in chunks)
