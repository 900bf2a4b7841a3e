"""train_async (asynchronous samples, APPO's loss on V-trace targets): it learns; every sampled step
is learned from once, dropped for its policy lag (counted), or counted unused at the end; no
fragment learned from exceeds the lag bound; what it does not take yet is refused in one line."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import ray

from learner.checkpoint import Checkpointer, load_checkpoint
from learner.learner import PPOConfig
from learner.metrics import IterationRecord, StopReason, async_figures
from learner.optimizers import AsyncSamplesConfig
from learner.train import PPOTrainingConfig, train_ppo
from learner.train_async import AsyncTrainResult, train_async
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from tests.helpers import greedy_return, stamp_creator
from tests.ray_sampler.sampling.checks import stamps


def config(env: Any = "CartPole-v1", **kwargs: Any) -> PPOTrainingConfig:
    runner = EnvRunnerConfig(env=env, num_envs_per_env_runner=4, rollout_fragment_length=64, seed=0)
    group = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    kwargs.setdefault("ppo", PPOConfig(num_epochs=4, minibatch_size=128, seed=0))
    return PPOTrainingConfig(env_runner=runner, env_runner_group=group, **kwargs)


@pytest.mark.usefixtures("ray_session")
def test_impala_learns_cartpole_with_runners_that_never_wait() -> None:
    """IMPALA (the plain policy gradient, one pass over each fragment as it comes), on V-trace's
    advantages, through ``train_ppo`` with ``optimizer="async_samples"``. APPO's learning signal
    (the clipped surrogate, to a mean of 100) is checked with a learner actor, through a killed
    runner and a killed learner, below.

    IMPALA's settings: at lr 2e-3 without an entropy bonus it missed 60 in 200 updates at 2 of 5
    seeds (its policy collapsed); at lr 1e-3 with a bonus of 0.01 it reached 60 in 38-48 updates at 8
    of 8 seeds, and in 84-89 with two busy loops on the same 2 cores (longer policy lags)."""
    target = 60.0
    ppo = PPOConfig(num_epochs=1, minibatch_size=128, seed=0, policy_loss="pg", lr=1e-3, entropy_coeff=0.01)
    result = train_ppo(
        config(target_return=target, max_iterations=200, ppo=ppo, optimizer="async_samples"), log=lambda line: None
    )
    assert isinstance(result, AsyncTrainResult)
    assert result.reached and result.mean_return >= target  # random play: about 22
    assert result.env_steps == 256 * result.iterations  # one fragment (4 sub-envs x 64 steps) per update
    assert sum(result.policy_lags.values()) >= result.iterations and 0.0 < result.runner_utilization <= 1.0
    assert greedy_return(result.policy) > 30  # the learner's final weights, acting greedily with no Ray


@pytest.mark.usefixtures("ray_session")
def test_every_step_is_learned_from_once_or_counted_and_no_fragment_exceeds_the_lag_bound() -> None:
    """StampEnv's observations name their (worker, sub-env, episode, step): the fragments the learner
    took hold no step twice, and every step sampled was learned from, dropped or left unused."""
    taken: list[tuple[list[Any], int]] = []
    cfg = config(stamp_creator, target_return=None, max_iterations=30)
    cfg = dataclasses.replace(cfg, env_runner=dataclasses.replace(cfg.env_runner, rollout_fragment_length=8))
    cfg = dataclasses.replace(cfg, async_samples=AsyncSamplesConfig(max_policy_lag=1))

    def slow_learner(episodes: list[Any], lag: int) -> None:  # the runners would run ahead, unbounded
        taken.append((episodes, lag))
        time.sleep(0.02)

    result = train_async(cfg, log=lambda line: None, on_fragment=slow_learner)
    assert result.iterations == len(taken) == 30
    assert all(lag <= 1 for _, lag in taken)
    steps = [s for episodes, _ in taken for ep in episodes for s in stamps(ep)[1:]]
    assert len(steps) == len(set(steps)) == result.env_steps == 30 * 32
    assert result.num_env_steps_sampled == result.env_steps + result.num_env_steps_dropped + result.num_env_steps_unused
    assert result.num_fragments_dropped == sum(n for lag, n in result.policy_lags.items() if lag > 1)
    assert result.num_env_steps_dropped == 32 * result.num_fragments_dropped
    # Backpressure: at most 2 runners x 2 requests wait for the slow learner, and no more were sampled.
    assert result.max_requests_in_flight <= 4 and result.num_env_steps_unused <= 4 * 32


@pytest.mark.usefixtures("ray_session")
def test_a_killed_runner_and_a_killed_learner_actor_are_replaced_and_what_they_held_counted_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runner 1 killed at update 4: replaced, what it was sampling counted lost. With
    ``num_learners=1`` the updates queue in a learner actor (at most ``learner_queue_size``),
    killed at update 8: replaced from the last broadcast weights, the fragments queued in it
    counted lost. The fragments go from the runners to the learner actor by reference: the
    driver never unpacks one. The run still learns (APPO to a mean of 100)."""
    import importlib

    module = importlib.import_module("learner.train_async")  # the package exports a function of that name

    def not_in_the_driver(col: Any) -> Any:
        raise AssertionError("the driver unpacked a fragment: it should only pass its reference on")

    monkeypatch.setattr(module, "unpack_columnar", not_in_the_driver)
    killed: list[str] = []
    lines: list[str] = []

    def kill(record: IterationRecord) -> None:
        suffix = {4: "-env-runner-1", 8: "-learner"}.get(record.iteration)
        if suffix is not None:
            name = next(n for n in ray.util.list_named_actors() if n.endswith(suffix))
            ray.kill(ray.get_actor(name))
            killed.append(name)

    cfg = config(target_return=100.0, max_iterations=200, num_learners=1, num_cpus_per_learner=0.5)
    result = train_async(cfg, log=lines.append, on_iteration=kill)
    assert len(killed) == 2 and result.reached
    assert result.num_env_runner_restarts == 1
    assert result.num_env_steps_lost in (256, 512)  # its request running, and the one queued behind if not begun
    assert result.num_learner_restarts == 1
    assert result.num_env_steps_lost_by_learner == 256 * result.num_fragments_lost_by_learner
    # What the learner ran and held when killed (at most the queue's 2), and what it held of the
    # killed runner's fragments (at most 2 more: their references died with the runner).
    assert 1 <= result.num_fragments_lost_by_learner <= 4
    assert 1 <= result.max_learner_queue <= 2
    assert result.num_env_steps_sampled == (
        result.env_steps + result.num_env_steps_dropped + result.num_env_steps_unused
        + result.num_env_steps_lost_by_learner
    )  # fmt: skip
    # Each loss is said in a line: the learner's queue when it died, and each fragment whose runner
    # died before the learner read it (when the learner actor got to it).
    died = [line for line in lines if line.startswith("learner died")]
    assert len(died) == 1 and "restarted from the last broadcast weights (restart 1), " in died[0]
    said = [int(re.search(r"(\d+) env steps (of its queue )?lost$", line).group(1)) for line in lines if "lost" in line
            and (line.startswith("learner died") or line.startswith("a fragment was lost"))]  # fmt: skip
    assert sum(said) == result.num_env_steps_lost_by_learner


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_learners": 2}, r"^the asynchronous loop has one learner for now: 'num_learners' must be 0 \(the"),
        ({"ppo": PPOConfig(observation_filter="mean_std")}, r"^the asynchronous loop takes no 'observation_filter'"),
    ],
)
def test_what_it_does_not_take_yet_is_refused_in_one_line(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        train_async(config(**change))


def test_a_multi_agent_env_and_complete_episodes_are_refused() -> None:
    cfg = config(make_multi_agent("CartPole-v1", 2))
    with pytest.raises(ConfigError, match=r"^the asynchronous loop trains single-agent envs for now"):
        train_async(cfg)
    complete = dataclasses.replace(config().env_runner, batch_mode="complete_episodes")
    with pytest.raises(ConfigError, match=r"'batch_mode' must be 'truncate_episodes'"):
        train_async(dataclasses.replace(config(), env_runner=complete))
    with pytest.raises(ConfigError, match=r"^'max_policy_lag' must be"):
        AsyncSamplesConfig(max_policy_lag=-1)


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("num_learners", [0, 1], ids=["driver-learner", "learner-actor"])
def test_checkpoints_resume_with_what_was_in_flight_counted_lost(num_learners: int, tmp_path: Path) -> None:
    """A checkpoint every 2 updates (its learner's queue drained) and one at the end; a run resumed
    from update 2 carries on its counters and counts the fragments in flight at that save as lost."""
    cfg = config(target_return=None, max_iterations=5, num_learners=num_learners)
    first = train_async(cfg, checkpointer=Checkpointer(tmp_path, every=2), log=lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0000002", "ckpt-0000004", "ckpt-0000005"]
    space = repr(gym.make("CartPole-v1").observation_space)
    end = load_checkpoint(tmp_path / "ckpt-0000005", algo="ppo", env="CartPole-v1", observation_space=space)
    assert (end.iteration, end.env_steps) == (5, first.env_steps) and end.counters["in_flight_env_steps"] == 0
    mid = load_checkpoint(tmp_path / "ckpt-0000002", algo="ppo", env="CartPole-v1", observation_space=space)
    in_flight = int(mid.counters["in_flight_env_steps"])
    assert in_flight > 0 and in_flight % 256 == 0  # whole fragments of 4 sub-envs x 64 steps
    lines: list[str] = []
    records: list[IterationRecord] = []
    resumed = train_async(
        dataclasses.replace(cfg, max_iterations=4), resume=mid, log=lines.append, on_iteration=records.append
    )
    assert [r.iteration for r in records] == [3, 4] and resumed.env_steps == 4 * 256
    assert resumed.num_env_steps_lost_on_resume == in_flight and records[-1].num_env_steps_lost >= in_flight
    assert (
        f"resumed from update 2 (512 env steps): the {in_flight} env steps in flight at the save are lost"
        in "\n".join(lines)
    )
    assert sum(resumed.policy_lags.values()) >= sum(int(v) for k, v in mid.counters.items() if k.startswith("lag/"))


@pytest.mark.usefixtures("ray_session")
def test_an_env_step_budget_stops_the_updates_and_each_record_has_the_lag_and_counts() -> None:
    """4 updates of a 256-step fragment each make the 1,024 env steps; each record carries the policy
    lag and the steps dropped and unused so far, the result the final figures."""
    records: list[IterationRecord] = []
    result = train_async(config(target_return=None, max_env_steps=1024), on_iteration=records.append)
    assert (result.iterations, result.env_steps, result.stopped_by) == (4, 1024, StopReason.MAX_ENV_STEPS)
    assert [r.env_steps for r in records] == [256, 512, 768, 1024]
    assert list(records[-1].asynchronous) == [
        "policy_lag_mean", "policy_lag_max", "num_env_steps_dropped", "num_env_steps_unused"
    ]  # fmt: skip
    assert result.asynchronous == async_figures(
        result.policy_lags, dropped=result.num_env_steps_dropped, unused=result.num_env_steps_unused
    )
    assert result.asynchronous["policy_lag_max"] == max(result.policy_lags)
