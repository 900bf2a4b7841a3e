"""What a sub-env returns is checked: gymnasium's reset/step forms always, observations against the
space for each sub-env's first calls (``check_steps``; ``EnvRunnerConfig.check_env_first_steps``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import ConfigError, EnvError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.sub_envs import SubEnvVector

SPACE = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
OFF = "EnvRunnerConfig(check_env_first_steps=0) turns this check off"


class ContractEnv(gym.Env):
    """Returns good data except in the way ``kind`` says: ``old_reset`` (the observation alone),
    ``old_step`` (four values), ``reset_shape`` / ``reset_dtype`` (a reset observation of shape (3,)
    / float64), ``outside_at`` (an observation of 5.0 at that step)."""

    observation_space = SPACE
    action_space = gym.spaces.Discrete(2)

    def __init__(self, kind: str = "", outside_at: int = 0) -> None:
        self.kind, self.outside_at, self.t = kind, outside_at, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self.t = 0
        if self.kind == "old_reset":
            return np.zeros(2, np.float32)
        if self.kind == "reset_shape":
            return np.zeros(3, np.float32), {}
        if self.kind == "reset_dtype":
            return np.zeros(2, np.float64), {}
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        if self.kind == "old_step":
            return np.zeros(2, np.float32), 1.0, False, {}
        value = 5.0 if self.t == self.outside_at else 0.5
        return np.full(2, value, np.float32), 1.0, self.t >= 4, False, {}


def _vector(kind: str = "", *, check_steps: int = 100, outside_at: int = 0, restarts: bool = False) -> SubEnvVector:
    extra: dict[str, Any] = {}
    if restarts:
        extra = {"make_env": lambda v: ContractEnv(kind, outside_at), "reset_seed": lambda v, r: None}
    envs = [ContractEnv(), ContractEnv(kind, outside_at)]  # the second one breaks the contract
    return SubEnvVector(envs, worker_index=3, check_steps=check_steps, **extra)


@pytest.mark.parametrize("check_steps", [100, 0], ids=["checked", "unchecked"])
@pytest.mark.parametrize("restarts", [False, True], ids=["no-restarts", "restarts"])
def test_a_reset_returning_only_the_observation_names_gymnasiums_form(check_steps: int, restarts: bool) -> None:
    with pytest.raises(EnvError) as raised:
        _vector("old_reset", check_steps=check_steps, restarts=restarts).reset(seed=0)
    assert str(raised.value) == (
        "sub-env worker_index=3, vector_index=1: reset() must return (observation, info), gymnasium's API "
        "(got a ndarray; the old gym API returned the observation alone)"
    )


@pytest.mark.parametrize("restarts", [False, True], ids=["no-restarts", "restarts"])
def test_a_step_returning_four_values_names_gymnasiums_form(restarts: bool) -> None:
    env = _vector("old_step", check_steps=0, restarts=restarts)
    env.reset(seed=0)
    with pytest.raises(EnvError) as raised:
        env.step(np.array([0, 1]))
    assert str(raised.value) == (
        "sub-env worker_index=3, vector_index=1: step() must return (observation, reward, terminated, truncated, "
        "info), gymnasium's API (got a tuple of 4; the old gym API returned (observation, reward, done, info))"
    )


@pytest.mark.parametrize(
    ("kind", "got"),
    [("reset_shape", "of shape (3,) and dtype float32"), ("reset_dtype", "of shape (2,) and dtype float64")],
    ids=["shape", "dtype"],
)
def test_a_reset_observation_of_another_shape_or_dtype_names_the_space(kind: str, got: str) -> None:
    with pytest.raises(EnvError) as raised:
        _vector(kind).reset(seed=0)
    assert str(raised.value) == (
        f"sub-env worker_index=3, vector_index=1 returned observation {got}, where {SPACE} holds shape (2,) and "
        f"dtype float32 in reset() (its call 0 since it was built; {OFF})"
    )


def test_with_the_check_off_a_row_that_cannot_be_batched_still_names_its_sub_env_and_the_space() -> None:
    """Before: EnvError ... ValueError('Output array is the wrong shape')."""
    with pytest.raises(EnvError) as raised:
        _vector("reset_shape", check_steps=0).reset(seed=0)
    assert str(raised.value) == (
        f"sub-env worker_index=3, vector_index=1 returned observation of shape (3,) and dtype float32, where {SPACE} "
        "holds shape (2,) and dtype float32"
    )


def test_an_observation_outside_the_bounds_is_refused_naming_the_call() -> None:
    env = _vector(outside_at=3)
    env.reset(seed=0)
    env.step(np.array([0, 1]))
    env.step(np.array([0, 1]))
    with pytest.raises(EnvError) as raised:
        env.step(np.array([0, 1]))
    assert str(raised.value) == (
        f"sub-env worker_index=3, vector_index=1 returned observation 5.0 at index [0], outside {SPACE}'s bounds "
        f"[-1.0, 1.0] there in step() (its call 3 since it was built; {OFF})"
    )


def test_only_the_first_calls_are_checked() -> None:
    """Three checked calls (the reset and two steps): the bad third step passes unseen."""
    env = _vector(outside_at=3, check_steps=3)
    env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(np.array([0, 1]))
    assert obs[1].tolist() == [5.0, 5.0]


def test_a_rebuilt_sub_env_is_checked_from_its_first_call_again() -> None:
    """Sub-env 1 fails at its second step and is rebuilt (restarts on); its replacement's bad step 3
    is one of its own first four calls (its reset, steps 1 to 3)."""

    class FailsOnce(ContractEnv):
        def step(self, action: Any) -> Any:
            if self.t == 1:
                raise RuntimeError("boom")
            return super().step(action)

    env = SubEnvVector(
        [ContractEnv(), FailsOnce()],
        worker_index=3,
        make_env=lambda v: ContractEnv("", outside_at=3),
        reset_seed=lambda v, r: None,
        check_steps=4,
    )
    env.reset(seed=0)
    env.step(np.array([0, 1]))  # FailsOnce's first step
    env.step(np.array([0, 1]))  # raises: rebuilt (its reset is the new env's call 0)
    assert env.failed == [1] and env.num_restarts == 1
    env.step(np.array([0, 1]))
    env.step(np.array([0, 1]))
    with pytest.raises(EnvError, match=r"vector_index=1 returned observation 5\.0 .* \(its call 3 since it was built"):
        env.step(np.array([0, 1]))


def test_an_env_runner_checks_by_default_and_the_field_turns_it_off() -> None:
    """The CLI and the group check envs before any actor starts; a runner used directly did not."""
    config = EnvRunnerConfig(env=lambda ctx: ContractEnv("", outside_at=2), rollout_fragment_length=5)
    with pytest.raises(EnvError, match=r"returned observation 5\.0 at index \[0\], outside"):
        EnvRunner(config).sample()
    unchecked = EnvRunner(EnvRunnerConfig(env=config.env, rollout_fragment_length=5, check_env_first_steps=0))
    assert sum(len(ep) for ep in unchecked.sample()) == 5


@pytest.mark.parametrize("bad", [-1, 1.5, True, "100"])
def test_check_env_first_steps_must_be_an_int_from_zero(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"^'check_env_first_steps' must be an int >= 0"):
        EnvRunnerConfig(env="CartPole-v1", check_env_first_steps=bad)  # type: ignore[arg-type]


def test_the_steps_of_a_refused_call_are_dropped_and_counted() -> None:
    """Two steps made and the refused third (its transition happened in the env): 3 dropped."""
    runner = EnvRunner(EnvRunnerConfig(env=lambda ctx: ContractEnv("", outside_at=3), rollout_fragment_length=5))
    with pytest.raises(EnvError, match=r"returned observation 5\.0 at index \[0\]"):
        runner.sample()
    (episode,) = runner.sample(num_timesteps=2)  # a rebuilt env, two clean steps
    metrics = runner.get_metrics()
    assert (len(episode), metrics.num_env_steps_dropped, metrics.num_episodes_dropped_env_error) == (2, 3, 1)
