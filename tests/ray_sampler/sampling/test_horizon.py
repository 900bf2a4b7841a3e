"""soft_horizon and no_done_at_end (module ``horizon``): what the runner records at each kind of
episode end, in both engines, both batch modes and every autoreset mode, and what the learners'
GAE and n-step replay make of it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from connectors import DEFAULT_MODULE_ID, ConnectorPipelineV2
from connectors.learner import GeneralAdvantageEstimation
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.horizon import env_time_limit
from replay.buffer import EpisodeReplayBuffer
from tests.helpers import CountingEnv
from tests.ray_sampler.sampling.checks import MODES, join, stamp_config, stamps
from tests.ray_sampler.sampling.counter_module import CounterModule
from tests.ray_sampler.sampling.faults import FaultPlan, faulty_creator

ENGINES = [("truncate_episodes", True), ("truncate_episodes", False), ("complete_episodes", False)]
ENGINE_IDS = ["truncate-columnar", "truncate-per-step", "complete"]

# StampEnv's env episodes last stamp_length(v, k): sub-env 0: 2, 5, 8, 4; sub-env 1: 3, 6, 2, 5.
# With soft_horizon at 3 steps, each is recorded as episodes (env episode k, first t, last t, end):
# "cut" at the horizon (the env goes on), or the env's own "end" (its terminated; the env resets).
# An env end that falls on the horizon (sub-env 1, k=0 and k=1) is the env's end, not a cut.
SOFT_3 = {
    0: [
        (0, 0, 2, "end"),
        (1, 0, 3, "cut"),
        (1, 3, 5, "end"),
        (2, 0, 3, "cut"),
        (2, 3, 6, "cut"),
        (2, 6, 8, "end"),
        (3, 0, 3, "cut"),
        (3, 3, 4, "end"),
    ],
    1: [(0, 0, 3, "end"), (1, 0, 3, "cut"), (1, 3, 6, "end"), (2, 0, 2, "end"), (3, 0, 3, "cut"), (3, 3, 5, "end")],
}
# Without a horizon every env episode is recorded whole.
WHOLE = {0: [(0, 0, 2, "end"), (1, 0, 5, "end"), (2, 0, 8, "end")], 1: [(0, 0, 3, "end"), (1, 0, 6, "end")]}


def finished_episodes(runner: EnvRunner, num_per_sub_env: int) -> dict[int, list[SingleAgentEpisode]]:
    """Each sub-env's first ``num_per_sub_env`` finished episodes (chunks joined), in order."""
    chunks: list[SingleAgentEpisode] = []
    per_call = runner.config.rollout_fragment_length * runner.num_envs
    for _ in range(20):
        out = runner.sample()
        if runner.config.batch_mode == "truncate_episodes":
            assert sum(len(c) for c in out) == per_call  # the horizon does not change the step count
        chunks += out
        done = sorted((ep for ep in join(chunks).values() if ep.is_done), key=lambda ep: ep.id_)  # ids count up
        by_sub_env = {v: [ep for ep in done if stamps(ep)[0][1] == v] for v in range(runner.num_envs)}
        if all(len(eps) >= num_per_sub_env for eps in by_sub_env.values()):
            return {v: eps[:num_per_sub_env] for v, eps in by_sub_env.items()}
    raise AssertionError("too few finished episodes")


def assert_recorded(episodes: list[SingleAgentEpisode], v: int, expected: list[tuple], *, no_done: bool) -> None:
    """Exact observations, rewards, first infos, flags and ``t_started`` of sub-env ``v``'s episodes."""
    assert len({ep.id_ for ep in episodes}) == len(episodes)  # each recorded episode has its own id
    for ep, (k, t0, t1, end) in zip(episodes, expected, strict=True):
        assert stamps(ep) == [(0, v, k, t) for t in range(t0, t1 + 1)]
        assert np.asarray(ep.get_rewards()).tolist() == [float(t) for t in range(t0 + 1, t1 + 1)]
        # A soft cut's next episode begins with the observation and infos the cut one ended with.
        assert ep.get_infos(0) == ({"episode": k} if t0 == 0 else {"t": t0})
        assert ep.t_started == 0
        is_terminated = end == "end" and not no_done
        assert (ep.is_terminated, ep.is_truncated) == (is_terminated, not is_terminated)


class TestConfig:
    def test_soft_horizon_needs_max_episode_steps(self) -> None:
        match = (
            r"'soft_horizon' is True, which needs 'max_episode_steps' \(the horizon it cuts at\) "
            r"to be an int >= 1 \(got None\)"
        )
        with pytest.raises(ConfigError, match=match):
            EnvRunnerConfig(env="CartPole-v1", soft_horizon=True)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"soft_horizon": 1, "max_episode_steps": 5}, r"'soft_horizon' must be True or False \(got 1\)"),
            ({"no_done_at_end": "yes"}, r"'no_done_at_end' must be True or False \(got 'yes'\)"),
        ],
        ids=["soft_horizon", "no_done_at_end"],
    )
    def test_flags_must_be_bools(self, kwargs: dict[str, Any], match: str) -> None:
        with pytest.raises(ConfigError, match=match):
            EnvRunnerConfig(env="CartPole-v1", **kwargs)


class TestSoftHorizon:
    @pytest.mark.parametrize("no_done", [False, True], ids=["done", "no_done_at_end"])
    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    @pytest.mark.parametrize("mode", MODES)
    def test_cuts_at_the_horizon_and_goes_on_from_the_same_state(
        self, mode: str, batch_mode: str, columnar: bool, no_done: bool
    ) -> None:
        config = stamp_config(
            mode,
            num_envs_per_env_runner=2,
            rollout_fragment_length=4,
            episode_lookback_horizon=2,
            batch_mode=batch_mode,
            columnar_sampling=columnar,
            max_episode_steps=3,
            soft_horizon=True,
            no_done_at_end=no_done,
        )
        recorded = finished_episodes(EnvRunner(config), 6)
        for v in (0, 1):
            assert_recorded(recorded[v], v, SOFT_3[v][:6], no_done=no_done)

    def test_the_env_gets_no_time_limit_of_ours(self) -> None:
        # What env_creator (TimeLimit, or a native vector env's max_episode_steps) and the driver's env check get.
        assert env_time_limit(EnvRunnerConfig(env="CartPole-v1", max_episode_steps=7)) == 7
        assert env_time_limit(EnvRunnerConfig(env="CartPole-v1", max_episode_steps=7, soft_horizon=True)) is None

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_the_env_is_not_reset_at_a_soft_cut(self, batch_mode: str, columnar: bool) -> None:
        resets: list[int] = []
        config = EnvRunnerConfig(
            env=lambda ctx: CountResets(CountingEnv(episode_len=10**6), resets),
            rollout_fragment_length=12,
            batch_mode=batch_mode,
            columnar_sampling=columnar,
            max_episode_steps=4,
            soft_horizon=True,
        )
        out = EnvRunner(config).sample()
        assert [np.asarray(ep.get_observations()).ravel().tolist() for ep in out] == [
            [0, 1, 2, 3, 4],
            [4, 5, 6, 7, 8],
            [8, 9, 10, 11, 12],
        ]
        assert [(ep.is_truncated, ep.is_terminated, ep.t_started) for ep in out] == [(True, False, 0)] * 3
        assert len({ep.id_ for ep in out}) == 3
        assert resets == [0]  # the first reset only: the counting went on across both cuts

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_the_envs_own_time_limit_still_resets_it(self, batch_mode: str, columnar: bool) -> None:
        resets: list[int] = []
        config = EnvRunnerConfig(
            env=lambda ctx: gym.wrappers.TimeLimit(CountResets(CountingEnv(episode_len=10**6), resets), 5),
            rollout_fragment_length=10,
            batch_mode=batch_mode,
            columnar_sampling=columnar,
            max_episode_steps=3,
            soft_horizon=True,
        )
        out = EnvRunner(config).sample()
        obs = [np.asarray(ep.get_observations()).ravel().tolist() for ep in out]
        # Cut at 3 (the count goes on), then the env's own limit at 5 ends it and resets it.
        assert obs == [[0, 1, 2, 3], [3, 4, 5], [0, 1, 2, 3], [3, 4, 5]]
        assert all(ep.is_truncated and not ep.is_terminated for ep in out)
        assert resets == [0, 5, 10]

    def test_without_soft_horizon_max_episode_steps_resets_the_env(self) -> None:
        resets: list[int] = []
        config = EnvRunnerConfig(
            env=lambda ctx: CountResets(CountingEnv(episode_len=10**6), resets),
            rollout_fragment_length=9,
            max_episode_steps=3,
        )
        out = EnvRunner(config).sample()
        assert [np.asarray(ep.get_observations()).ravel().tolist() for ep in out] == [[0, 1, 2, 3]] * 3
        assert all(ep.is_truncated for ep in out)
        assert resets == [0, 3, 6, 9]

    @pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "per-step"])
    def test_a_forced_reset_restarts_the_count(self, columnar: bool) -> None:
        config = EnvRunnerConfig(
            env=lambda ctx: CountingEnv(episode_len=10**6),
            rollout_fragment_length=6,
            columnar_sampling=columnar,
            max_episode_steps=4,
            soft_horizon=True,
            episode_lookback_horizon=0,
        )
        runner = EnvRunner(config)
        first = runner.sample()  # [0..4] cut, then 2 steps of the next episode
        again = runner.sample(num_timesteps=5, force_reset=True)
        obs = [np.asarray(ep.get_observations()).ravel().tolist() for ep in first + again]
        assert obs == [[0, 1, 2, 3, 4], [4, 5, 6], [0, 1, 2, 3, 4], [4, 5]]
        assert [ep.is_truncated for ep in first + again] == [True, False, True, False]

    def test_a_rebuilt_sub_env_restarts_the_count(self) -> None:
        plan = FaultPlan(steps={(0, 5)})  # sub-env 0's 5th step raises (its env episode 1, at t=2)
        config = stamp_config(
            env=faulty_creator,
            env_config={"plan": plan},
            num_envs_per_env_runner=1,
            rollout_fragment_length=10,
            batch_mode="complete_episodes",
            restart_failed_sub_environments=True,
            max_episode_steps=3,
            soft_horizon=True,
        )
        out = EnvRunner(config).sample()
        # The rebuilt instance numbers its episodes from 100; episode 100 lasts stamp_length(0, 100) = 8.
        assert [(stamps(ep)[0][2:], stamps(ep)[-1][2:], ep.is_terminated) for ep in out] == [
            ((0, 0), (0, 2), True),
            ((100, 0), (100, 3), False),
            ((100, 3), (100, 6), False),
            ((100, 6), (100, 8), True),
        ]

    def test_metrics_count_a_soft_cut_episode_as_finished(self) -> None:
        config = stamp_config(
            num_envs_per_env_runner=1, rollout_fragment_length=19, max_episode_steps=3, soft_horizon=True
        )
        runner = EnvRunner(config)
        runner.sample()  # 19 steps: sub-env 0's eight episodes of SOFT_3
        lengths = [t1 - t0 for _, t0, t1, _ in SOFT_3[0]]
        assert runner.metrics.episode_lengths == lengths == [2, 3, 2, 3, 3, 2, 3, 1]
        assert runner.metrics.num_episodes == 8

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_a_stateful_module_starts_the_next_episode_from_its_initial_state(
        self, batch_mode: str, columnar: bool
    ) -> None:
        config = stamp_config(
            num_envs_per_env_runner=1,
            rollout_fragment_length=19,
            batch_mode=batch_mode,
            columnar_sampling=columnar,
            module_class=CounterModule,
            max_episode_steps=3,
            soft_horizon=True,
        )
        episodes = finished_episodes(EnvRunner(config), 8)[0]
        # CounterModule's state counts the steps of the running episode: it restarts at each cut.
        assert [np.asarray(ep.get_extra_model_outputs("seen")).tolist() for ep in episodes] == [
            list(range(t1 - t0)) for _, t0, t1, _ in SOFT_3[0]
        ]


class TestNoDoneAtEnd:
    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    @pytest.mark.parametrize("mode", MODES)
    def test_terminated_is_recorded_as_truncated_and_the_env_resets(
        self, mode: str, batch_mode: str, columnar: bool
    ) -> None:
        config = stamp_config(
            mode,
            num_envs_per_env_runner=2,
            rollout_fragment_length=4,
            batch_mode=batch_mode,
            columnar_sampling=columnar,
            no_done_at_end=True,
        )
        recorded = finished_episodes(EnvRunner(config), 2)
        for v in (0, 1):
            assert_recorded(recorded[v], v, WHOLE[v][:2], no_done=True)

    def test_off_keeps_terminated(self) -> None:
        recorded = finished_episodes(EnvRunner(stamp_config(num_envs_per_env_runner=2)), 2)
        for v in (0, 1):
            assert_recorded(recorded[v], v, WHOLE[v][:2], no_done=False)


class TestLearners:
    """GAE and the replay's n-step transitions bootstrap at a soft cut and at a no_done_at_end end."""

    GAMMA = 0.5

    @staticmethod
    def first_two(no_done: bool) -> list[SingleAgentEpisode]:
        """Sub-env 0's env end at t=2 (terminated, or truncated with ``no_done``), then a soft cut at t=3."""
        config = stamp_config(
            num_envs_per_env_runner=1,
            rollout_fragment_length=5,
            batch_mode="complete_episodes",
            max_episode_steps=3,
            soft_horizon=True,
            no_done_at_end=no_done,
        )
        episodes = EnvRunner(config).sample()[:2]
        assert [stamps(ep) for ep in episodes] == [
            [(0, 0, 0, t) for t in (0, 1, 2)],
            [(0, 0, 1, t) for t in (0, 1, 2, 3)],
        ]
        return episodes

    @pytest.mark.parametrize("no_done", [False, True], ids=["done", "no_done_at_end"])
    def test_gae_bootstraps_from_the_last_observation(self, no_done: bool) -> None:
        episodes = self.first_two(no_done)
        gae = GeneralAdvantageEstimation(gamma=self.GAMMA, lambda_=1.0, standardize_advantages=False)
        batch = ConnectorPipelineV2([gae])(rl_module=TimeValues(), batch={}, episodes=episodes)
        # lambda 1: the discounted rewards to the end plus gamma^k V(last obs), V([.., t]) = 1 + t / 10.
        # The env's end: rewards 1, 2; V(t=2) = 1.2 is bootstrapped only with no_done_at_end.
        ended = [1 + 0.5 * 2 + 0.25 * 1.2, 2 + 0.5 * 1.2] if no_done else [1 + 0.5 * 2, 2.0]
        # The soft cut: rewards 1, 2, 3, always bootstrapped from V(t=3) = 1.3.
        cut = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 1.3, 2 + 0.5 * 3 + 0.25 * 1.3, 3 + 0.5 * 1.3]
        assert batch[DEFAULT_MODULE_ID]["value_targets"].tolist() == pytest.approx(ended + cut)

    @pytest.mark.parametrize("no_done", [False, True], ids=["done", "no_done_at_end"])
    def test_n_step_transitions_are_truncated_not_terminated(self, no_done: bool) -> None:
        buffer = EpisodeReplayBuffer(capacity_env_steps=100, seed=0)
        buffer.add(self.first_two(no_done))
        batch = buffer.sample(200, n_step=3, gamma=self.GAMMA)
        rows = zip(
            batch["obs"][:, 2:].tolist(),
            batch["rewards"].tolist(),
            batch["next_obs"][:, 3].tolist(),
            batch["n_step"].tolist(),
            batch["terminateds"].tolist(),
            batch["truncateds"].tolist(),
        )
        ended = (not no_done, no_done)  # (terminateds, truncateds) at the env's end
        # learner/dqn.py bootstraps with gamma ** n_step * (1 - terminateds) * Q(next_obs).
        assert sorted({(tuple(o), r, n_t, n, te, tr) for o, r, n_t, n, te, tr in rows}) == [
            ((0, 0), 1 + 0.5 * 2, 2, 2, *ended),
            ((0, 1), 2.0, 2, 1, *ended),
            ((1, 0), 1 + 0.5 * 2 + 0.25 * 3, 3, 3, False, True),
            ((1, 1), 2 + 0.5 * 3, 3, 2, False, True),
            ((1, 2), 3.0, 3, 1, False, True),
        ]


class CountResets(gym.Wrapper):
    """Appends the env's step count to ``log`` at each reset (so a test sees where resets happened)."""

    def __init__(self, env: gym.Env, log: list[int]) -> None:
        super().__init__(env)
        self.log, self.num_steps = log, 0

    def reset(self, **kwargs: Any) -> Any:
        self.log.append(self.num_steps)
        return super().reset(**kwargs)

    def step(self, action: Any) -> Any:
        self.num_steps += 1
        return super().step(action)


class TimeValues:
    """A value module: V of a StampEnv observation [w, v, e, t] is 1 + t / 10."""

    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        return 1 + np.asarray(obs, np.float64)[:, 3] / 10
