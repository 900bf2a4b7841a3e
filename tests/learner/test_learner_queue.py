"""LearnerQueue: one learner actor with a bounded queue of updates; a slow learner makes the driver
wait, and a learner that keeps dying stops the run in one line."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from learner.learner import Learner, PPOConfig
from learner.learner_queue import LearnerFailedError, LearnerQueue
from learner.train import env_spaces
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import build_module

pytestmark = pytest.mark.usefixtures("ray_session")

RUNNER = EnvRunnerConfig(env="CartPole-v1")


def make_module() -> Any:
    return build_module(RUNNER, *env_spaces("CartPole-v1"))


class SlowLearner(Learner):
    """Takes 0.2 s an update, and says which update it was."""

    def update_from_episodes(self, episodes: list[Any]) -> Any:  # type: ignore[override]
        time.sleep(0.2)
        return {"episodes": episodes}


class DyingLearner(Learner):
    """Its process exits in every update."""

    def update_from_episodes(self, episodes: list[Any]) -> Any:  # type: ignore[override]
        os._exit(1)


def test_at_most_the_queue_size_waits_and_every_update_comes_back_once_in_order() -> None:
    queue = LearnerQueue(make_module, PPOConfig(), learner_class=SlowLearner, queue_size=2, num_cpus=0)
    try:
        finished = []
        for i in range(5):
            finished += queue.submit([i], 10)
            assert len(queue.pending) <= 2
        finished += queue.drain()
        assert [m["episodes"] for m, _ in finished] == [[0], [1], [2], [3], [4]]
        assert [steps for _, steps in finished] == [10] * 5 and queue.max_queued == 2
        weights = queue.refresh()
        assert set(weights) == set(queue.state["module"]) and queue.take_finished() == []
    finally:
        queue.stop()


def test_a_learner_that_keeps_dying_is_replaced_twice_then_stops_the_run_in_one_line() -> None:
    lines: list[str] = []
    queue = LearnerQueue(
        make_module, PPOConfig(), learner_class=DyingLearner, queue_size=2, num_cpus=0, log=lines.append
    )
    try:
        with pytest.raises(LearnerFailedError, match=r"^the learner actor died 3 times in a row without finishing"):
            for i in range(10):
                queue.submit([i], 10)
                queue.drain()
        assert queue.num_restarts == 2 and queue.num_fragments_lost == 3 and queue.num_env_steps_lost == 30
        assert [line.split(";")[1] for line in lines] == [
            " restarted from the last broadcast weights (restart 1), 10 env steps of its queue lost",
            " restarted from the last broadcast weights (restart 2), 10 env steps of its queue lost",
        ]
    finally:
        queue.stop()
