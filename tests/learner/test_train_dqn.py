"""The DQN loop end to end on a tiny budget: runners -> ReplayActor -> learner, a real learning
signal, every sampled env step received by the replay, and its config checks."""

from __future__ import annotations

import re

import pytest

from learner.train_dqn import DQNTrainingConfig, epsilon_at, train_dqn
from ray_sampler.errors import ConfigError

TINY = {"max_env_steps": 8000, "learning_starts": 500, "epsilon_steps": 4000, "target_return": 10_000.0}


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("prioritized", [False, True])
def test_dqn_learns_cartpole_through_the_replay_actor(prioritized: bool) -> None:
    lines: list[str] = []
    result = train_dqn(DQNTrainingConfig(**TINY, prioritized=prioritized), log=lines.append, log_every_s=0.0)
    means = [float(m.group(1)) for line in lines if (m := re.search(r"mean return ([\d.]+) \(last 20 ", line))]
    # A random policy averages about 22 on CartPole-v1: the first full window is near it, the last far above.
    assert means[0] < 40 and result["mean_return"] > 60
    assert result["env_steps"] == 8192 and not result["reached"] and result["num_updates"] > 3000
    assert result["runner_env_steps_sent"] == result["replay_num_env_steps_received"] >= result["env_steps"]
    assert lines[-1].startswith("did not reach mean return 10000: ")


def test_epsilon_schedule() -> None:
    cfg = DQNTrainingConfig(epsilon_steps=1000, epsilon_final=0.1)
    assert [round(epsilon_at(cfg, s), 3) for s in (0, 500, 1000, 5000)] == [1.0, 0.55, 0.1, 0.1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "'batch_size' must be an int >= 1"),
        ({"n_step": 1.5}, "'n_step' must be an int >= 1"),
        (
            {"learning_starts": 100, "replay_capacity": 50},
            "'learning_starts' must be an int in \\[0, replay_capacity\\]",
        ),
        ({"epsilon_final": 2.0}, "'epsilon_final' must be in \\[0, 1\\]"),
        ({"updates_per_env_step": 0}, "'updates_per_env_step' must be a finite number > 0"),
        ({"updates_per_env_step": float("inf")}, "'updates_per_env_step' must be a finite number > 0"),
        ({"lr": -1.0}, "'lr' must be a finite number > 0"),
        ({"lr": float("nan")}, "'lr' must be a finite number > 0"),
        ({"num_learners": -1}, "'num_learners' must be an int >= 0"),
        ({"batch_size": 1, "num_learners": 2}, "'batch_size' \\(1\\) must be >= 'num_learners' \\(2\\)"),
    ],
)
def test_bad_dqn_training_config_raises(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DQNTrainingConfig(**kwargs)
