"""Evaluation runners: their config, their own seed stream, whole greedy episodes, and a runner killed
in the middle of an evaluation replaced with its episodes counted lost."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.random_module import RandomModule
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.env_creator import sub_env_seeds
from ray_sampler.sampling.evaluation import (
    EvaluationConfig,
    Evaluator,
    check_evaluation_opponent,
    evaluation_runner_config,
    evaluation_seed,
)
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.runner_build import build_policy
from tests.helpers import StampEnv, kill_and_wait, stamp_creator, stamp_length
from tests.ray_sampler.ma_envs import CallGame


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"evaluation_interval": -1}, r"'evaluation_interval' must be an int >= 0 \(got -1\)"),
        ({"evaluation_duration": 0}, r"'evaluation_duration' must be an int >= 1 \(got 0\)"),
        ({"evaluation_duration_unit": "hours"}, r"'evaluation_duration_unit' must be one of .*episodes.*timesteps"),
        ({"evaluation_num_env_runners": -2}, r"'evaluation_num_env_runners' must be an int >= 0 \(got -2\)"),
        ({"evaluation_config": {"batch_mode": "truncate_episodes"}}, r"may override .* \(got \['batch_mode'\]\)"),
        ({"evaluation_config": {"explore": "yes"}}, r"evaluation_config\['explore'\]"),
        ({"evaluation_parallel_to_training": True}, r"needs remote evaluation runners.*>= 1 \(got 0"),
    ],
    ids=["interval", "duration", "unit", "runners", "batch-mode", "explore", "parallel-local"],
)
def test_bad_evaluation_settings_are_one_line(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EvaluationConfig(**kwargs)


def test_rllibs_none_interval_is_off_and_the_interval_says_when() -> None:
    assert not EvaluationConfig(evaluation_interval=None).is_on  # type: ignore[arg-type]
    config = EvaluationConfig(evaluation_interval=3)
    assert [i for i in range(1, 10) if config.is_due(i)] == [3, 6, 9]


def test_evaluation_envs_are_seeded_apart_from_every_training_env() -> None:
    training = {s for w in range(0, 33) for s in sub_env_seeds(7, w, 8) or []}
    evaluation = {s for w in range(0, 33) for s in sub_env_seeds(evaluation_seed(7), w, 8) or []}
    assert len(evaluation) == 33 * 8 and not training & evaluation
    assert evaluation_seed(None) is None and evaluation_seed(7) != 7
    runner = EnvRunnerConfig(env="CartPole-v1", seed=7, env_config={"a": 1})
    config = evaluation_runner_config(runner, EvaluationConfig(evaluation_config={"env_config": {"b": 2}}))
    assert config.seed == evaluation_seed(7) and config.batch_mode is BatchMode.COMPLETE_EPISODES
    assert config.env_config == {"a": 1, "b": 2}  # merged key by key


def _weights() -> dict[str, Any]:
    env = gym.make("CartPole-v1")
    return build_policy(EnvRunnerConfig(env="CartPole-v1"), env.observation_space, env.action_space).module.get_state()


def test_a_local_evaluation_runs_whole_greedy_episodes_with_the_overrides() -> None:
    runner = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, seed=0)
    config = EvaluationConfig(evaluation_duration=5, evaluation_config={"max_episode_steps": 6})
    with Evaluator(runner, config) as evaluator:
        assert evaluator.env_runner_group is None  # in this process: no Ray
        first = evaluator.evaluate(_weights())
    assert first.num_episodes == 5 and all(1 <= n <= 6 for n in first.episode_lengths)
    assert first.episode_returns == [float(n) for n in first.episode_lengths]  # CartPole: 1 a step
    summary = first.summary()
    assert summary["num_episodes"] == 5 and summary["episode_len_max"] <= 6
    steps = EvaluationConfig(evaluation_duration=40, evaluation_duration_unit="timesteps")
    with Evaluator(runner, steps) as evaluator:
        by_steps = evaluator.evaluate(_weights())
    assert sum(by_steps.episode_lengths) >= 40  # whole episodes until at least that many steps


@pytest.mark.usefixtures("ray_session")
def test_a_killed_evaluation_runner_is_replaced_and_its_episodes_counted_lost() -> None:
    # Runner 2's env sleeps 0.2 s a step: it is in the middle of an episode when it is killed.
    runner = EnvRunnerConfig(env=stamp_creator, env_config={"slow_worker": 2, "sleep_s": 0.2}, seed=0)
    config = EvaluationConfig(evaluation_duration=4, evaluation_num_env_runners=2, evaluation_parallel_to_training=True)
    space = StampEnv().observation_space
    weights = build_policy(runner, space, gym.spaces.Discrete(2)).module.get_state()
    with Evaluator(runner, config) as evaluator:
        group = evaluator.env_runner_group
        assert group is not None and group.num_env_runners == 2
        evaluator.start(weights)  # runs in the background, as beside a training iteration
        time.sleep(0.6)
        kill_and_wait(group.actor(2))
        hit = evaluator.wait()
        assert hit.num_env_runner_restarts == 1 and hit.num_episodes_lost == 1  # its running episode, unreported
        # Runner 1's first two episodes, whole, and its replacement's (a new env: episodes 0 and 1 again).
        assert hit.num_episodes == 4 and sorted(hit.episode_lengths) == sorted(2 * [stamp_length(0, k) for k in (0, 1)])
        after = evaluator.evaluate(weights)  # the replacement evaluates too
        assert after.num_episodes == 4 and after.num_episodes_lost == 0 and after.num_env_runner_restarts == 0


class CallsZero(RandomModule):
    """Always calls 0: in ``CallGame`` it never loses (holds no weights, as the random player)."""

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {Columns.ACTIONS: np.zeros(len(batch[Columns.OBS]), np.int64)}

    forward_exploration = forward_inference


def _call_game(**kwargs: Any) -> EnvRunnerConfig:
    return EnvRunnerConfig(
        env=CallGame, multi_agent=MultiAgentConfig(), module_class=CallsZero, module_config={}, seed=0, **kwargs
    )


class TestRandomOpponent:
    def test_the_opponent_takes_each_seat_in_turn_and_the_trained_side_is_reported(self) -> None:
        config = EvaluationConfig(evaluation_duration=40, evaluation_opponent="random")
        with Evaluator(_call_game(), config) as evaluator:
            assert evaluator.agents == ("a", "b")
            result = evaluator.evaluate({})
        assert result.num_episodes == 40
        # One sub-env, episodes one after another: the seats alternate, 20 each.
        assert all(x != y for x, y in zip(result.seats, result.seats[1:], strict=False))
        assert sorted(result.seats) == ["a"] * 20 + ["b"] * 20
        # The trained side always calls 0: it never loses; it wins exactly when the random player calls 1.
        # (Random play on both seats would lose; the trained side on both would only draw.)
        summary = result.summary()
        assert summary["loss"] == 0.0 and summary["loss/a"] == 0.0 and summary["loss/b"] == 0.0
        assert 0.0 < summary["win"] < 1.0 and summary["win"] + summary["draw"] == pytest.approx(1.0, abs=1e-12)
        assert set(result.episode_returns) <= {0.0, 1.0}  # the trained side's own returns
        assert summary["episode_return_mean"] == pytest.approx(summary["win"], abs=1e-12)
        by = result.returns_by
        assert by["module/opponent_random"] == [-r for r in by["module/default_policy"]]  # zero-sum, per episode
        assert by["module/default_policy"] == result.episode_returns
        assert evaluator.opponent_keys[:3] == ["win", "draw", "loss"] and "loss/b" in evaluator.opponent_keys
        with Evaluator(_call_game(), config) as again:  # the random player takes the runner's seed stream
            assert again.evaluate({}).episode_returns == result.episode_returns

    def test_without_an_opponent_the_summary_has_no_rates(self) -> None:
        with Evaluator(_call_game(), EvaluationConfig(evaluation_duration=4)) as evaluator:
            result = evaluator.evaluate({})
            assert evaluator.opponent_keys == []
        assert result.seats == [] and "win" not in result.summary()
        assert set(result.episode_returns) == {0.0}  # CallsZero on both seats: every game drawn

    @pytest.mark.parametrize(
        ("runner", "agents", "match"),
        [
            (None, None, r"plays two-player multi-agent games; this run's env is single-agent"),
            (_call_game(), ["a", "b", "c"], r"plays two-player games; the env has 3 possible agents \['a', 'b', 'c'\]"),
            (
                EnvRunnerConfig(env=CallGame, multi_agent=MultiAgentConfig(policies=("opponent_random",))),
                ["a", "b"],
                r"acts as module 'opponent_random', which the run's modules \['opponent_random'\] already name",
            ),
        ],
        ids=["single-agent", "three-players", "module-id-taken"],
    )
    def test_a_run_the_opponent_cannot_play_is_one_line(self, runner: Any, agents: Any, match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            check_evaluation_opponent(EvaluationConfig(evaluation_opponent="random"), runner, agents)

    def test_an_unknown_opponent_is_refused(self) -> None:
        with pytest.raises(
            ConfigError, match=r"'evaluation_opponent' must be None or one of \['random'\] \(got 'me'\)"
        ):
            EvaluationConfig(evaluation_opponent="me")  # type: ignore[arg-type]

    def test_the_evaluator_refuses_a_game_of_three(self) -> None:
        runner = _call_game(env_config={"players": ["a", "b", "c"]})
        with pytest.raises(ConfigError, match=r"the env has 3 possible agents"):
            Evaluator(runner, EvaluationConfig(evaluation_opponent="random"))
