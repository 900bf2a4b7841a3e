"""Multi-agent envs in an EnvRunnerGroup: detected, checked on the driver, sampled by remote runners,
scaled up and down, a runner killed: every shipped chunk continues its episode, nothing twice, each
agent's data its own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import ray

from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar
from ray_sampler.data.multi_agent_episode import SKIP_ENV_TS, MultiAgentEpisode
from ray_sampler.errors import ConfigError, EnvCreatorError, EnvRunnerFailedError, MultiAgentEnvError
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentRunnerMetrics
from replay.multi_agent_actor import create_multi_agent_replay_actor
from tests.ray_sampler.ma_envs import RandomScheduleEnv

pytestmark = pytest.mark.usefixtures("ray_session")

MAPPING = MultiAgentConfig(
    policies=("low", "high"), policy_mapping_fn=lambda aid, episode, **kw: "low" if aid in ("a0", "a1") else "high"
)


def schedule_group(num_env_runners: int = 2, *, keep_sampling: bool = False, **kwargs: Any) -> EnvRunnerGroup:
    config = EnvRunnerConfig(
        env=RandomScheduleEnv, env_config={"num_agents": 4, "max_steps": 20}, module_class=RandomModule,
        num_envs_per_env_runner=2, rollout_fragment_length=6, multi_agent=MAPPING, **kwargs,
    )  # fmt: skip
    group_config = EnvRunnerGroupConfig(
        num_env_runners=num_env_runners, num_cpus_per_env_runner=0.5, sample_timeout_s=60, keep_sampling=keep_sampling
    )
    return EnvRunnerGroup(config, group_config)


def check_chunks(chunks: list[MultiAgentEpisode]) -> dict[str, MultiAgentEpisode]:
    """Joins the chunks per episode id (concat_episode refuses a gap, an overlap or a foreign chunk)
    and checks each agent's data against what RandomScheduleEnv emits: an agent's observation is
    [the env step it came at, the agent's index], and each agent is on its mapped module."""
    seen: set[tuple[str, int]] = set()
    whole: dict[str, MultiAgentEpisode] = {}
    for c in chunks:
        assert (c.id_, c.env_t_started) not in seen, "a chunk came twice"
        seen.add((c.id_, c.env_t_started))
        if c.id_ in whole:
            whole[c.id_].concat_episode(c)
        else:
            assert c.env_t_started == 0, "an episode's first chunk is missing"
            whole[c.id_] = MultiAgentEpisode.from_state(c.get_state())
    for ep in whole.values():
        ep.validate()
        for aid, sa in ep.agent_episodes.items():
            assert ep.module_for(aid) == ("low" if aid in ("a0", "a1") else "high")
            env_steps = [t for t, j in enumerate(ep.env_t_to_agent_t[aid].tolist()) if j != SKIP_ENV_TS]
            obs = np.asarray(sa.get_observations())
            came_at = obs[:, 0].tolist()
            if sa.is_terminated and len(obs) > 1 and came_at[-1] == came_at[-2]:
                came_at[-1] = env_steps[-1]  # terminated without a last observation: its previous one repeats
            assert came_at == env_steps and set(obs[:, 1].tolist()) == {int(aid[1:])}
    return whole


def test_group_detects_the_env_and_samples_every_runner() -> None:
    config = EnvRunnerConfig(env=RandomScheduleEnv, module_class=RandomModule, num_envs_per_env_runner=2)
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)) as group:
        assert group.config.multi_agent == MultiAgentConfig()
        answers = group.sample_columnar()
        assert len(answers) == 2
        for col, metrics in answers:
            assert isinstance(col, MultiAgentColumnar) and isinstance(metrics, MultiAgentRunnerMetrics)
            assert col.num_env_steps == metrics.num_env_steps == 2 * 200
        assert group.metrics.num_env_steps == 800


def test_scaling_and_a_killed_runner_lose_no_shipped_step_and_repeat_none() -> None:
    with schedule_group(2) as group:
        chunks: list[MultiAgentEpisode] = []
        steps = 0
        for i in range(12):
            if i == 3:
                group.scale(3)
            if i == 6:
                ray.kill(group.actor(2))  # a runner dies: replaced under the same index
            if i == 9:
                group.scale(1)  # the stopped runners' unshipped steps come with the next call
            out = group.sample()
            assert sum(len(c) for c in out) == group.metrics.num_env_steps
            steps += group.metrics.num_env_steps
            chunks += out
        assert group.metrics.num_env_runner_restarts == 1
        whole = check_chunks(chunks)
        assert sum(len(ep) for ep in whole.values()) == steps
        assert sum(ep.is_done for ep in whole.values()) >= 10


def test_keep_sampling_ships_every_step_once() -> None:
    with schedule_group(2, keep_sampling=True) as group:
        chunks = [c for _ in range(5) for c in group.sample()]
        chunks += [c for col, _ in group.collect_in_flight() if col is not None for c in _unpack(col)]
        check_chunks(chunks)


def _unpack(col: Any) -> list[MultiAgentEpisode]:
    from ray_sampler.data.multi_agent_columnar import unpack_columnar

    return unpack_columnar(col)


def test_complete_mode_scale_down_drops_running_episodes_and_counts_them() -> None:
    with schedule_group(2, batch_mode="complete_episodes") as group:
        chunks = group.sample()
        group.scale(1)
        chunks += group.sample()
        assert all(c.is_done and c.env_t_started == 0 for c in chunks)
        assert group.metrics.num_episodes_dropped_by_scale >= 1
        check_chunks(chunks)


def test_contract_breach_is_found_on_the_driver_before_any_runner_starts() -> None:
    class NoAll(RandomScheduleEnv):
        def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
            out = super().step(action_dict)
            del out[3]["__all__"]
            return out

    with pytest.raises(MultiAgentEnvError, match=r"truncateds at env step 1 must be a dict with the key") as e:
        EnvRunnerGroup(EnvRunnerConfig(env=NoAll), EnvRunnerGroupConfig(num_env_runners=1))
    assert isinstance(e.value, ConfigError)  # bad input, found before any runner starts: the CLI's exit 2


class LateBreach(RandomScheduleEnv):
    """Breaks the contract (no ``"__all__"``) at env step 15, after the driver's probe steps."""

    def step(self, action_dict: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        out = super().step(action_dict)
        if self.t == 15:
            del out[3]["__all__"]
        return out


def test_a_contract_breach_in_a_runner_fails_the_call_at_once_without_restarts() -> None:
    config = EnvRunnerConfig(
        env=LateBreach, env_config={"num_agents": 2, "max_steps": 40, "p_end": 0.0, "p_leave": 0.0},
        module_class=RandomModule, rollout_fragment_length=5, check_env_first_steps=3,
    )  # fmt: skip
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)) as group:
        with pytest.raises(EnvRunnerFailedError, match=r"must be a dict with the key '__all__'.*broke the multi-agent"):
            for _ in range(8):  # env step 15 comes in the third or fourth call
                group.sample()
        assert group.metrics.num_env_runner_restarts == 0


def test_runners_add_to_a_multi_agent_replay_and_hold_chunks_while_it_is_dead() -> None:
    with schedule_group(2) as group:
        replay = create_multi_agent_replay_actor(seed=0)
        delivered = 0
        for _ in range(3):
            for m in group.sample_to_replay(replay):
                assert m.replay.num_env_steps == m.num_env_steps  # stored: delivered
                delivered += m.num_env_steps
        assert ray.get(replay.get_counts.remote())["num_env_steps"] == delivered == 3 * 2 * 12
        ray.kill(replay)  # the replay dies: the runners hold what it did not take
        answers = group.sample_to_replay(replay)
        held = sum(m.num_env_steps_held_for_replay for m in answers)
        assert held == 2 * 12 and all(m.replay is None for m in answers)
        fresh = create_multi_agent_replay_actor(seed=1)
        answers = group.sample_to_replay(fresh)  # the held chunks go first, then this call's
        assert sum(m.num_env_steps_held_for_replay for m in answers) == 0
        assert ray.get(fresh.get_counts.remote())["num_env_steps"] == held + 2 * 12


def test_single_agent_runner_refuses_a_multi_agent_env() -> None:
    with pytest.raises(
        EnvCreatorError, match=r"returned a multi-agent env \(RandomScheduleEnv\): sample it with MultiAgentEnvRunner"
    ):
        EnvRunner(EnvRunnerConfig(env=RandomScheduleEnv))


def runner_attr(group: EnvRunnerGroup, index: int, name: str) -> Any:
    return ray.get(group.actor(index).__ray_call__.remote(lambda r: getattr(r, name)))


def weights_of(group: EnvRunnerGroup, index: int) -> dict[str, dict[str, np.ndarray]]:
    return ray.get(group.actor(index).__ray_call__.remote(lambda r: r.get_weights()))


class TestModulesPerRunner:
    def mlp_group(self) -> EnvRunnerGroup:
        spare = MultiAgentConfig(policies=("low", "high", "spare"), policy_mapping_fn=MAPPING.policy_mapping_fn)
        config = EnvRunnerConfig(
            env=RandomScheduleEnv, env_config={"num_agents": 4, "max_steps": 20}, seed=5,
            num_envs_per_env_runner=2, rollout_fragment_length=6, multi_agent=spare,
        )  # fmt: skip
        return EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5))

    def test_a_runner_fetches_only_the_modules_its_agents_use(self) -> None:
        with self.mlp_group() as group:
            sent = {mid: {k: v + 1.0 for k, v in w.items()} for mid, w in weights_of(group, 1).items()}
            group.sync_weights(sent)
            group.sample()
            for i in group.worker_indices:
                assert runner_attr(group, i, "num_weight_loads") == {"low": 1, "high": 1}  # never "spare"
            group.sync_weights({"high": sent["high"]})  # one module changed: only it goes out again
            group.sample()
            assert runner_attr(group, 1, "num_weight_loads") == {"low": 1, "high": 2}
            got = weights_of(group, 2)  # asking for the weights loads them all: what was sent, exactly
            assert all(np.array_equal(got[mid][k], sent[mid][k]) for mid in sent for k in sent[mid])

    def test_add_module_reaches_every_runner_and_replacements(self) -> None:
        with self.mlp_group() as group:
            copy = {k: v * 0.5 for k, v in weights_of(group, 1)["high"].items()}
            group.add_module("high_v1", copy, policy_mapping_fn=lambda aid, ep, **kw: "high_v1" if aid == "a3" else (
                "low" if aid in ("a0", "a1") else "high"))  # fmt: skip
            assert group.config.multi_agent.module_ids == ("low", "high", "spare", "high_v1")
            assert group.config.multi_agent.policies_to_train == ("low", "high", "spare")  # a frozen copy
            ray.kill(group.actor(2))  # its replacement must start with the new module and mapping
            modules_of_a3: set[str] = set()
            for _ in range(6):  # episodes of 20 steps: those started after add_module map a3 to the copy
                for ep in group.sample():
                    if "a3" in ep.agent_episodes:
                        modules_of_a3.add(ep.module_for("a3"))
            assert "high_v1" in modules_of_a3
            assert group.metrics.num_env_runner_restarts == 1
            for i in group.worker_indices:
                got = weights_of(group, i)["high_v1"]
                assert all(np.array_equal(got[k], copy[k]) for k in copy)
            group.remove_module("spare")
            assert all(set(weights_of(group, i)) == {"low", "high", "high_v1"} for i in group.worker_indices)

    def test_module_changes_are_checked(self) -> None:
        with self.mlp_group() as group:
            with pytest.raises(ConfigError, match=r"weights for unknown modules \['nope'\]"):
                group.sync_weights({"nope": {}})
            with pytest.raises(ConfigError, match="add_module: module id 'low' is taken"):
                group.add_module("low", {})
            with pytest.raises(ConfigError, match="remove_module: no module 'nope'"):
                group.remove_module("nope")


def test_mean_std_moments_merge_module_by_module_across_runners() -> None:
    from connectors.common import MeanStdFilter

    config = EnvRunnerConfig(
        env=RandomScheduleEnv, env_config={"num_agents": 4, "max_steps": 20}, module_class=RandomModule,
        num_envs_per_env_runner=2, rollout_fragment_length=6, multi_agent=MAPPING,
        env_to_module_connectors=(MeanStdFilter(),),
    )  # fmt: skip
    with EnvRunnerGroup(config, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)) as group:
        group.sample()
        local = {i: ray.get(group.actor(i).get_state.remote())["env_to_module"] for i in group.worker_indices}
        merged = group.sync_connector_states()
        for mid in ("low", "high"):
            counts = [local[i][mid]["MeanStdFilter"]["local"]["count"] for i in group.worker_indices]
            assert merged[mid]["MeanStdFilter"]["global"]["count"] == sum(counts) > 0
        # Every runner now normalizes with the merged moments, module by module.
        after = ray.get(group.actor(1).get_state.remote())["env_to_module"]
        assert after["high"]["MeanStdFilter"]["global"]["count"] == merged["high"]["MeanStdFilter"]["global"]["count"]
        assert after["low"]["MeanStdFilter"]["local"]["count"] == 0
