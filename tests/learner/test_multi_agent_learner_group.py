"""MultiAgentLearnerGroup: a learner per trained module on its agents' chunks; differential checks
against the single-agent path (one agent equals the single-agent run batch for batch; per-module
GAE equals each agent's own GAE; a time limit bootstraps and a terminal does not); states."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from connectors.env_to_module import FrameStackingEnvToModule, PrevActionsPrevRewardsEnvToModule
from connectors.learner import AgentToModuleMapping
from learner.frameworks import ppo_learner_class
from learner.learner import Learner, PPOConfig
from learner.multi_agent_learner_group import MultiAgentLearnerGroup, metrics_by_module
from learner.train import view_pieces
from ray_sampler.data.columns import Columns
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError, InsufficientResourcesError
from ray_sampler.modules import MLPModule, MultiRLModule
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner, build_multi_rl_module
from tests.helpers import idle_cpus
from tests.ray_sampler.ma_envs import RandomScheduleEnv

TOL = 1e-6  # floats that went through a module's matrix products: compared with this relative tolerance
NO_STD = PPOConfig(standardize_advantages=False)


def schedule_runner(**kwargs: Any) -> MultiAgentEnvRunner:
    """Four agents joining, hanging and leaving at random, two modules (even and odd agents)."""
    ma = MultiAgentConfig(
        policies=("even", "odd"), policy_mapping_fn=lambda aid, ep, **kw: ("even", "odd")[int(aid[1:]) % 2]
    )
    cfg = EnvRunnerConfig(
        env=lambda ctx: RandomScheduleEnv({"num_agents": 4, "max_steps": 25, "seed": 7}),
        num_envs_per_env_runner=3, rollout_fragment_length=9, seed=1, multi_agent=ma, **kwargs,
    )  # fmt: skip
    return MultiAgentEnvRunner(cfg)


def gae_rows(learner: Learner, chunks: list[Any]) -> dict[str, np.ndarray]:
    batch = learner.build_batch(chunks)
    return {k: batch[k] for k in (Columns.OBS, Columns.ACTIONS, Columns.ADVANTAGES, Columns.VALUE_TARGETS)}


class TestPerModuleGAE:
    def test_a_modules_batch_is_each_of_its_agents_own_gae_joined(self) -> None:
        r = schedule_runner()
        chunks = r.sample() + r.sample()
        by_module = AgentToModuleMapping()(rl_module=None, batch={}, episodes=chunks)
        assert set(by_module) == {"even", "odd"}
        for mid, agent_chunks in by_module.items():
            learner = Learner(r.modules[mid], NO_STD)
            together = gae_rows(learner, agent_chunks)
            alone = [gae_rows(learner, [c]) for c in agent_chunks]
            for key, value in together.items():
                np.testing.assert_allclose(value, np.concatenate([a[key] for a in alone]), rtol=TOL, atol=TOL)
            # Every agent step of the module's agents is a row, once.
            assert len(together[Columns.ACTIONS]) == sum(len(c) for c in agent_chunks)

    def test_chunks_hold_only_the_agents_mapped_to_the_module(self) -> None:
        r = schedule_runner()
        chunks = r.sample()
        for mid, agent_chunks in AgentToModuleMapping()(rl_module=None, batch={}, episodes=chunks).items():
            agents = {c.id_.rsplit("/", 1)[1] for c in agent_chunks}
            assert agents and all(int(a[1:]) % 2 == ("even", "odd").index(mid) for a in agents)


class ConstantValue(MLPModule):
    """An MLP whose value is 10 everywhere: the bootstrap a value target adds is visible exactly."""

    def compute_values(self, obs: Any) -> np.ndarray:
        return np.full(len(obs), 10.0, dtype=np.float32)


def two_agent_episode(*, truncated: bool) -> MultiAgentEpisode:
    """Agents a and b act 3 env steps with reward 1 each; then a time limit (truncated) or a terminal."""
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    ep = MultiAgentEpisode(
        observation_space={"a": box, "b": box},
        action_space={"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)},
        agent_to_module_mapping_fn=lambda aid, episode: "shared",
    )
    obs = {"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)}
    ep.add_env_reset(observations=obs)
    for t in range(3):
        last = t == 2
        ep.add_env_step(
            obs, {"a": 0, "b": 1}, {"a": 1.0, "b": 1.0},
            terminateds={"__all__": last and not truncated}, truncateds={"__all__": last and truncated},
            extra_model_outputs={aid: {Columns.ACTION_LOGP: np.float32(-0.69)} for aid in obs},
        )  # fmt: skip
    return ep


@pytest.mark.parametrize("truncated", [True, False])
def test_a_time_limit_bootstraps_and_a_terminal_does_not(truncated: bool) -> None:
    ep = two_agent_episode(truncated=truncated)
    assert all(sa.is_truncated == truncated and sa.is_terminated != truncated for sa in ep.agent_episodes.values())
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    learner = Learner(
        ConstantValue(box, gym.spaces.Discrete(2)), PPOConfig(gamma=0.5, lambda_=1.0, standardize_advantages=False)
    )
    rows = gae_rows(learner, AgentToModuleMapping()(rl_module=None, batch={}, episodes=[ep])["shared"])
    tail = 0.5 * 10.0 if truncated else 0.0  # the value after the last step: bootstrapped, or 0 at a terminal
    per_agent = [1 + 0.5 * (1 + 0.5 * (1 + tail)), 1 + 0.5 * (1 + tail), 1 + tail]
    np.testing.assert_allclose(rows[Columns.VALUE_TARGETS], per_agent * 2, rtol=TOL)


def _frames() -> dict[str, Any]:
    return {"env_to_module_connectors": (FrameStackingEnvToModule(num_frames=3),)}


def _previous() -> dict[str, Any]:
    return {"env_to_module_connectors": (PrevActionsPrevRewardsEnvToModule(n_prev_actions=2, n_prev_rewards=1),)}


def _lstm() -> dict[str, Any]:
    from ray_sampler.modules.torch_lstm import TorchLSTMModule

    return {"module_class": TorchLSTMModule, "module_config": {"seed": 5, "lstm_cell_size": 8}}


@pytest.mark.parametrize("extra", [dict, _frames, _previous, _lstm], ids=["plain", "frames", "previous", "lstm"])
def test_one_agent_equals_the_single_agent_path_batch_for_batch(extra: Any) -> None:
    """CartPole through the single-agent runner, and as a one-agent multi-agent env through the
    multi-agent runner and learner group: the same episodes, and the same train batch, with a frame
    stack, previous actions and rewards, or a recurrent module (sequences and their state_in) too."""
    common = {"num_envs_per_env_runner": 2, "rollout_fragment_length": 64, "seed": 3, **extra()}
    single = EnvRunner(EnvRunnerConfig(env="CartPole-v1", **common))
    multi = MultiAgentEnvRunner(EnvRunnerConfig(env=make_multi_agent("CartPole-v1", 1), **common))
    weights = single.module.get_state()
    multi.set_weights({"default_policy": weights})
    modules = build_multi_rl_module(multi.config)
    modules["default_policy"].set_state(weights)
    stateful = is_stateful(single.module)
    config = PPOConfig(standardize_advantages=False, max_seq_len=16)
    views = view_pieces(common.get("env_to_module_connectors", ()))
    group = MultiAgentLearnerGroup(
        modules, config, learner_class=ppo_learner_class("torch" if stateful else "numpy"),
        learner_kwargs={"view_pieces": views},
    )  # fmt: skip
    lone = group.groups["default_policy"].local
    keys = [Columns.OBS, Columns.ACTIONS, Columns.ADVANTAGES, Columns.VALUE_TARGETS]
    keys += [Columns.PREV_ACTIONS, Columns.PREV_REWARDS] if views and extra is _previous else []
    for _ in range(3):  # greedy actions: what the envs emit decides everything
        sa_chunks = single.sample(explore=False)
        ma_chunks = multi.sample(explore=False)
        agent_chunks = group.split(ma_chunks)["default_policy"]

        def key(chunk: Any) -> tuple[int, bytes]:
            return len(chunk), np.asarray(chunk.get_observations(slice(0, None))).tobytes()

        sa_sorted, ma_sorted = sorted(sa_chunks, key=key), sorted(agent_chunks, key=key)
        assert [key(c) for c in sa_sorted] == [key(c) for c in ma_sorted]
        for a, b in zip(sa_sorted, ma_sorted, strict=True):
            assert np.array_equal(a.get_actions(slice(0, None)), b.get_actions(slice(0, None)))
            assert np.array_equal(a.get_rewards(slice(0, None)), b.get_rewards(slice(0, None)))
            assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)
            assert a.len_lookback_buffer == b.len_lookback_buffer
        learner_class = ppo_learner_class("torch" if stateful else "numpy")
        sa_batch = learner_class(copy.deepcopy(single.module), config, view_pieces=views).build_batch(sa_sorted)
        ma_batch = lone.build_batch(ma_sorted)
        for k in keys[:2] + keys[4:]:
            assert np.array_equal(sa_batch[k], ma_batch[k]), k
        for k in (Columns.ADVANTAGES, Columns.VALUE_TARGETS):
            np.testing.assert_allclose(sa_batch[k], ma_batch[k], rtol=TOL, atol=TOL)
        if stateful:  # each sequence starts from the state the runner used: the same on both paths
            assert np.array_equal(sa_batch[Columns.SEQ_LENS], ma_batch[Columns.SEQ_LENS])
            for k, v in sa_batch[Columns.STATE_IN].items():
                np.testing.assert_allclose(v, ma_batch[Columns.STATE_IN][k], rtol=TOL, atol=TOL)
    group.stop()


def group_modules(*, policies_to_train: tuple[str, ...] | None = None) -> MultiRLModule:
    ma = MultiAgentConfig(
        policies=("even", "odd"), policy_mapping_fn=lambda aid, ep, **kw: ("even", "odd")[int(aid[1:]) % 2],
        policies_to_train=policies_to_train,
    )  # fmt: skip
    cfg = EnvRunnerConfig(
        env=lambda ctx: RandomScheduleEnv({"num_agents": 4, "max_steps": 25, "seed": 7}), seed=1, multi_agent=ma
    )
    return build_multi_rl_module(cfg)


class TestGroup:
    def test_only_trained_modules_change(self) -> None:
        modules = group_modules(policies_to_train=("even",))
        group = MultiAgentLearnerGroup(modules, PPOConfig(num_epochs=2))
        before = group.get_weights()
        m = group.update_from_episodes(schedule_runner().sample())
        after = group.get_weights()
        assert set(m.module_metrics) == {"even"} and set(metrics_by_module(m)) == {"even"}
        assert m.batch_size == m.module_metrics["even"].batch_size > 0
        assert any(not np.array_equal(before["even"][k], after["even"][k]) for k in before["even"])
        assert all(np.array_equal(before["odd"][k], after["odd"][k]) for k in before["odd"])
        assert group.trained_module_ids == ("even",) and group.module_ids == ("even", "odd")

    def test_each_module_learns_only_from_its_agents(self) -> None:
        """A module's update equals a lone learner's update on the chunks of its agents alone."""
        chunks = schedule_runner().sample()
        modules = group_modules()
        lone = Learner(copy.deepcopy(modules["odd"]), PPOConfig(num_epochs=2))
        group = MultiAgentLearnerGroup(modules, PPOConfig(num_epochs=2))
        group.update_from_episodes(chunks)
        lone.update_from_episodes(AgentToModuleMapping()(rl_module=None, batch={}, episodes=chunks)["odd"])
        got, want = group.get_weights(("odd",))["odd"], lone.module.get_state()
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=TOL, atol=TOL)

    def test_states_round_trip_and_refuse_other_modules(self) -> None:
        group = MultiAgentLearnerGroup(group_modules(policies_to_train=("even",)), PPOConfig(num_epochs=1))
        group.update_from_episodes(schedule_runner().sample())
        state = group.get_states()[0]
        fresh = MultiAgentLearnerGroup(group_modules(policies_to_train=("even",)), PPOConfig(num_epochs=1))
        fresh.set_states(state)
        for mid in ("even", "odd"):
            want, got = group.get_weights()[mid], fresh.get_weights()[mid]
            assert all(np.array_equal(want[k], got[k]) for k in want)
        other = MultiAgentLearnerGroup(group_modules(), PPOConfig(num_epochs=1))
        with pytest.raises(ValueError, match=r"this run trains \['even', 'odd'\] and freezes \[\]"):
            other.set_states(state)

    def test_add_and_remove_modules(self) -> None:
        modules = group_modules()
        group = MultiAgentLearnerGroup(modules, PPOConfig(num_epochs=1))
        group.add_module("even_v1", copy.deepcopy(modules["even"]), trainable=False)
        assert group.module_ids == ("even", "odd", "even_v1") and group.trained_module_ids == ("even", "odd")
        with pytest.raises(ConfigError, match="add_module: module id 'odd' is taken"):
            group.add_module("odd", modules["odd"])
        group.remove_module("odd")
        assert group.module_ids == ("even", "even_v1")
        with pytest.raises(ConfigError, match="remove_module: no module 'odd'"):
            group.remove_module("odd")

    def test_not_a_multi_rl_module(self) -> None:
        with pytest.raises(ConfigError, match="'modules' must be a MultiRLModule"):
            MultiAgentLearnerGroup({"p": None})  # type: ignore[arg-type]


@pytest.mark.usefixtures("ray_session")
def test_learners_of_every_module_that_can_never_fit_are_refused_before_any_starts() -> None:
    """2 modules x 3 learners x 1 CPU on the session's 4 CPUs: each module's 3 fit alone, so before,
    the first module's learners started and the second's were refused after them."""
    import ray

    total = idle_cpus()
    with pytest.raises(InsufficientResourcesError) as raised:
        MultiAgentLearnerGroup(group_modules(), PPOConfig(), num_learners=3, num_cpus_per_learner=1.0)
    assert str(raised.value).startswith(
        "cannot place the actors: trained modules x num_learners x num_cpus_per_learner = 6 x 1 CPU = 6.0 CPU, "
        f"but the cluster has {total:.1f} CPU in all"
    )
    assert ray.available_resources().get("CPU", 0.0) == total  # nothing was reserved, even for a moment
