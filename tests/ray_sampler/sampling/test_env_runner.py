"""EnvRunner (plain class, no Ray): both batch modes, seeding and episode ids, config errors, metrics, state."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.helpers import assert_episodes_equal, stamp_length
from tests.ray_sampler.sampling.checks import MODES, assert_steps_once_and_continuous, stamp_config, stamps


# ------------------------------------------------------------------ truncate_episodes
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("h", [0, 2])
def test_truncate_returns_exactly_fragment_times_envs_and_loses_nothing(mode: str, num_envs: int, h: int) -> None:
    runner = EnvRunner(stamp_config(mode, num_envs_per_env_runner=num_envs, episode_lookback_horizon=h))
    chunks = []
    for _ in range(8):
        out = runner.sample()
        assert sum(len(c) for c in out) == 5 * num_envs
        assert runner.metrics.num_env_steps == 5 * num_envs
        chunks += out
    assert_steps_once_and_continuous(chunks)
    # Nothing is held back beyond what the next call returns: the env steps made so far,
    # minus the ones in the ongoing continuations, were all returned.
    assert sum(len(c) for c in chunks) == 8 * 5 * num_envs


@pytest.mark.parametrize("mode", MODES)
def test_continuation_lookback_equals_previous_chunk_tail(mode: str) -> None:
    runner = EnvRunner(stamp_config(mode, episode_lookback_horizon=2, num_envs_per_env_runner=2))
    previous: dict[str, SingleAgentEpisode] = {}
    for _ in range(6):
        for chunk in runner.sample():
            if chunk.id_ in previous:
                prev, lb = previous[chunk.id_], chunk.len_lookback_buffer
                assert lb == min(2, prev.len_lookback_buffer + len(prev))
                assert stamps(chunk, slice(-lb, 1), neg_index_as_lookback=True) == stamps(prev, slice(-lb - 1, None))
                assert (
                    np.asarray(chunk.get_actions(slice(-lb, 0), neg_index_as_lookback=True)).tolist()
                    == np.asarray(prev.get_actions(slice(len(prev) - lb, len(prev)))).tolist()
                )
            previous[chunk.id_] = chunk


def test_num_timesteps_is_rounded_up_to_a_multiple_of_num_envs() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=4))
    assert sum(len(c) for c in runner.sample(num_timesteps=10)) == 12
    assert sum(len(c) for c in runner.sample(num_timesteps=12)) == 12


# ------------------------------------------------------------------ complete_episodes
@pytest.mark.parametrize("mode", MODES)
def test_complete_returns_only_finished_whole_episodes_and_drops_none(mode: str) -> None:
    runner = EnvRunner(stamp_config(mode, batch_mode="complete_episodes", num_envs_per_env_runner=3))
    seen: dict[int, list[int]] = {}
    for _ in range(10):
        out = runner.sample()
        assert sum(len(e) for e in out) >= 15
        for ep in out:
            assert ep.is_terminated and ep.t_started == 0 and ep.len_lookback_buffer == 0
            (_, v, e, t0), *_ = stamps(ep)
            assert t0 == 0 and len(ep) == stamp_length(v, e)
            seen.setdefault(v, []).append(e)
    # Per sub-env, episodes come in order with no gap: none was thrown away, long ones included.
    for v, episodes in seen.items():
        assert episodes == list(range(len(episodes))), (v, episodes)


def test_complete_mode_keeps_episode_length_distribution() -> None:
    runner = EnvRunner(
        stamp_config(batch_mode="complete_episodes", num_envs_per_env_runner=1, rollout_fragment_length=3)
    )
    lengths = [len(ep) for _ in range(30) for ep in runner.sample()]
    assert lengths == [stamp_length(0, k) for k in range(len(lengths))]


def test_num_episodes_returns_exactly_that_many_and_keeps_the_rest() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=3))
    first = runner.sample(num_episodes=2)
    second = runner.sample(num_episodes=4)
    assert len(first) == 2 and len(second) == 4
    keys = [stamps(ep)[0][1:3] for ep in first + second]
    assert len(set(keys)) == 6 and all(ep.is_done and ep.t_started == 0 for ep in first + second)


# ------------------------------------------------------------------ seeding, episode ids, config errors
def test_seeded_rerun_is_identical_but_for_ids_and_runners_differ() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=20, seed=7)
    a, b = EnvRunner(config, worker_index=1), EnvRunner(config, worker_index=1)
    for _ in range(2):
        for x, y in zip(a.sample(), b.sample(), strict=True):
            assert x.id_ != y.id_
            assert_episodes_equal(x, y, compare_ids=False)
    first_obs = {w: np.asarray(EnvRunner(config, worker_index=w).sample()[0].get_observations(0)) for w in (1, 2, 3)}
    assert len({o.tobytes() for o in first_obs.values()}) == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rollout_fragment_length": -5}, r"'rollout_fragment_length' must be an int >= 1 \(got -5\)"),
        (
            {"batch_mode": "bogus"},
            r"'batch_mode' must be one of 'truncate_episodes', 'complete_episodes' \(got 'bogus'\)",
        ),
        ({"num_envs_per_env_runner": 0}, "'num_envs_per_env_runner' must be an int >= 1"),
        ({"count_steps_by": "steps"}, "'count_steps_by' must be one of"),
        ({"episode_lookback_horizon": -1}, "'episode_lookback_horizon' must be an int >= 0"),
        ({"max_episode_steps": 0}, "'max_episode_steps' must be an int >= 1"),
        ({"vectorization_mode": "async"}, "'vectorization_mode' must be one of 'sync', 'vector_entry_point'"),
        ({"env_to_module_connectors": (1,)}, "'env_to_module_connectors' must be a tuple of ConnectorV2 pieces"),
    ],
    ids=["fragment", "batch_mode", "num_envs", "count_by", "lookback", "horizon", "vectorization", "connectors"],
)
def test_bad_config_values_raise_config_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EnvRunnerConfig(env="CartPole-v1", **kwargs)


def test_bad_sample_arguments_raise() -> None:
    runner = EnvRunner(stamp_config())
    with pytest.raises(ConfigError, match="not both"):
        runner.sample(num_timesteps=5, num_episodes=1)
    with pytest.raises(ConfigError, match="'num_timesteps' must be an int >= 1"):
        runner.sample(num_timesteps=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"columnar_sampling": "no"}, "'columnar_sampling' must be True or False"),
        ({"normalize_actions": 1}, "'normalize_actions' must be True or False"),
        (
            {"restart_failed_sub_environments": "yes"},
            r"'restart_failed_sub_environments' must be True or False \(got 'yes'\)",
        ),
    ],
    ids=["columnar", "normalize", "restart_sub_envs"],
)
def test_bool_fields_are_checked(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EnvRunnerConfig(env="CartPole-v1", **kwargs)


def test_bad_module_class_or_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="'module_class' 'int'"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_class=int))
    with pytest.raises(ConfigError, match=r"'module_config'.*unexpected keyword"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_config={"hidden": 3}))


def test_same_seed_runners_give_equal_data_under_disjoint_ids() -> None:
    config = stamp_config(seed=3)
    a, b = EnvRunner(config, worker_index=1), EnvRunner(config, worker_index=1)
    chunks_a, chunks_b = a.sample() + a.sample(), b.sample() + b.sample()
    assert not {c.id_ for c in chunks_a} & {c.id_ for c in chunks_b}
    for x, y in zip(chunks_a, chunks_b, strict=True):
        assert_episodes_equal(x, y, compare_ids=False)


_RUN_IN_PROCESS = """
import json, numpy as np
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
runner = EnvRunner(EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=30, seed=9))
chunks = runner.sample() + runner.sample()
print(json.dumps({"ids": [c.id_ for c in chunks],
                  "obs": [np.asarray(c.get_observations()).tolist() for c in chunks],
                  "actions": [np.asarray(c.get_actions()).tolist() for c in chunks]}))
"""


def test_two_processes_with_the_same_seed_give_equal_data_under_disjoint_ids() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _RUN_IN_PROCESS], cwd=root, capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert not set(runs[0]["ids"]) & set(runs[1]["ids"])
    assert runs[0]["obs"] == runs[1]["obs"] and runs[0]["actions"] == runs[1]["actions"]
    assert len(runs[0]["ids"]) > 2


# ------------------------------------------------------------------ metrics, state and drain
def test_metrics_aggregate_returns_across_chunks() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=1, rollout_fragment_length=3))
    returns, lengths = [], []
    for _ in range(6):
        runner.sample()
        returns += runner.metrics.episode_returns
        lengths += runner.metrics.episode_lengths
    assert lengths == [stamp_length(0, k) for k in range(len(lengths))]
    assert returns == [float(sum(range(1, n + 1))) for n in lengths]


def test_state_round_trip_and_weights_version() -> None:
    a = EnvRunner(EnvRunnerConfig(env="CartPole-v1", seed=1))
    b = EnvRunner(EnvRunnerConfig(env="CartPole-v1", seed=2))
    state = a.get_state()
    state["weights_version"] = 5
    assert b.set_state(state) == 5
    for k, v in a.module.get_state().items():
        np.testing.assert_array_equal(b.module.get_state()[k], v)
    b.sample(num_timesteps=2)
    assert b.metrics.weights_version == 5


def test_drain_returns_unfinished_steps_only() -> None:
    runner = EnvRunner(stamp_config(batch_mode="complete_episodes"))
    returned = runner.sample()
    running = sum(1 for ep in runner.ongoing.as_episodes() if len(ep) and not ep.is_done)
    drained, dropped = runner.drain()
    # Complete mode ships whole episodes only: running ones are dropped and counted.
    assert drained == [] and dropped == running >= 1
    truncating = EnvRunner(stamp_config(num_envs_per_env_runner=3))
    returned = truncating.sample(num_episodes=1)
    drained, dropped = truncating.drain()
    assert dropped == 0 and drained and all(len(ep) for ep in drained)
    assert_steps_once_and_continuous(returned + drained)


def test_num_episodes_counts_whole_episodes_only() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=1, rollout_fragment_length=3, episode_lookback_horizon=2))
    first = runner.sample(num_timesteps=1)
    (ep,) = runner.sample(num_episodes=1)
    assert ep.t_started == 0 and ep.len_lookback_buffer == 0 and ep.is_done
    rest = runner.sample()  # the tail of the episode the first call began comes now
    assert_steps_once_and_continuous([*first, ep, *rest])
