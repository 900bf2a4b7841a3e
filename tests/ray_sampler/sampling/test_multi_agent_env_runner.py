"""MultiAgentEnvRunner: batch modes and step counting, nothing lost or duplicated over random agent
schedules, one forward pass per module, module mapping, metrics, sub-env failures, bad input."""

from __future__ import annotations

from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columns import Columns
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError, EnvCreatorError, EnvError, MultiAgentEnvError
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.multi_agent_config import ModuleSpec, MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from tests.ray_sampler.ma_envs import RandomScheduleEnv, RecordingEnv, TurnTakingEnv, canonical


def recording_schedule(cfg: dict[str, Any]) -> RecordingEnv:
    return RecordingEnv(RandomScheduleEnv({"num_agents": 4, "max_steps": 25, **cfg}))


def runner(env: Any = recording_schedule, **kwargs: Any) -> MultiAgentEnvRunner:
    kwargs.setdefault("module_class", RandomModule)
    return MultiAgentEnvRunner(EnvRunnerConfig(env=env, **kwargs))


def joined(chunks: list[MultiAgentEpisode]) -> dict[str, MultiAgentEpisode]:
    """The chunks of each episode id concatenated in the order they came."""
    out: dict[str, MultiAgentEpisode] = {}
    for c in chunks:
        c.validate()
        if c.id_ in out:
            out[c.id_].concat_episode(c)
        else:
            out[c.id_] = MultiAgentEpisode.from_state(c.get_state())
    return out


def recorded(r: MultiAgentEnvRunner) -> list[MultiAgentEpisode]:
    return [ep for env in r.envs for ep in env.episodes]


class TestNothingLostOrDuplicated:
    @pytest.mark.parametrize("count_steps_by", ["env_steps", "agent_steps"])
    @pytest.mark.parametrize("lookback", [0, 3])
    def test_truncate_chunks_join_into_the_episodes_the_envs_played(self, count_steps_by: str, lookback: int) -> None:
        r = runner(
            num_envs_per_env_runner=3, rollout_fragment_length=7, count_steps_by=count_steps_by,
            episode_lookback_horizon=lookback,
        )  # fmt: skip
        chunks: list[MultiAgentEpisode] = []
        for _ in range(30):
            got = r.sample()
            m = r.get_metrics()
            if count_steps_by == "env_steps":
                assert sum(len(c) for c in got) == m.num_env_steps == 21
            else:
                assert 21 <= sum(c.agent_steps() for c in got) == m.num_agent_steps < 21 + 3 * 4
            chunks += got
        whole = joined(chunks)
        played = recorded(r)
        finished = [ep for ep in whole.values() if ep.is_done]
        assert len(finished) >= 20
        assert Counter(map(canonical, finished)) == Counter(canonical(ep) for ep in played if ep.is_done)
        # Episodes still running: what was shipped is the start of what the env played.
        running = sorted((ep for ep in whole.values() if not ep.is_done), key=lambda e: e.env_t)
        assert {ep.env_t for ep in running} == {ep.env_t for ep in played if not ep.is_done}
        assert sum(len(ep) for ep in whole.values()) == sum(len(ep) for ep in played)

    def test_complete_mode_returns_finished_episodes_and_keeps_running_ones(self) -> None:
        r = runner(num_envs_per_env_runner=2, rollout_fragment_length=10, batch_mode="complete_episodes")
        got: list[MultiAgentEpisode] = []
        for _ in range(10):
            eps = r.sample()
            assert eps and all(ep.is_done and ep.env_t_started == 0 for ep in eps)
            assert sum(len(ep) for ep in eps) >= 20
            got += eps
        played = [ep for ep in recorded(r) if ep.is_done]
        assert Counter(map(canonical, got)) == Counter(map(canonical, played))

    def test_num_episodes_returns_exactly_that_many_and_keeps_the_rest(self) -> None:
        r = runner(num_envs_per_env_runner=4)
        first, second = r.sample(num_episodes=3), r.sample(num_episodes=5)
        assert (len(first), len(second)) == (3, 5)
        ids = [ep.id_ for ep in first + second]
        assert len(set(ids)) == 8 and all(ep.is_done for ep in first + second)


class TestModules:
    def test_one_forward_pass_per_module_over_all_sub_envs_and_agents(self) -> None:
        calls: list[int] = []

        class Counting(RandomModule):
            def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
                calls.append(len(batch[Columns.OBS]))
                return super().forward_exploration(batch)

        env = make_multi_agent("CartPole-v1", num_agents=3)
        r = runner(env, module_class=Counting, num_envs_per_env_runner=4, rollout_fragment_length=5)
        r.sample()
        assert len(calls) == 5 and calls[0] == 12  # 5 vector steps; 4 sub-envs x 3 agents at the first

    def test_mapping_is_decided_once_per_agent_and_episode(self) -> None:
        rng = np.random.default_rng(0)
        mapping = MultiAgentConfig(
            policies={"left": None, "right": None},
            policy_mapping_fn=lambda aid, episode, **kw: ["left", "right"][int(rng.integers(2))],
        )
        r = runner(num_envs_per_env_runner=2, rollout_fragment_length=5, multi_agent=mapping)
        by_id: dict[str, dict] = {}
        for _ in range(20):
            for c in r.sample():
                seen = by_id.setdefault(c.id_, {})
                for aid, mid in c.agent_to_module_mapping.items():
                    assert seen.setdefault(aid, mid) == mid  # the same module in every chunk
        assert {mid for m in by_id.values() for mid in m.values()} == {"left", "right"}

    def test_metrics_per_agent_and_per_module(self) -> None:
        env = make_multi_agent("CartPole-v1", num_agents=3)
        mapping = MultiAgentConfig(
            policies=("shared", "solo"), policy_mapping_fn=lambda aid, episode, **kw: "solo" if aid == 2 else "shared"
        )
        r = runner(env, num_envs_per_env_runner=2, rollout_fragment_length=40, multi_agent=mapping)
        chunks: list[MultiAgentEpisode] = []
        agent_returns: dict[int, list[float]] = {}
        module_returns: dict[str, list[float]] = {}
        for _ in range(5):
            chunks += r.sample()
            m = r.get_metrics()
            for aid, values in m.agent_episode_returns.items():
                agent_returns.setdefault(aid, []).extend(values)
            for mid, values in m.module_episode_returns.items():
                module_returns.setdefault(mid, []).extend(values)
            assert sum(m.num_module_steps.values()) == m.num_agent_steps
        done = [ep for ep in joined(chunks).values() if ep.is_done]
        want_agents = {aid: sorted(ep.agent_episodes[aid].get_return() for ep in done) for aid in (0, 1, 2)}
        assert {aid: sorted(v) for aid, v in agent_returns.items()} == want_agents
        shared = sorted(ep.agent_episodes[0].get_return() + ep.agent_episodes[1].get_return() for ep in done)
        assert sorted(module_returns["shared"]) == shared  # a module's return sums all its agents

    def test_module_spaces_come_from_the_agents_or_the_spec(self) -> None:
        r = runner(TurnTakingEnv, module_class=None)
        assert r.policies["default_policy"].observation_space == gym.spaces.Box(0, 1000, (1,), np.float32)
        spec = ModuleSpec(observation_space=gym.spaces.Box(0, 1000, (1,), np.float32), module_class=RandomModule)
        r = runner(TurnTakingEnv, multi_agent=MultiAgentConfig(policies={"p": spec}))
        assert isinstance(r.modules["p"], RandomModule)

    def test_weights_round_trip_by_module(self) -> None:
        env = make_multi_agent("CartPole-v1", num_agents=2)
        mapping = MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
        r = runner(env, module_class=None, multi_agent=mapping)
        w = r.get_weights()
        w["p1"] = {k: v + 1.0 for k, v in w["p1"].items()}
        r.set_weights(w, version=7)
        assert all(np.array_equal(r.get_weights()["p1"][k], v) for k, v in w["p1"].items())
        assert r.sample() and r.get_metrics().weights_version == 7


class TestPettingZoo:
    @pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
    @pytest.mark.parametrize("name", ["tictactoe", "rps", "simple_spread"])
    def test_samples_in_both_modes(self, name: str, batch_mode: str) -> None:
        from mpe2 import simple_spread_v3
        from pettingzoo.classic import rps_v2, tictactoe_v3

        make = {
            "tictactoe": tictactoe_v3.env,
            "rps": rps_v2.parallel_env,
            "simple_spread": simple_spread_v3.parallel_env,
        }
        r = runner(
            lambda cfg: make[name](), num_envs_per_env_runner=2, rollout_fragment_length=30, batch_mode=batch_mode
        )
        chunks = [c for _ in range(4) for c in r.sample()]
        whole = joined(chunks)
        assert any(ep.is_done for ep in whole.values())
        for ep in whole.values():
            ep.validate()
            assert not (ep.is_terminated and ep.is_truncated)
        if name == "simple_spread":
            assert all(ep.is_truncated and len(ep) == 25 for ep in whole.values() if ep.is_done)


class FailingEnv(RandomScheduleEnv):
    """Raises at its 5th step while ``failures_left`` (shared by every instance) lasts."""

    failures_left = 0

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        if self.t == 4 and FailingEnv.failures_left > 0:
            FailingEnv.failures_left -= 1
            raise RuntimeError("boom")
        return super().step(action_dict)


class TestFailures:
    def test_a_failed_sub_env_is_rebuilt_and_its_episode_dropped_and_counted(self) -> None:
        FailingEnv.failures_left = 2
        r = runner(lambda cfg: FailingEnv({"p_end": 0, "p_leave": 0}), rollout_fragment_length=10,
                   restart_failed_sub_environments=True)  # fmt: skip
        got = r.sample()
        m = r.get_metrics()
        assert (m.num_sub_env_restarts, m.num_episodes_dropped_env_error) == (2, 2)
        assert m.num_env_steps_dropped == 8  # 4 steps each, never shipped
        assert sum(len(c) for c in got) == m.num_env_steps == 10  # the call still returns what it was asked
        assert [(c.env_t_started, len(c)) for c in got] == [(0, 10)]  # the third env's episode

    def test_a_sub_env_that_keeps_failing_raises_rather_than_loop(self) -> None:
        FailingEnv.failures_left = 10**6
        r = runner(lambda cfg: FailingEnv({"p_end": 0, "p_leave": 0}), rollout_fragment_length=10,
                   restart_failed_sub_environments=True)  # fmt: skip
        with pytest.raises(
            EnvError, match=r"sub-envs failed 100 times in one sample\(\) call; the last: vector_index=0"
        ):
            r.sample()
        FailingEnv.failures_left = 0

    def test_without_restarts_env_error_then_a_fresh_start(self) -> None:
        FailingEnv.failures_left = 2
        r = runner(FailingEnv, rollout_fragment_length=10)
        with pytest.raises(EnvError, match=r"sub-env worker_index=0, vector_index=0 failed: RuntimeError: boom"):
            r.sample()
        with pytest.raises(EnvError):
            r.sample()  # a fresh start: the env fails again at its 5th step
        got = r.sample()  # then works, from a reset
        assert got[0].env_t_started == 0 and r.get_metrics().num_episodes_dropped_env_error == 1
        assert r.get_metrics().num_env_steps_dropped == 4

    def test_contract_breach_names_the_sub_env_and_is_not_restarted(self) -> None:
        class NoAll(RandomScheduleEnv):
            def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
                obs, rew, term, trunc, infos = super().step(action_dict)
                del term["__all__"]
                return obs, rew, term, trunc, infos

        r = runner(NoAll, restart_failed_sub_environments=True)
        with pytest.raises(MultiAgentEnvError, match=r"vector_index=0: the env's terminateds at env step 1 must be"):
            r.sample()


class TestBadInput:
    def test_mapping_to_an_unknown_module(self) -> None:
        bad = MultiAgentConfig(policies=("a", "b"), policy_mapping_fn=lambda aid, episode, **kw: "c")
        with pytest.raises(ConfigError, match=r"mapped agent 'a0' to 'c', which is not in 'policies' \['a', 'b'\]"):
            runner(multi_agent=bad)

    def test_agents_of_one_module_with_different_spaces(self) -> None:
        class Mixed(TurnTakingEnv):
            def __init__(self, config: Any = None) -> None:
                super().__init__(config)
                self.action_spaces = {"p0": gym.spaces.Discrete(2), "p1": gym.spaces.Discrete(3)}

        one = MultiAgentConfig(policies=("one",), policy_mapping_fn=lambda aid, episode, **kw: "one")
        with pytest.raises(ConfigError, match=r"module 'one' acts for agents \['p0', 'p1'\] whose action"):
            runner(Mixed, multi_agent=one)
        assert runner(Mixed).module_ids == ("p0", "p1")  # the default: a module per pair of spaces

    def test_a_single_agent_env(self) -> None:
        with pytest.raises(EnvCreatorError, match="must return a MultiAgentEnv or a PettingZoo env"):
            runner("CartPole-v1")

    def test_several_modules_need_a_mapping(self) -> None:
        with pytest.raises(ConfigError, match="'policy_mapping_fn' must be given with several modules"):
            MultiAgentConfig(policies=("a", "b"))

    def test_both_counts(self) -> None:
        with pytest.raises(ConfigError, match="'num_timesteps' or 'num_episodes', not both"):
            runner().sample(num_timesteps=5, num_episodes=1)


class TestMeanStdFilter:
    def test_each_module_keeps_the_moments_of_its_own_agents(self) -> None:
        """RandomScheduleEnv observes [env step, agent index]: the even agents' module sees indices 0
        and 2, the odd agents' 1 and 3, so their filters learn different means."""
        from connectors.common import MeanStdFilter

        mapping = MultiAgentConfig(
            policies=("even", "odd"), policy_mapping_fn=lambda aid, episode, **kw: ("even", "odd")[int(aid[1:]) % 2]
        )
        r = runner(
            num_envs_per_env_runner=2, rollout_fragment_length=20, multi_agent=mapping,
            env_to_module_connectors=(MeanStdFilter(),),
        )  # fmt: skip
        chunks = r.sample()
        state = r.get_state()["env_to_module"]
        moments = {mid: state[mid]["MeanStdFilter"]["local"] for mid in ("even", "odd")}
        # Every observation a module's agents acted on was counted once, by that module alone: the
        # actions in the chunks and those still waiting for their next observation.
        acted: Counter[str] = Counter()
        for ep in chunks:
            for aid, sa in ep.agent_episodes.items():
                acted[ep.module_for(aid)] += len(sa) + has_hanging_action(ep, aid)
        assert {mid: moments[mid]["count"] for mid in moments} == {mid: acted[mid] for mid in moments}
        assert 0 <= moments["even"]["mean"][1] <= 2 and 1 <= moments["odd"]["mean"][1] <= 3
        assert moments["odd"]["mean"][1] - moments["even"]["mean"][1] == pytest.approx(1.0, abs=0.6)


def has_hanging_action(ep: MultiAgentEpisode, agent_id: Any) -> bool:
    try:
        ep.get_hanging_action(agent_id)
    except KeyError:
        return False
    return True
