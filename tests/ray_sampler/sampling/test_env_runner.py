"""EnvRunner (plain class, no Ray): both batch modes, every autoreset mode, seeding, actions, metrics, state."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.modules import RandomModule
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


# ------------------------------------------------------------------ seeding, creators, spaces
def test_seeded_rerun_is_identical_and_runners_differ() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=20, seed=7)
    a, b = EnvRunner(config, worker_index=1), EnvRunner(config, worker_index=1)
    for _ in range(2):
        for x, y in zip(a.sample(), b.sample(), strict=True):
            assert_episodes_equal(x, y)
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


# ------------------------------------------------------------------ horizon, actions, model outputs
@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_max_episode_steps_truncates(mode: str) -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        vectorization_mode=mode,
        num_envs_per_env_runner=2,
        max_episode_steps=4,
        batch_mode="complete_episodes",
        rollout_fragment_length=8,
    )
    out = EnvRunner(config).sample(random_actions=True)
    assert out and all(len(ep) <= 4 for ep in out)
    assert any(ep.is_truncated and len(ep) == 4 for ep in out)


def test_model_outputs_are_recorded_and_logp_matches_the_distribution() -> None:
    runner = EnvRunner(EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=10))
    ep = runner.sample()[0]
    assert set(ep.extra_model_outputs) == {Columns.ACTION_DIST_INPUTS, Columns.VF_PREDS, Columns.ACTION_LOGP}
    logits = np.asarray(ep.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = log_probs[np.arange(len(ep)), np.asarray(ep.get_actions())]
    np.testing.assert_allclose(np.asarray(ep.get_extra_model_outputs(Columns.ACTION_LOGP)), expected, rtol=1e-5)


def test_explore_false_takes_the_most_likely_action() -> None:
    runner = EnvRunner(EnvRunnerConfig(env="CartPole-v1", rollout_fragment_length=10))
    ep = runner.sample(explore=False)[0]
    logits = np.asarray(ep.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS))
    assert np.asarray(ep.get_actions()).tolist() == logits.argmax(-1).tolist()


def test_random_actions_keep_the_same_model_outputs_across_calls() -> None:
    runner = EnvRunner(stamp_config(episode_lookback_horizon=1))
    runner.sample()
    chunks = runner.sample(random_actions=True) + runner.sample()
    assert all(set(c.extra_model_outputs) == {"action_dist_inputs", "vf_preds", "action_logp"} for c in chunks)
    assert_steps_once_and_continuous(chunks)


class _RecordBoxEnv(gym.Env):
    """1-D Box actions in [-2, 2]; remembers what the env received."""

    def __init__(self, ctx: Any = None) -> None:
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self.received: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(2, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.received.append(np.array(action))
        return np.zeros(2, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("normalize", [False, True])
def test_box_actions_are_fitted_for_the_env_but_kept_raw_in_the_episode(normalize: bool) -> None:
    runner = EnvRunner(
        EnvRunnerConfig(
            env=_RecordBoxEnv,
            rollout_fragment_length=200,
            normalize_actions=normalize,
            module_config={"initial_log_std": 1.5},
        )
    )
    ep = runner.sample()[0]
    raw = np.asarray(ep.get_actions())[:, 0]
    sent = np.array([a[0] for a in runner.env.envs[0].unwrapped.received])
    assert (np.abs(raw) > 2.0).any()  # the module's samples do leave the bounds
    expected = -2.0 + (np.clip(raw, -1, 1) + 1.0) * 2.0 if normalize else np.clip(raw, -2.0, 2.0)
    np.testing.assert_allclose(sent, expected, rtol=1e-5)


def test_user_env_to_module_piece_runs_before_defaults() -> None:
    calls: list[int] = []

    def count_episodes(*, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        calls.append(len(episodes))
        assert "obs" not in batch  # runs before the default observation piece
        return batch

    EnvRunner(stamp_config(env_to_module_connectors=(count_episodes,), rollout_fragment_length=2)).sample()
    assert calls == [3, 3]


def test_random_module_class_samples_valid_actions() -> None:
    runner = EnvRunner(stamp_config(module_class=RandomModule))
    eps = runner.sample()
    actions = np.concatenate([np.asarray(e.get_actions()) for e in eps if len(e)])
    assert set(actions.tolist()) <= {0, 1} and not eps[0].extra_model_outputs


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


def test_box_actions_keep_the_space_dtype_on_both_paths() -> None:
    for columnar in (True, False):
        runner = EnvRunner(EnvRunnerConfig(env=_RecordBoxEnv, rollout_fragment_length=4, columnar_sampling=columnar))
        eps = runner.sample() + runner.sample(random_actions=True)
        assert {np.asarray(e.get_actions()).dtype for e in eps} == {np.dtype(np.float32)}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"columnar_sampling": "no"}, "'columnar_sampling' must be True or False"),
        ({"normalize_actions": 1}, "'normalize_actions' must be True or False"),
    ],
    ids=["columnar", "normalize"],
)
def test_bool_fields_are_checked(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EnvRunnerConfig(env="CartPole-v1", **kwargs)


def test_bad_module_class_or_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="'module_class' 'int'"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_class=int))
    with pytest.raises(ConfigError, match=r"'module_config'.*unexpected keyword"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_config={"hidden": 3}))
