"""check_env refuses bad envs with one line naming the env and step; the group runs it before any actor
starts; runners refuse NaN and inf that appear later (``check_env_data``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray

from ray_sampler.errors import ConfigError, EnvCheckError, EnvError
from ray_sampler.sampling import EnvRunner, EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
from ray_sampler.sampling.env_check import check_env, describe_non_finite


class FaultyEnv(gym.Env):
    """A counting env (obs = [t, t, t], reward = 1.0, ends at step 50) that returns one kind of bad
    value from step ``at_step`` on (``fault`` None: never)."""

    observation_space = gym.spaces.Box(-100.0, 100.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, fault: str | None = None, at_step: int = 1) -> None:
        self.fault, self.at_step, self.t = fault, at_step, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> tuple[Any, Any, Any, bool, dict]:
        self.t += 1
        obs, reward, terminated = np.full(3, self.t, np.float32), 1.0, self.t >= 50
        bad = self.fault is not None and self.t >= self.at_step
        if bad and self.fault == "nan_obs":
            obs[1] = np.nan
        if bad and self.fault == "outside":
            obs[2] = 1000.0
        replaced = {"inf_reward": np.inf, "none_reward": None, "str_reward": "1.0", "bool_reward": True}
        if bad and self.fault in replaced:
            reward = replaced[self.fault]
        if bad and self.fault == "int_terminated":
            return obs, reward, int(terminated), False, {}
        return obs, reward, terminated, False, {}


class DictObsEnv(gym.Env):
    """Dict observations (a Box and a Discrete), ends at step 20."""

    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "mode": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        self.t += 1
        return self._obs(), float(self.np_random.random()), self.t >= 20, False, {}

    def _obs(self) -> dict:
        return {"pos": self.np_random.uniform(-1, 1, 2).astype(np.float32), "mode": int(self.np_random.integers(3))}


BAD = {
    "NaNObs-v0": ("nan_obs", 3, r"at step 3: observation has NaN at index \[1\] \(observations must be finite\)"),
    "InfReward-v0": ("inf_reward", 2, r"at step 2: reward is inf \(rewards must be finite\)"),
    "OutsideObs-v0": ("outside", 2, r"at step 2: observation \[ 2\. 2\. 1000\.\] is outside the observation space"),
    "NoneReward-v0": ("none_reward", 1, r"at step 1: reward is None of type NoneType \(rewards must be real numbers"),
    "StrReward-v0": ("str_reward", 1, r"at step 1: reward is '1\.0' of type str \(rewards must be real numbers"),
    "BoolReward-v0": ("bool_reward", 1, r"at step 1: reward is True of type bool \(rewards must be real numbers"),
    "IntTerminated-v0": ("int_terminated", 1, r"at step 1: terminated is 0 of type int \(terminated must be a bool"),
    "LateNaN-v0": ("nan_obs", 5, r"at step 5: observation has NaN at index \[1\]"),
}

for env_id, (fault, at_step, _) in BAD.items():
    gym.register(env_id, entry_point=FaultyEnv, kwargs={"fault": fault, "at_step": at_step})
gym.register("GoodCounting-v0", entry_point=FaultyEnv)
gym.register("DictObs-v0", entry_point=DictObsEnv)


class TestCheckEnv:
    @pytest.mark.parametrize("env_id", list(BAD), ids=list(BAD))
    def test_bad_env_is_refused_with_one_line_naming_env_step_and_switch(self, env_id: str) -> None:
        with pytest.raises(EnvCheckError, match=f"^env '{env_id}' failed its check {BAD[env_id][2]}") as info:
            check_env(env_id)
        message = str(info.value)
        assert "\n" not in message
        assert message.endswith("turn the check off with --no-env-check (EnvRunnerGroupConfig(check_env=False))")

    def test_an_env_that_raises_is_refused_unless_failing_sub_envs_are_rebuilt(self) -> None:
        def creator(ctx: Any) -> gym.Env:
            env = gym.make("CartPole-v1")
            steps = {"n": 0}
            step = env.step

            def failing_step(action: Any) -> Any:
                steps["n"] += 1
                if steps["n"] == ctx["boom_at"]:
                    raise RuntimeError("boom")
                return step(action)

            env.step = failing_step  # type: ignore[method-assign]
            return env

        for boom_at in (1, 40):  # within gymnasium's checker, and within the random steps
            with pytest.raises(
                EnvCheckError, match=r"^env '.*creator' raised during its check: RuntimeError\('boom'\)"
            ):
                check_env(creator, {"boom_at": boom_at})
            check_env(creator, {"boom_at": boom_at}, tolerate_errors=True)  # the runners rebuild such sub-envs

    def test_the_check_does_not_change_the_env_config_the_runners_get(self) -> None:
        config = {"seen": []}
        check_env(lambda ctx: ctx["seen"].append(1) or gym.make("CartPole-v1"), config)
        assert config == {"seen": []}

    @pytest.mark.parametrize(
        "env_id", ["CartPole-v1", "Pendulum-v1", "FrozenLake-v1", "Taxi-v4", "DictObs-v0", "GoodCounting-v0"]
    )
    def test_good_env_passes(self, env_id: str) -> None:
        assert check_env(env_id) is None

    def test_is_an_error_the_cli_reports_as_a_config_error(self) -> None:
        assert issubclass(EnvCheckError, ConfigError)

    def test_a_creator_is_named_by_its_qualname(self) -> None:
        def make_nan_env(ctx: Any) -> gym.Env:
            return FaultyEnv("nan_obs", ctx["at_step"])

        with pytest.raises(EnvCheckError, match=r"^env '.*make_nan_env' failed its check at step 4: observation"):
            check_env(make_nan_env, {"at_step": 4})

    def test_bad_data_past_num_steps_is_not_seen(self) -> None:
        assert check_env("LateNaN-v0", num_steps=4) is None

    def test_an_env_ending_early_is_reset_and_checked_on(self) -> None:
        # Episodes of 3 steps (TimeLimit): NaN at step 5 of an episode never happens.
        assert check_env("LateNaN-v0", max_episode_steps=3) is None

    def test_gymnasium_checker_assertions_are_refusals(self) -> None:
        class ObsOnlyReset(FaultyEnv):
            def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
                super().reset(seed=seed)
                return np.zeros(3, np.float32)  # not (obs, info)

        def make_obs_only(ctx: Any) -> gym.Env:
            return ObsOnlyReset()

        with pytest.raises(EnvCheckError, match=r"^env '.*make_obs_only' failed gymnasium's env checker: .*tuple"):
            check_env(make_obs_only)

    def test_ignored_gymnasium_warnings_are_not_printed(self, recwarn: pytest.WarningsRecorder) -> None:
        check_env("Pendulum-v1")  # gymnasium warns about its wrapped env and infinite-free bounds advice
        assert len(recwarn) == 0


class TestDescribeNonFinite:
    def test_names_the_key_and_index_in_nested_observations(self) -> None:
        obs = {"a": np.zeros(2), "b": (np.array([[0.0, 1.0], [np.inf, 0.0]]), 3)}
        assert describe_non_finite(obs, "observation") == "observation['b'][0] has inf at index [1, 0]"

    def test_finite_and_non_float_values_pass(self) -> None:
        assert describe_non_finite({"a": np.arange(3), "b": 2, "c": 0.5}, "observation") is None


class TestGroupConfig:
    def test_check_env_must_be_a_bool(self) -> None:
        with pytest.raises(ConfigError, match=r"^'check_env' must be True or False \(got 1\)$"):
            EnvRunnerGroupConfig(check_env=1)  # type: ignore[arg-type]

    def test_check_env_data_must_be_a_bool(self) -> None:
        with pytest.raises(ConfigError, match=r"^'check_env_data' must be True or False \(got 'yes'\)$"):
            EnvRunnerConfig(env="CartPole-v1", check_env_data="yes")  # type: ignore[arg-type]


class TestRuntimeCheck:
    """Bad data after the driver's check: the runner refuses it at the step it appears."""

    def test_nan_during_sampling_raises_env_error_naming_the_sub_env(self) -> None:
        runner = EnvRunner(EnvRunnerConfig(env="LateNaN-v0", num_envs_per_env_runner=2, rollout_fragment_length=10))
        with pytest.raises(
            EnvError, match=r"worker_index=0, vector_index=0 returned observation has NaN at index \[1\]"
        ):
            runner.sample()

    def test_inf_reward_during_sampling_raises_env_error(self) -> None:
        runner = EnvRunner(EnvRunnerConfig(env="InfReward-v0", rollout_fragment_length=10, columnar_sampling=False))
        with pytest.raises(EnvError, match=r"vector_index=0 returned reward inf \(observations and rewards must"):
            runner.sample()

    def test_the_refused_steps_are_dropped_and_counted_in_the_next_calls_metrics(self) -> None:
        runner = EnvRunner(EnvRunnerConfig(env="LateNaN-v0", rollout_fragment_length=10))
        with pytest.raises(EnvError):
            runner.sample()  # NaN at step 5: the five steps made are never shipped
        (episode,) = runner.sample(num_timesteps=4)  # a rebuilt env, four clean steps
        metrics = runner.get_metrics()
        assert (len(episode), metrics.num_env_steps_dropped, metrics.num_episodes_dropped_env_error) == (4, 5, 1)

    def test_check_env_data_false_lets_nan_through(self) -> None:
        runner = EnvRunner(EnvRunnerConfig(env="LateNaN-v0", rollout_fragment_length=6, check_env_data=False))
        (episode,) = runner.sample()
        assert np.isnan(episode.get_observations()[5:, 1]).all()


def _runner_actor_names() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "-env-runner-" in a["name"]}


@pytest.mark.usefixtures("ray_session")
class TestGroup:
    def test_bad_env_raises_before_any_actor_starts(self) -> None:
        before = _runner_actor_names()
        with pytest.raises(EnvCheckError, match=r"^env 'NaNObs-v0' failed its check at step 3"):
            EnvRunnerGroup(EnvRunnerConfig(env="NaNObs-v0"), EnvRunnerGroupConfig(num_env_runners=2))
        assert _runner_actor_names() == before

    def test_a_good_env_starts_named_runner_actors(self) -> None:
        # The control for the test above: a group that gets past the check does create named actors.
        before = _runner_actor_names()
        group = EnvRunnerGroup(EnvRunnerConfig(env="CartPole-v1"), EnvRunnerGroupConfig(num_env_runners=1))
        try:
            assert _runner_actor_names() - before == {f"{group.name_prefix}-env-runner-1"}
        finally:
            group.stop()

    def test_check_env_false_turns_the_check_off(self) -> None:
        group = EnvRunnerGroup(
            EnvRunnerConfig(env="NaNObs-v0"), EnvRunnerGroupConfig(num_env_runners=0, check_env=False)
        )
        assert group.num_env_runners == 0

    def test_validate_env_locally_false_skips_the_check_too(self) -> None:
        group = EnvRunnerGroup(
            EnvRunnerConfig(env="NaNObs-v0"), EnvRunnerGroupConfig(num_env_runners=0, validate_env_locally=False)
        )
        assert group.num_env_runners == 0

    def test_a_registered_name_is_named_in_the_message(self) -> None:
        from ray_sampler.sampling.env_creator import register_env, unregister_env

        register_env("my_nan_env", lambda ctx: FaultyEnv("nan_obs", 2))
        try:
            with pytest.raises(EnvCheckError, match=r"^env 'my_nan_env' failed its check at step 2"):
                EnvRunnerGroup(EnvRunnerConfig(env="my_nan_env"), EnvRunnerGroupConfig(num_env_runners=0))
        finally:
            unregister_env("my_nan_env")
