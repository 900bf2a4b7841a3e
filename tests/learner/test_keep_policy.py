"""PolicyKeeper: a policy that cannot be saved is one log line, never a failed run or checkpoint."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np

from connectors.common import MeanStdFilter
from learner.checkpoint import Checkpointer, TrainingState, load_checkpoint
from learner.keep_policy import PolicyKeeper
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.runner_build import build_policy


class NoConfigFilter(MeanStdFilter):
    """A piece of the user's that cannot say how it was built (no ``get_config``)."""

    get_config = None  # type: ignore[assignment]


def test_a_policy_that_cannot_be_saved_is_a_line_and_the_checkpoint_goes_on_without_it(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    config = EnvRunnerConfig(env="CartPole-v1", env_to_module_connectors=(NoConfigFilter(),))
    lines: list[str] = []
    keeper = PolicyKeeper(
        lambda: build_policy(config, env.observation_space, env.action_space), policy_dir=tmp_path / "policy",
        log=lines.append,
    )  # fmt: skip
    assert keeper.final() is None and not (tmp_path / "policy").exists()
    assert lines == ["no policy kept: PolicyError: policy: the connector piece NoConfigFilter has no get_config() "
                     "(the keyword arguments that rebuild it), so a saved policy cannot rebuild it"]  # fmt: skip
    state = TrainingState(algo="ppo", env="CartPole-v1", observation_space="Box", iteration=1, env_steps=8,
                          learner={"w": np.ones(2)})  # fmt: skip
    saved = Checkpointer(tmp_path / "checkpoints", every=1).save(state, policy=keeper.build())
    assert not (saved / "policy").exists()
    assert load_checkpoint(saved, algo="ppo", env="CartPole-v1", observation_space="Box").env_steps == 8
