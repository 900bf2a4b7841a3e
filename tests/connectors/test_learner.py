"""Learner connector pieces against plain reference loops (and the episode getters), on runner chunks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from connectors.learner import (
    DEFAULT_MODULE_ID,
    AddColumnsFromEpisodesToTrainBatch,
    AddNextObservationsFromEpisodesToTrainBatch,
    FrameStacking,
    GeneralAdvantageEstimation,
    NStepReturns,
    PrevActionsPrevRewards,
)
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.helpers import full_state, stamp_creator


class StampValues:
    """A module whose value of observation [w, v, e, t] is 0.1 * t + v (easy to check by hand)."""

    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, np.float64)
        return 0.1 * obs[:, 3] + obs[:, 1]


@pytest.fixture(scope="module")
def chunks() -> list[SingleAgentEpisode]:
    """Truncate-mode chunks with lookback 3: cut, terminated, fresh and continuing ones."""
    runner = EnvRunner(
        EnvRunnerConfig(
            env=stamp_creator,
            num_envs_per_env_runner=3,
            rollout_fragment_length=4,
            episode_lookback_horizon=3,
            columnar_sampling=False,
        )
    )
    runner.sample()
    return runner.sample() + runner.sample()


def run(pieces: list[Any], episodes: list[SingleAgentEpisode]) -> dict[str, Any]:
    return ConnectorPipelineV2(pieces)(rl_module=StampValues(), batch={}, episodes=episodes)[DEFAULT_MODULE_ID]


def steps_of(episodes: list[SingleAgentEpisode]) -> list[tuple[SingleAgentEpisode, int]]:
    return [(ep, t) for ep in episodes for t in range(len(ep))]


def test_columns_and_next_obs(chunks: list[SingleAgentEpisode]) -> None:
    out = run([AddColumnsFromEpisodesToTrainBatch(), AddNextObservationsFromEpisodesToTrainBatch()], chunks)
    rows = steps_of(chunks)
    assert len(out["obs"]) == len(rows) == sum(len(ep) for ep in chunks)
    for i, (ep, t) in enumerate(rows):
        np.testing.assert_array_equal(out["obs"][i], np.asarray(ep.get_observations(t)))
        np.testing.assert_array_equal(out["next_obs"][i], np.asarray(ep.get_observations(t + 1)))
        assert out["actions"][i] == ep.get_actions(t) and out["rewards"][i] == ep.get_rewards(t)
        assert out["action_logp"][i] == ep.get_extra_model_outputs("action_logp", t)
        last = t == len(ep) - 1
        assert out["terminateds"][i] == (last and ep.is_terminated)
        assert out["truncateds"][i] == (last and ep.is_truncated)


@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.5, 1.0), (1.0, 0.0)])
def test_gae_equals_a_plain_loop_across_cuts_and_terminals(
    chunks: list[SingleAgentEpisode], gamma: float, lam: float
) -> None:
    out = run(
        [
            AddColumnsFromEpisodesToTrainBatch(),
            GeneralAdvantageEstimation(gamma=gamma, lambda_=lam, standardize_advantages=False),
        ],
        chunks,
    )
    module = StampValues()
    expected_adv, expected_targets = [], []
    for ep in chunks:
        values = module.compute_values(np.asarray([ep.get_observations(t) for t in range(len(ep) + 1)]))
        adv, next_adv = [0.0] * len(ep), 0.0
        for t in reversed(range(len(ep))):
            terminal = t == len(ep) - 1 and ep.is_terminated
            next_value = 0.0 if terminal else values[t + 1]  # a cut chunk bootstraps from its last obs
            delta = ep.get_rewards(t) + gamma * next_value - values[t]
            next_adv = delta + gamma * lam * (0.0 if t == len(ep) - 1 else next_adv)
            adv[t] = next_adv
        expected_adv += adv
        expected_targets += [a + v for a, v in zip(adv, values[:-1], strict=True)]
    np.testing.assert_allclose(out["advantages"], expected_adv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["value_targets"], expected_targets, rtol=1e-12, atol=1e-12)


def test_standardized_advantages(chunks: list[SingleAgentEpisode]) -> None:
    out = run([GeneralAdvantageEstimation(standardize_advantages=True)], chunks)
    assert abs(out["advantages"].mean()) < 1e-9 and abs(out["advantages"].std() - 1) < 1e-9


@pytest.mark.parametrize("n", [1, 3])
def test_n_step_returns_equal_a_plain_loop(chunks: list[SingleAgentEpisode], n: int) -> None:
    gamma = 0.9
    out = run([NStepReturns(n_step=n, gamma=gamma)], chunks)
    for i, (ep, t) in enumerate(steps_of(chunks)):
        used = min(n, len(ep) - t)
        assert out["n_step"][i] == used
        assert out["n_step_returns"][i] == pytest.approx(sum(gamma**j * ep.get_rewards(t + j) for j in range(used)))
        assert out["n_step_terminated"][i] == (t + used == len(ep) and ep.is_terminated)
        np.testing.assert_array_equal(out["n_step_next_obs"][i], np.asarray(ep.get_observations(t + used)))


@pytest.mark.parametrize("n", [1, 2, 5])
def test_prev_actions_and_rewards_come_from_the_lookback(chunks: list[SingleAgentEpisode], n: int) -> None:
    out = run([PrevActionsPrevRewards(n_prev_actions=n, n_prev_rewards=n)], chunks)
    for i, (ep, t) in enumerate(steps_of(chunks)):
        # The seed's trajectory view shift=[-n..-1], with the lookback and fill=0 before it.
        prev_a = ep.get_actions(slice(t - n, t), neg_index_as_lookback=True, fill=0)
        prev_r = ep.get_rewards(slice(t - n, t), neg_index_as_lookback=True, fill=0.0)
        assert out["prev_actions"][i].tolist() == np.asarray(prev_a).tolist()
        assert out["prev_rewards"][i].tolist() == np.asarray(prev_r).tolist()


@pytest.mark.parametrize("frames", [1, 4])
def test_frame_stacking_comes_from_the_lookback(chunks: list[SingleAgentEpisode], frames: int) -> None:
    out = run([FrameStacking(num_frames=frames)], chunks)
    nxt = run([FrameStacking(num_frames=frames, as_next_obs=True)], chunks)
    for i, (ep, t) in enumerate(steps_of(chunks)):
        expected = ep.get_observations(slice(t - frames + 1, t + 1), neg_index_as_lookback=True, fill=0)
        assert out["obs"][i].tolist() == np.asarray(expected).tolist()
        expected_next = ep.get_observations(slice(t - frames + 2, t + 2), neg_index_as_lookback=True, fill=0)
        assert nxt["next_obs"][i].tolist() == np.asarray(expected_next).tolist()


def test_learner_pipeline_never_changes_the_episodes(chunks: list[SingleAgentEpisode]) -> None:
    before = [full_state(ep) for ep in chunks]
    run(
        [
            AddColumnsFromEpisodesToTrainBatch(),
            AddNextObservationsFromEpisodesToTrainBatch(),
            GeneralAdvantageEstimation(),
            NStepReturns(),
            PrevActionsPrevRewards(),
            FrameStacking(),
        ],
        chunks,
    )
    after = [full_state(ep) for ep in chunks]
    for a, b in zip(before, after, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if key in ("observations", "actions", "rewards"):
                np.testing.assert_array_equal(a[key], b[key])
            elif key != "extra_model_outputs":
                assert a[key] == b[key]


def test_train_batch_never_aliases_numpy_episodes() -> None:
    ep = SingleAgentEpisode(
        observations=np.arange(4, dtype=np.float64)[:, None],
        actions=np.arange(3),
        rewards=np.array([1.0, 2.0, 3.0]),
        extra_model_outputs={"action_logp": np.zeros(3)},
    )
    out = run([AddColumnsFromEpisodesToTrainBatch()], [ep])
    out["rewards"] *= 100
    out["actions"] += 5
    assert ep.get_rewards().tolist() == [1.0, 2.0, 3.0] and ep.get_actions().tolist() == [0, 1, 2]


def test_history_pieces_keep_dtypes_and_refuse_dict_actions() -> None:
    frames = [np.full((2, 2), t, np.uint8) for t in range(4)]
    ep = SingleAgentEpisode(observations=frames, actions=[np.int32(0)] * 3, rewards=[1.0] * 3)
    out = run([FrameStacking(num_frames=2), PrevActionsPrevRewards()], [ep])
    assert out["obs"].dtype == np.uint8 and out["obs"].shape == (3, 2, 2, 2)
    assert out["prev_actions"].dtype == np.int32
    dict_actions = SingleAgentEpisode(observations=[0, 1], actions=[{"a": 1}], rewards=[1.0])
    from ray_sampler.errors import ConfigError

    with pytest.raises(ConfigError, match="needs array actions"):
        run([PrevActionsPrevRewards()], [dict_actions])
    with pytest.raises(ConfigError, match="'n_prev_actions' must be an int >= 0"):
        PrevActionsPrevRewards(n_prev_actions=-1)


def test_a_reused_shared_dict_does_not_serve_stale_episodes(chunks: list[SingleAgentEpisode]) -> None:
    shared: dict = {}
    pipe = ConnectorPipelineV2([AddColumnsFromEpisodesToTrainBatch()])
    first = pipe(rl_module=None, batch={}, episodes=chunks[:2], shared_data=shared)["default_policy"]
    second = pipe(rl_module=None, batch={}, episodes=chunks[2:4], shared_data=shared)["default_policy"]
    assert len(second["rewards"]) == sum(len(ep) for ep in chunks[2:4]) != 0
    del first
