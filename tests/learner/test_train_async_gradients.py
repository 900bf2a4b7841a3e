"""train_async_gradients (A3C's asynchronous gradients): it learns; every env step sampled is used,
dropped for its staleness (counted), unused at the end or lost with a killed worker; no gradient
applied is staler than the bound; a killed worker is replaced; what it does not take is refused."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import ray

from learner.learner import PPOConfig
from learner.metrics import IterationRecord, StopReason, async_figures
from learner.optimizers import AsyncGradientsConfig
from learner.train import PPOTrainingConfig, train_ppo
from learner.train_async_gradients import AsyncGradientsResult, train_async_gradients
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from tests.helpers import greedy_return

FRAGMENT = 4 * 64


def config(**kwargs: Any) -> PPOTrainingConfig:
    runner = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=64, seed=0)
    group = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    kwargs.setdefault("ppo", PPOConfig(seed=0, policy_loss="pg"))
    return PPOTrainingConfig(env_runner=runner, env_runner_group=group, optimizer="async_gradients", **kwargs)


@pytest.mark.usefixtures("ray_session")
def test_learns_cartpole_and_every_step_is_counted() -> None:
    result = train_ppo(config(target_return=80.0, max_iterations=300), log=lambda line: None)
    assert isinstance(result, AsyncGradientsResult)
    assert result.reached and result.mean_return >= 80  # random play: about 22
    assert result.env_steps == FRAGMENT * result.iterations  # one fragment's gradient per update
    assert sum(result.staleness.values()) == result.iterations + result.num_gradients_dropped
    sampled = FRAGMENT * sum(result.staleness.values())
    assert sampled == result.env_steps + result.num_env_steps_dropped
    assert result.num_env_steps_unused % FRAGMENT == 0 and result.num_env_steps_lost == 0
    assert greedy_return(result.policy) > 30  # the central module's final weights, acting greedily with no Ray


@pytest.mark.usefixtures("ray_session")
def test_gradients_staler_than_the_bound_are_dropped_and_counted() -> None:
    result = train_async_gradients(
        config(target_return=None, max_iterations=60, async_gradients=AsyncGradientsConfig(max_staleness=0)),
        log=lambda line: None,
    )
    assert result.iterations == 60
    # Two workers: while one's gradient is applied, the other's was computed with the weights before.
    # (60 updates, not 20: under load the second worker's first gradient once came after the first
    # worker's 20th, and nothing was stale.)
    assert result.num_gradients_dropped == sum(n for s, n in result.staleness.items() if s > 0) > 0
    assert result.num_env_steps_dropped == FRAGMENT * result.num_gradients_dropped
    assert result.staleness[0] == 60  # every gradient applied was computed with the current weights


@pytest.mark.usefixtures("ray_session")
def test_a_killed_worker_is_replaced_and_its_fragment_counted_lost() -> None:
    killed: list[str] = []

    def kill_one(record: IterationRecord) -> None:
        if record.iteration == 3:
            name = next(n for n in ray.util.list_named_actors() if n.endswith("-gradient-worker-1"))
            ray.kill(ray.get_actor(name))
            killed.append(name)

    lines: list[str] = []
    result = train_async_gradients(
        config(target_return=None, max_iterations=12), log=lines.append, on_iteration=kill_one
    )
    assert killed and result.iterations == 12 and result.num_worker_restarts == 1
    assert result.num_env_steps_lost == FRAGMENT
    assert any(line.startswith("gradient worker 1 died (") for line in lines)
    assert not [n for n in ray.util.list_named_actors() if killed[0].rsplit("-", 1)[0] in n]  # all stopped


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_learners": 1}, r"^the asynchronous-gradients loop applies gradients in the driver: 'num_learners'"),
        ({"ppo": PPOConfig(observation_filter="mean_std")}, r"^the asynchronous-gradients loop takes no 'observation"),
    ],
)
def test_what_it_does_not_take_yet_is_refused_in_one_line(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        train_async_gradients(config(**change))
    complete = dataclasses.replace(config().env_runner, batch_mode="complete_episodes")
    with pytest.raises(ConfigError, match=r"'batch_mode' must be 'truncate_episodes'"):
        train_async_gradients(dataclasses.replace(config(), env_runner=complete))


@pytest.mark.usefixtures("ray_session")
def test_an_env_step_budget_stops_the_updates_and_each_record_has_the_staleness_and_counts() -> None:
    records: list[IterationRecord] = []
    result = train_async_gradients(
        config(target_return=None, max_env_steps=3 * FRAGMENT), log=lambda line: None, on_iteration=records.append
    )
    assert (result.iterations, result.env_steps, result.stopped_by) == (3, 3 * FRAGMENT, StopReason.MAX_ENV_STEPS)
    assert [r.env_steps for r in records] == [FRAGMENT, 2 * FRAGMENT, 3 * FRAGMENT]
    assert records[-1].asynchronous["num_env_steps_dropped"] == result.num_env_steps_dropped
    assert result.asynchronous == async_figures(
        result.staleness, dropped=result.num_env_steps_dropped, unused=result.num_env_steps_unused
    )
