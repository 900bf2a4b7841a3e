"""EnvRunner (plain class, no Ray): the horizon, actions, model outputs, connector pieces and the engine they allow."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from connectors.env_to_module import EnvToModulePiece
from ray_sampler.data.columns import Columns
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.ray_sampler.sampling.checks import assert_steps_once_and_continuous, stamp_config


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


def test_box_actions_keep_the_space_dtype_on_both_paths() -> None:
    for columnar in (True, False):
        runner = EnvRunner(EnvRunnerConfig(env=_RecordBoxEnv, rollout_fragment_length=4, columnar_sampling=columnar))
        eps = runner.sample() + runner.sample(random_actions=True)
        assert {np.asarray(e.get_actions()).dtype for e in eps} == {np.dtype(np.float32)}


# ------------------------------------------------------------------ connector pieces and the engine
class TestVectorizedFallback:
    def test_pieces_outside_the_contract_fall_back_to_the_per_step_engine_and_say_so(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        def plain_piece(*, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
            assert episodes, "a plain piece may read the episodes: it gets them on the per-step engine"
            return batch

        with caplog.at_level("WARNING", logger="ray_sampler.sampling.env_runner"):
            runner = EnvRunner(stamp_config(env_to_module_connectors=(plain_piece,), rollout_fragment_length=2))
        assert not runner.is_vectorized
        assert runner.vectorized_fallback is not None and "['plain_piece']" in runner.vectorized_fallback
        assert "falls back to the per-step engine" in caplog.text
        runner.sample()
        assert runner.get_metrics().vectorized_fallback == runner.vectorized_fallback
        runner.sample(num_episodes=1)  # the vectorized engine takes no num_episodes request: no fallback
        assert runner.get_metrics().vectorized_fallback is None
        runner.sample()
        assert runner.num_fallback_calls == 2

    def test_env_to_module_pieces_keeping_the_contract_stay_on_the_vectorized_engine(self) -> None:
        class Scale(EnvToModulePiece):
            def __call__(self, *, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
                batch["obs"] = self.running(episodes, kwargs.get("shared_data")).get_observations(1)[:, 0] * 2
                return batch

        runner = EnvRunner(stamp_config(env_to_module_connectors=(Scale(),), rollout_fragment_length=2))
        assert runner.is_vectorized and runner.vectorized_fallback is None
        assert sum(len(c) for c in runner.sample()) == 2 * runner.num_envs
        assert runner.num_fallback_calls == 0 and runner.get_metrics().vectorized_fallback is None
