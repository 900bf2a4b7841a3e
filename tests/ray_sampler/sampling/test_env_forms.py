"""Every way of handing over an env samples and trains the same way: an env class, a creator, a
``register_env`` name, a gymnasium id the user's module registered, ``module:Name`` (a class, a
creator or an id) and a vector-env creator; locally, in remote runners and in DQN (every form's
PPO run with remote runners is tests/ray_sampler/cli/test_cli_cluster.py's). The learners'
spaces come from the runners' own resolution (``probe_env``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from learner import DQNTrainingConfig, train_dqn
from ray_sampler.errors import EnvCreatorError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_creator import (
    make_vector_env,
    probe_env,
    register_env,
    resolve_creator,
    unregister_env,
)
from ray_sampler.sampling.env_runner import EnvRunner
from tests.ray_sampler.sampling import user_envs
from tests.ray_sampler.sampling.user_envs import USER_ID, LightSide

MODULE = user_envs.__name__

FORMS: dict[str, str | Callable[..., Any]] = {
    "class": LightSide,
    "creator": user_envs.make,
    "register_env": "light-side-registered",
    "user_gym_id": USER_ID,
    "module:Class": f"{MODULE}:LightSide",
    "module:creator": f"{MODULE}:make",
    "module:Id": f"{MODULE}:{USER_ID}",
    "vector_creator": user_envs.make_vector,
}


@pytest.fixture(autouse=True, scope="module")
def registered() -> Any:
    register_env("light-side-registered", user_envs.make)
    yield
    unregister_env("light-side-registered")


def _runner_config(env: Any, **kwargs: Any) -> EnvRunnerConfig:
    return EnvRunnerConfig(env=env, num_envs_per_env_runner=2, rollout_fragment_length=8, **kwargs)


@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
def test_every_form_samples_the_users_env(form: str) -> None:
    runner = EnvRunner(_runner_config(FORMS[form]))
    episodes = runner.sample()
    assert sum(len(ep) for ep in episodes) == 16
    assert runner.observation_space == LightSide.observation_space
    observations = np.concatenate([ep.get_observations() for ep in episodes])
    assert set(np.round(observations[:, 0] * 3).astype(int)) <= {0, 1, 2, 3}  # positions 0..size (3)
    assert runner.is_native_vector_env is (form == "vector_creator")


# Every form trains PPO with remote runners in tests/ray_sampler/cli/test_cli_cluster.py, where
# the runners see the module only through the shipped working directory.


# DQN resolves the env as PPO does (probe_env, then the group's preflight): one form of each kind.
@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("form", ["class", "user_gym_id", "vector_creator"])
def test_a_callable_an_id_and_a_vector_creator_train_dqn(form: str) -> None:
    dqn = DQNTrainingConfig()
    dqn = dataclasses.replace(
        dqn,
        env_runner=dataclasses.replace(dqn.env_runner, env=FORMS[form], num_envs_per_env_runner=2),
        replay=dataclasses.replace(dqn.replay, min_size_to_sample=64),
        max_env_steps=256,
        target_return=None,
    )
    result = train_dqn(dqn, log=lambda line: None)
    assert result.env_steps >= 256 and result.num_updates > 0 and 0.0 < result.mean_return <= 1.0


@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
def test_the_learners_spaces_come_from_the_runners_resolution(form: str) -> None:
    probe = probe_env(FORMS[form])
    assert (probe.observation_space, probe.action_space) == (LightSide.observation_space, LightSide.action_space)
    # Only the gymnasium id carries a spec, and with it the reward threshold the stop rule uses.
    assert probe.reward_threshold == (0.9 if form in ("user_gym_id", "module:Id") else None)


def test_env_config_reaches_the_env_and_may_shape_its_spaces() -> None:
    def sized(config: Any) -> gym.Env:
        env = LightSide(config)
        env.observation_space = gym.spaces.Box(0.0, 1.0, (config["width"],), np.float32)
        return env

    assert probe_env(sized, {"width": 4}).observation_space.shape == (4,)


def test_a_gymnasium_id_reaches_the_runners_as_its_spec() -> None:
    """An id the user's module registered in the driver is made from its entry point elsewhere."""
    creator = resolve_creator(USER_ID)
    assert creator.spec.id == USER_ID and creator.spec.entry_point == f"{MODULE}:LightSide"  # type: ignore[attr-defined]
    del gym.registry[USER_ID]  # a runner process that never imported the module
    try:
        env = creator({"worker_index": 0, "vector_index": 0, "num_workers": 0, "num_envs": 1})  # type: ignore[arg-type]
        assert isinstance(env.unwrapped, LightSide)
    finally:
        gym.register(USER_ID, entry_point=f"{MODULE}:LightSide", max_episode_steps=20, reward_threshold=0.9)


class TestRefusals:
    """Each failure names the env and what went wrong, in one line."""

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                "no_such_module:Env",
                "'env' 'no_such_module:Env': module 'no_such_module' does not import: ModuleNotFoundError: No module "
                "named 'no_such_module' (searched: the current directory, PYTHONPATH and the installed packages)",
            ),
            (
                f"{MODULE}:LightSid",
                f"'env' '{MODULE}:LightSid': module '{MODULE}' imported, but it has no env class or creator 'LightSid' "
                "and registered no gymnasium id 'LightSid'; did you mean 'LightSide'?",
            ),
            (
                f"{MODULE}:UserLightSid-v0",
                f"'env' '{MODULE}:UserLightSid-v0': module '{MODULE}' imported, but it has no env class or creator "
                f"'UserLightSid-v0' and registered no gymnasium id 'UserLightSid-v0'; did you mean '{USER_ID}'?",
            ),
            (":Env", "'env' ':Env': the module form is 'module:Name' (a module path, a colon, a name)"),
            (
                "CartPol-v1",
                "'env' 'CartPol-v1' is neither a name given to register_env nor a gymnasium id (registered: "
                "['light-side-registered']; a module's env: 'module:Name'); did you mean 'CartPole-v1' or "
                "'CartPole-v0'?",
            ),
        ],
        ids=["module-missing", "attribute-missing", "id-missing", "no-module", "unknown-id"],
    )
    def test_a_name_that_does_not_resolve(self, env: str, message: str) -> None:
        with pytest.raises(EnvCreatorError) as raised:
            resolve_creator(env)
        assert str(raised.value) == message

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                user_envs.fails,
                f"env creator {MODULE}.fails failed for worker_index=0, vector_index=0: ValueError: size must be "
                "positive",
            ),
            (
                f"{MODULE}:not_an_env",
                f"env creator {MODULE}.not_an_env must return a gymnasium.Env (got builtins.dict for worker_index=0, "
                "vector_index=0)",
            ),
        ],
        ids=["raises", "not-an-env"],
    )
    def test_a_creator_that_fails(self, env: Any, message: str) -> None:
        with pytest.raises(EnvCreatorError) as raised:
            probe_env(env)
        assert str(raised.value) == message

    def test_a_vector_env_of_another_size(self) -> None:
        def three(config: Any) -> gym.vector.VectorEnv:
            return gym.vector.SyncVectorEnv([LightSide for _ in range(3)])

        with pytest.raises(
            EnvCreatorError, match=r"returned a vector env of 3 sub-envs; num_envs_per_env_runner is 2 "
        ):
            make_vector_env(_runner_config(three), worker_index=0, num_workers=0)

    def test_a_vector_env_with_a_horizon(self) -> None:
        with pytest.raises(EnvCreatorError, match=r"returned a vector env, which takes no horizon: max_episode_steps"):
            make_vector_env(_runner_config(user_envs.make_vector, max_episode_steps=5), worker_index=0, num_workers=0)
