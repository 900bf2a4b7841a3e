"""Multi-agent PPO through ``train_ppo``: a learner per trained module on its agents' chunks; frozen
modules act but never learn; per-module returns in the records; checkpoints resume."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray

from connectors.env_to_module import FrameStackingEnvToModule
from learner.checkpoint import Checkpointer, latest_checkpoint, load_checkpoint
from learner.learner import PPOConfig
from learner.metrics import IterationRecord
from learner.train import PPOTrainingConfig, TrainingLoop, run_observation_space, train_ppo
from ray_sampler.errors import ConfigError
from ray_sampler.policy import MultiAgentPolicy
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_creator import env_name
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from ray_sampler.sampling.multi_agent_env_runner import build_multi_rl_module
from tests.helpers import greedy_return
from tests.ray_sampler.ma_envs import RecallEnv, SignalEnv
from tests.ray_sampler.rllib_style_envs import LateJoinerEnv, SimultaneousEnv, TurnBasedEnv

PER_AGENT = MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
ENV = make_multi_agent("CartPole-v1", 2)


def config(multi_agent: MultiAgentConfig = PER_AGENT, **kwargs: Any) -> PPOTrainingConfig:
    runner = EnvRunnerConfig(
        env=ENV, num_envs_per_env_runner=4, rollout_fragment_length=128, seed=0, multi_agent=multi_agent
    )
    group = EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5)
    return PPOTrainingConfig(env_runner=runner, env_runner_group=group, **kwargs)


@pytest.mark.usefixtures("ray_session")
def test_two_policies_learn_multi_agent_cartpole() -> None:
    lines: list[str] = []
    result = train_ppo(config(target_return=300, stop_window=20, max_iterations=40), log=lines.append)
    assert result.reached and result.mean_return >= 300  # random play: about 45 (22 per agent)
    assert result.env_steps == 1024 * result.iterations and result.agent_steps > result.env_steps
    assert {"module/p0", "module/p1", "agent/0", "agent/1"} <= set(result.returns_by)
    # Each module acts for one agent here: its returns are that agent's, and the two sum to the total.
    assert result.returns_by["module/p0"] == pytest.approx(result.returns_by["agent/0"])
    assert result.returns_by["module/p0"] + result.returns_by["module/p1"] == pytest.approx(result.mean_return)
    assert lines[0].startswith("iter 1: 1024 env steps, mean return ")
    assert ", p0 " in lines[-2] and ", p1 " in lines[-2]
    policy = result.policy  # each module's final weights, and which agent each acts for
    assert isinstance(policy, MultiAgentPolicy) and policy.mapping == {0: "p0", 1: "p1"}
    assert min(greedy_return(policy.policies[mid]) for mid in ("p0", "p1")) > 60  # each on one CartPole


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize(
    ("env_class", "target"),  # the most an episode can earn: 20, 10, 17; random play a third of it
    [(SimultaneousEnv, 17.0), (TurnBasedEnv, 8.5), (LateJoinerEnv, 14.5)],
    ids=["simultaneous", "turn_based", "late_joiner"],
)
def test_envs_written_the_rllib_way_train(env_class: type, target: float) -> None:
    runner = EnvRunnerConfig(
        env=env_class, num_envs_per_env_runner=8, rollout_fragment_length=64, seed=0, multi_agent=MultiAgentConfig()
    )
    cfg = PPOTrainingConfig(
        env_runner=runner,
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5),
        target_return=target,
        stop_window=50,
        max_iterations=40,
    )
    result = train_ppo(cfg, log=lambda line: None)
    assert result.reached and result.mean_return >= target
    assert set(result.returns_by) >= {"agent/player1", "agent/player2", "module/default_policy"}


@pytest.mark.usefixtures("ray_session")
def test_agents_whose_spaces_differ_train_a_module_per_pair_by_default() -> None:
    from tests.ray_sampler.sampling.test_multi_agent_config import simple_tag

    runner = EnvRunnerConfig(env=simple_tag, num_envs_per_env_runner=2, rollout_fragment_length=50, seed=0)
    group = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)
    result = train_ppo(
        PPOTrainingConfig(env_runner=runner, env_runner_group=group, max_iterations=2, target_return=None),
        log=lambda line: None,
    )
    assert {"module/adversary", "module/agent", "agent/adversary_0", "agent/agent_0"} <= set(result.returns_by)
    assert result.policy.mapping == {**dict.fromkeys(["adversary_0", "adversary_1", "adversary_2"], "adversary"),
                                     "agent_0": "agent"}  # fmt: skip


@pytest.mark.usefixtures("ray_session")
def test_a_frozen_module_acts_but_does_not_learn() -> None:
    frozen = dataclasses.replace(PER_AGENT, policies_to_train=("p0",))
    records: list[IterationRecord] = []
    train_ppo(config(frozen, max_iterations=12, target_return=None), on_iteration=records.append)
    last = records[-1]
    # p0 learns to balance; p1 keeps its first (random-init) weights and falls within a few dozen steps.
    assert last.returns_by["module/p0"] > 2 * last.returns_by["module/p1"]
    assert "policy_loss/p0" in last.losses and "policy_loss/p1" not in last.losses


@pytest.mark.usefixtures("ray_session")
def test_a_checkpoint_resumes_every_module(tmp_path: Path) -> None:
    cfg = config(max_iterations=3, target_return=None)
    train_ppo(cfg, log=lambda line: None, checkpointer=Checkpointer(tmp_path, every=3))
    found = latest_checkpoint(tmp_path)
    assert found is not None
    state = load_checkpoint(
        found, algo="ppo", env=env_name(ENV), observation_space=run_observation_space(cfg.env_runner)
    )
    assert sorted(state.learner["modules"]) == ["p0", "p1"] and state.learner["frozen"] == {}
    assert state.iteration == 3 and set(state.returns_by) >= {"module/p0", "agent/1"}
    records: list[IterationRecord] = []
    train_ppo(dataclasses.replace(cfg, max_iterations=5), on_iteration=records.append, resume=state)
    assert [r.iteration for r in records] == [4, 5] and records[0].env_steps == 4 * 1024
    assert records[0].episodes > state.episodes  # the counters and windows went on from the checkpoint


def test_bad_multi_agent_config() -> None:
    with pytest.raises(ConfigError, match=r"'policies_to_train' names modules \['p7'\] that 'policies' lacks"):
        dataclasses.replace(PER_AGENT, policies_to_train=("p7",))
    with pytest.raises(ConfigError, match="'policies_to_train' must be a tuple of module ids"):
        dataclasses.replace(PER_AGENT, policies_to_train="p0")


@pytest.mark.usefixtures("ray_session")
def test_remote_learners_train_each_module(tmp_path: Path) -> None:
    cfg = config(max_iterations=2, target_return=None, num_learners=1, num_cpus_per_learner=0)
    result = train_ppo(cfg, log=lambda line: None, checkpointer=Checkpointer(tmp_path, every=2))
    assert result.iterations == 2
    found = latest_checkpoint(tmp_path)
    assert found is not None
    state = load_checkpoint(
        found, algo="ppo", env=env_name(ENV), observation_space=run_observation_space(cfg.env_runner)
    )
    first = build_multi_rl_module(cfg.env_runner)  # the weights every module started from (seeded)
    for mid in ("p0", "p1"):
        learner = state.learner["modules"][mid]
        assert learner["weights_version"] == 2  # one update per iteration, on a learner actor
        assert any(not np.array_equal(learner["module"][k], v) for k, v in first[mid].get_state().items())


@pytest.mark.usefixtures("ray_session")
def test_two_agents_learn_a_game_neither_wins_alone() -> None:
    """SignalEnv: the listener can only win if the speaker learns to signal and the listener to
    read it (summed return 2.0); with the message hidden (the control) the listener guesses (1.0)."""

    def run(mute: bool) -> Any:
        ma = MultiAgentConfig(policies=("speaker", "listener"), policy_mapping_fn=by_name)
        cfg = PPOTrainingConfig(
            env_runner=EnvRunnerConfig(
                env=SignalEnv, env_config={"mute": mute}, num_envs_per_env_runner=4, rollout_fragment_length=32,
                seed=0, multi_agent=ma,
            ),
            env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5),
            ppo=PPOConfig(seed=0, lr=3e-3, num_epochs=4, minibatch_size=64),
            target_return=1.9, max_iterations=40 if not mute else 10,
        )  # fmt: skip
        return train_ppo(cfg, log=lambda line: None)

    together = run(mute=False)
    assert together.reached and together.mean_return >= 1.9  # 1,536 env steps at seed 0
    control = run(mute=True)
    assert not control.reached and control.mean_return < 1.3  # at best a guess: 1.0 expected


def recall(max_iterations: int, **runner: Any) -> Any:
    """PPO on RecallEnv (one module for both players) until a summed 1.9 (of 2.0) or the budget."""
    framework = "torch" if "module_class" in runner else "numpy"
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env=RecallEnv, num_envs_per_env_runner=4, rollout_fragment_length=32, seed=0, **runner
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5),
        ppo=PPOConfig(seed=0, lr=3e-3, num_epochs=4, minibatch_size=64, max_seq_len=8), framework=framework,
        target_return=1.9, max_iterations=max_iterations,
    )  # fmt: skip
    return train_ppo(cfg, log=lambda line: None)


@pytest.mark.usefixtures("ray_session")
def test_frame_stacks_per_agent_learn_a_memory_game_on_turns() -> None:
    """RecallEnv: each player must recall its cue from two of its own moves back (5 env steps, as
    the turns alternate, and across chunk boundaries): with a 3-frame stack per agent it does; with
    no stack it can only guess (1.0 summed expected)."""
    stacked = recall(40, env_to_module_connectors=(FrameStackingEnvToModule(num_frames=3),))
    assert stacked.reached and stacked.mean_return >= 1.9  # 1,152 env steps at seed 0
    control = recall(15)
    assert not control.reached and control.mean_return < 1.3


@pytest.mark.usefixtures("ray_session")
def test_a_recurrent_module_per_agent_learns_the_memory_game() -> None:
    from ray_sampler.modules.torch_lstm import TorchLSTMModule

    lstm = recall(40, module_class=TorchLSTMModule, module_config={"seed": 0, "lstm_cell_size": 16})
    assert lstm.reached and lstm.mean_return >= 1.9  # 1,792 env steps at seed 0


def by_name(agent_id: Any, episode: Any, **kwargs: Any) -> str:
    return str(agent_id)


class FlakyCartPoles(ENV):  # type: ignore[misc, valid-type]
    """MultiAgentCartPole whose step raises now and then (seeded per sub-env and per rebuild)."""

    made = 0

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        FlakyCartPoles.made += 1
        where = [getattr(config, "worker_index", 0), getattr(config, "vector_index", 0), FlakyCartPoles.made]
        self._fail = np.random.default_rng([7, *where])

    def step(self, action_dict: dict) -> Any:
        if self._fail.random() < 0.01:
            raise RuntimeError("the simulator crashed")
        return super().step(action_dict)


@pytest.mark.usefixtures("ray_session")
def test_a_killed_runner_and_failing_sub_envs_are_counted() -> None:
    runner = EnvRunnerConfig(
        env=FlakyCartPoles, num_envs_per_env_runner=4, rollout_fragment_length=64, seed=0, multi_agent=PER_AGENT,
        restart_failed_sub_environments=True,
    )  # fmt: skip
    cfg = PPOTrainingConfig(
        env_runner=runner, env_runner_group=EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5),
        target_return=None, max_iterations=4,
    )  # fmt: skip
    lines: list[str] = []
    records: list[IterationRecord] = []

    def kill_runner_1(loop: TrainingLoop) -> None:
        if loop.iteration == 2:
            ray.kill(loop.runners.actor(1))

    result = train_ppo(cfg, log=lines.append, on_iteration=records.append, on_train_result=kill_runner_1)
    # Every call answered (the replacement took the lost request); a call whose sub-envs failed makes up
    # for the dropped steps and may go over by less than one vector step (4 sub-envs).
    assert result.iterations == 4 and 4 * 512 <= result.env_steps < 4 * 512 + 4 * 2 * 4
    assert [r.num_env_runner_restarts for r in records] == [0, 0, 1, 1]
    assert records[2].num_env_steps_lost == 256  # the request in flight to the dead runner: 64 x 4 steps
    assert any(line.startswith("runner 1 died") for line in lines), lines
    # At 1% a step, each call of 256 env steps per runner rebuilds sub-envs: each named with what it dropped.
    dropped = [line for line in lines if "sub-env restart" in line]
    line = re.compile(r"runner \d: \d+ sub-env restarts?; \d+ env steps? and \d+ episodes? dropped")
    assert dropped and all(line.fullmatch(x) for x in dropped), dropped


def test_a_centralized_critic_of_the_torch_mlp_is_its_torch_twin() -> None:
    from ray_sampler.modules.torch_centralized_critic import TorchCentralizedCriticModule
    from ray_sampler.modules.torch_mlp import TorchMLPModule
    from ray_sampler.sampling.multi_agent_env_runner import module_build_config

    ma = MultiAgentConfig(centralized_critic=True)
    runner = EnvRunnerConfig(env=ENV, module_class=TorchMLPModule, multi_agent=ma)
    assert module_build_config(runner, ma, "default_policy").module_class is TorchCentralizedCriticModule


@pytest.mark.usefixtures("ray_session")
def test_a_torch_centralized_critic_learns_the_signal_game() -> None:
    ma = MultiAgentConfig(policies=("speaker", "listener"), policy_mapping_fn=by_name, centralized_critic=True)
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env=SignalEnv, num_envs_per_env_runner=4, rollout_fragment_length=32, seed=0, multi_agent=ma
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5),
        ppo=PPOConfig(seed=0, lr=3e-3, num_epochs=4, minibatch_size=64), framework="torch",
        target_return=1.9, max_iterations=40,
    )  # fmt: skip
    result = train_ppo(cfg, log=lambda line: None)
    assert result.reached and result.mean_return >= 1.9


def test_a_centralized_critic_takes_no_history_pieces_yet() -> None:
    from ray_sampler.sampling.multi_agent_env_runner import module_build_config

    ma = MultiAgentConfig(centralized_critic=True)
    runner = EnvRunnerConfig(env=ENV, multi_agent=ma, env_to_module_connectors=(FrameStackingEnvToModule(),))
    with pytest.raises(ConfigError, match=r"takes no history pieces yet \(got \['FrameStackingEnvToModule'\]"):
        module_build_config(runner, ma, "default_policy")


@pytest.mark.usefixtures("ray_session")
def test_the_mean_std_filter_works_per_module_in_runners_and_learners(tmp_path: Path) -> None:
    seen: list[tuple[float, float, float]] = []

    def compare(loop: TrainingLoop) -> None:
        merged = loop.runners.merged_connector_states
        for mid in ("p0", "p1"):
            learner = loop.learners.groups[mid].local.pipeline.get_state()["MeanStdFilter"]["global"]
            runner = merged[mid]["MeanStdFilter"]["global"]
            assert learner["count"] == runner["count"] > 0 and np.array_equal(learner["mean"], runner["mean"])
            seen.append((loop.iteration, learner["count"], float(learner["mean"][0])))

    cfg = config(ppo=PPOConfig(observation_filter="mean_std"), target_return=None, max_iterations=3)
    train_ppo(cfg, log=lambda line: None, on_train_result=compare, checkpointer=Checkpointer(tmp_path, every=3))
    assert [s[0] for s in seen] == [1, 1, 2, 2, 3, 3] and seen[-1][1] > seen[0][1]  # the moments grow
    found = latest_checkpoint(tmp_path)
    assert found is not None
    saved = load_checkpoint(
        found, algo="ppo", env=env_name(ENV), observation_space=run_observation_space(cfg.env_runner)
    )
    assert saved.connector_states is not None and set(saved.connector_states) == {"p0", "p1"}


@pytest.mark.usefixtures("ray_session")
def test_modules_added_and_removed_between_iterations() -> None:
    """Iteration 1 adds a frozen copy of p0 and maps agent 1 to it; iteration 2 removes p1."""
    seen: dict[int, Any] = {}

    def change(loop: TrainingLoop) -> None:
        if loop.iteration == 1:
            loop.add_frozen_copy(
                "p0_v1", copy_of="p0", policy_mapping_fn=lambda aid, episode, **kw: ("p0", "p0_v1")[aid]
            )
        if loop.iteration == 2:
            loop.remove_module("p1")
        ma = loop.runners.config.multi_agent
        seen[loop.iteration] = (ma.module_ids, ma.trained_module_ids, loop.learners.module_ids, loop.record.returns_by)

    train_ppo(config(max_iterations=4, target_return=None), log=lambda line: None, on_train_result=change)
    assert seen[1][:3] == (("p0", "p1", "p0_v1"), ("p0", "p1"), ("p0", "p1", "p0_v1"))
    assert seen[2][:3] == (("p0", "p0_v1"), ("p0",), ("p0", "p0_v1"))
    assert np.isfinite(seen[4][3]["module/p0_v1"])  # agent 1's episodes on the copy ended: it acted
