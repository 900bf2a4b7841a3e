"""Evaluation inside every training loop: when it runs, what each record reports, the best policy, the
target on the evaluation return, and that evaluation steps never count as training steps."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from learner.learner import PPOConfig
from learner.metrics import IterationRecord
from learner.train import PPOTrainingConfig, train_ppo
from learner.train_dqn import DQNTrainingConfig, train_dqn
from ray_sampler.errors import ConfigError
from ray_sampler.policy import MultiAgentPolicy, Policy
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.evaluation import EvaluationConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from tests.ray_sampler.ma_envs import CallGame

KEYS = {"episode_return_mean", "episode_return_std", "episode_return_min", "episode_return_max"}
KEYS |= {"episode_len_mean", "num_episodes", "duration_s"}


def ppo(**kwargs: Any) -> PPOTrainingConfig:
    runner = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=64, seed=0)
    group = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    kwargs.setdefault("target_return", None)
    return PPOTrainingConfig(env_runner=runner, env_runner_group=group, **kwargs)


def _evaluated(records: list[IterationRecord]) -> list[int]:
    return [r.iteration for r in records if not math.isnan(r.evaluation["episode_return_mean"])]


def test_stop_on_evaluation_needs_evaluation_on() -> None:
    with pytest.raises(ConfigError, match=r"'stop_on' 'evaluation' needs evaluation on: .* >= 1 \(got 0\)"):
        ppo(stop_on="evaluation")
    with pytest.raises(ConfigError, match=r"'stop_on' must be one of"):
        ppo(stop_on="never")


@pytest.mark.usefixtures("ray_session")
def test_ppo_evaluates_every_interval_keeps_its_best_policy_and_stops_on_the_evaluation_return(
    tmp_path: Path,
) -> None:
    evaluation = EvaluationConfig(evaluation_interval=2, evaluation_duration=3)
    records: list[IterationRecord] = []
    result = train_ppo(
        ppo(max_iterations=5, evaluation=evaluation), policy_dir=tmp_path / "policy", on_iteration=records.append
    )
    assert [set(r.evaluation) for r in records] == [KEYS] * 5  # the same columns in every row
    assert _evaluated(records) == [2, 4] and all(records[i].evaluation["num_episodes"] == 3 for i in (1, 3))
    assert result.env_steps == 5 * 512  # evaluation steps never count as training steps
    best = max(records[i].evaluation["episode_return_mean"] for i in (1, 3))
    kept = Policy.from_checkpoint(tmp_path / "best_policy")
    assert kept.info["iteration"] in (2, 4)
    assert records[kept.info["iteration"] - 1].evaluation["episode_return_mean"] == best
    # The target on the evaluation return: the greedy policy passes 20 long before the window of
    # exploring returns does (an untrained greedy CartPole policy ends near 10).
    target = dataclasses.replace(evaluation, evaluation_interval=1)
    records.clear()
    stopped = train_ppo(
        ppo(max_iterations=30, evaluation=target, stop_on="evaluation", target_return=60.0), on_iteration=records.append
    )
    assert stopped.reached and records[-1].evaluation["episode_return_mean"] >= 60 and len(records) < 30
    assert all(r.evaluation["episode_return_mean"] < 60 for r in records[:-1])


@pytest.mark.usefixtures("ray_session")
def test_a_parallel_evaluation_of_a_multi_agent_run_reports_each_module_and_agent() -> None:
    mapping = MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
    runner = EnvRunnerConfig(
        env=make_multi_agent("CartPole-v1", 2), num_envs_per_env_runner=2, rollout_fragment_length=64, seed=0,
        multi_agent=mapping,
    )  # fmt: skip
    evaluation = EvaluationConfig(
        evaluation_interval=1, evaluation_duration=2, evaluation_num_env_runners=1, evaluation_parallel_to_training=True
    )
    cfg = ppo(max_iterations=2, evaluation=evaluation, ppo=PPOConfig(num_epochs=2))
    records: list[IterationRecord] = []
    result = train_ppo(dataclasses.replace(cfg, env_runner=runner), on_iteration=records.append)
    by = {f"{kind}/{name}/episode_return_mean" for kind, name in (("module", "p0"), ("module", "p1"))}
    by |= {"agent/0/episode_return_mean", "agent/1/episode_return_mean"}
    assert all(set(r.evaluation) == KEYS | by for r in records) and _evaluated(records) == [1, 2]
    for r in records:  # each agent acts for the length of the episode: its return is the episode's steps
        assert r.evaluation["agent/0/episode_return_mean"] == r.evaluation["module/p0/episode_return_mean"]
        total = r.evaluation["agent/0/episode_return_mean"] + r.evaluation["agent/1/episode_return_mean"]
        assert r.evaluation["episode_return_mean"] == pytest.approx(total)
    assert isinstance(result.policy, MultiAgentPolicy)


@pytest.mark.usefixtures("ray_session")
def test_dqn_and_appo_report_their_evaluations() -> None:
    dqn = dataclasses.replace(
        DQNTrainingConfig(), max_env_steps=1200, target_return=None,
        evaluation=EvaluationConfig(evaluation_interval=1, evaluation_duration=2),
    )  # fmt: skip
    records: list[IterationRecord] = []
    train_dqn(dqn, on_iteration=records.append, log_every_s=0.0)
    assert records and all(set(r.evaluation) == KEYS for r in records)
    assert _evaluated(records) == [r.iteration for r in records]
    appo = ppo(max_iterations=4, optimizer="async_samples", evaluation=EvaluationConfig(evaluation_interval=2))
    records.clear()
    result = train_ppo(appo, on_iteration=records.append)
    assert _evaluated(records) == [2, 4] and result.iterations == 4


@pytest.mark.usefixtures("ray_session")
def test_a_two_player_run_evaluates_against_the_random_opponent_with_its_rates_in_every_record() -> None:
    runner = EnvRunnerConfig(env=CallGame, multi_agent=MultiAgentConfig(), num_envs_per_env_runner=4, seed=0)
    runner = dataclasses.replace(runner, rollout_fragment_length=16)
    evaluation = EvaluationConfig(evaluation_interval=2, evaluation_duration=30, evaluation_opponent="random")
    cfg = ppo(max_iterations=2, evaluation=evaluation)
    records: list[IterationRecord] = []
    train_ppo(dataclasses.replace(cfg, env_runner=runner), on_iteration=records.append)
    rates = {f"{kind}{seat}" for kind in ("win", "draw", "loss") for seat in ("", "/a", "/b")}
    assert all(rates <= set(r.evaluation) for r in records)  # the same columns in every row
    assert all(math.isnan(records[0].evaluation[k]) for k in rates)  # iteration 1 did not evaluate
    last = records[1].evaluation
    assert last["num_episodes"] == 30 and last["win"] + last["draw"] + last["loss"] == pytest.approx(1.0, abs=1e-9)
    # Each seat was played (alternating seats over 2 runners' episodes), its rates a distribution too.
    assert all(last[f"win/{s}"] + last[f"draw/{s}"] + last[f"loss/{s}"] == pytest.approx(1.0, abs=1e-9) for s in "ab")


def test_an_opponent_without_evaluation_or_with_a_single_agent_env_is_refused_before_any_actor() -> None:
    with pytest.raises(ConfigError, match=r"'evaluation.evaluation_opponent' 'random' needs evaluation on"):
        ppo(evaluation=EvaluationConfig(evaluation_opponent="random"))
    single = ppo(max_iterations=1, evaluation=EvaluationConfig(evaluation_interval=1, evaluation_opponent="random"))
    with pytest.raises(ConfigError, match=r"plays two-player multi-agent games; this run's env is single-agent"):
        train_ppo(single)  # no Ray here: it fails before any actor would start
