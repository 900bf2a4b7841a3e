"""Evaluation runners: their config, their own seed stream, whole greedy episodes, and a runner killed
in the middle of an evaluation replaced with its episodes counted lost."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import pytest

from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig
from ray_sampler.sampling.env_creator import sub_env_seeds
from ray_sampler.sampling.evaluation import (
    EvaluationConfig,
    Evaluator,
    evaluation_runner_config,
    evaluation_seed,
)
from ray_sampler.sampling.runner_build import build_policy
from tests.helpers import StampEnv, kill_and_wait, stamp_creator, stamp_length


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
