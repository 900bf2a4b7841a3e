"""Multi-agent DQN through ``train_dqn``: a DQN learner per trained module, each pulling its own
agents' n-step transitions from the multi-agent replay actor; what it refuses."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from learner.checkpoint import Checkpointer, latest_checkpoint, load_checkpoint
from learner.metrics import IterationRecord
from learner.train import run_observation_space
from learner.train_dqn import DQNTrainingConfig, train_dqn
from ray_sampler.errors import ConfigError
from ray_sampler.modules.q_module import QModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_creator import env_name
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env import make_multi_agent
from replay.actor import ReplayConfig
from replay.multi_agent_actor import ModuleReplay, MultiAgentReplayActor
from replay.multi_agent_persistence import restore_multi_agent_buffer

PER_AGENT = MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")


def config(**kwargs: Any) -> DQNTrainingConfig:
    runner = EnvRunnerConfig(
        env=make_multi_agent("CartPole-v1", 2), num_envs_per_env_runner=4, rollout_fragment_length=32, seed=0,
        module_class=QModule, module_config={"hidden_sizes": (64, 64), "seed": 0}, multi_agent=PER_AGENT,
    )  # fmt: skip
    kwargs.setdefault(
        "replay", ReplayConfig(capacity_env_steps=50_000, min_size_to_sample=1000, prioritized=False, seed=0)
    )
    return DQNTrainingConfig(env_runner=runner, **kwargs)


@pytest.mark.usefixtures("ray_session")
def test_each_module_learns_from_its_agents_transitions() -> None:
    records: list[IterationRecord] = []
    result = train_dqn(config(target_return=100, stop_window=20, max_env_steps=15_000), on_iteration=records.append)
    assert result.reached and result.mean_return >= 100  # random play: about 45 summed
    # Every step the runners sent reached the replay (nothing lost, nothing counted twice).
    assert result.replay_num_env_steps_received == result.runner_env_steps_sent >= result.env_steps
    assert {"module/p0", "module/p1", "agent/0", "agent/1"} <= set(records[-1].returns_by)
    assert records[-1].losses["num_updates"] > 0 and np.isfinite(records[-1].losses["loss"])


def test_a_module_view_samples_only_its_agents() -> None:
    from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner

    runner = MultiAgentEnvRunner(dataclasses.replace(config().env_runner, module_class=None, module_config={}))
    replay = MultiAgentReplayActor(capacity_env_steps=10_000, seed=0)
    replay.add(runner.sample(num_timesteps=200))
    held = replay.get_counts()["num_module_steps"]
    for mid in ("p0", "p1"):
        (batch,) = ModuleReplay(replay, mid).sample_batches(64, 1, n_step=1, gamma=0.99)
        assert len(batch["obs"]) == 64 and held[mid] > 0
    with pytest.raises(Exception, match="module 'p7' has no data"):
        ModuleReplay(replay, "p7").sample_batches(8, 1)


def test_prioritized_replay_and_replay_shards_are_refused() -> None:
    prioritized = dataclasses.replace(config().replay, prioritized=True)
    with pytest.raises(ConfigError, match=r"'replay\.prioritized' is single-agent for now"):
        train_dqn(config(replay=prioritized))
    with pytest.raises(ConfigError, match=r"^'num_replay_shards' is single-agent for now"):
        train_dqn(config(num_replay_shards=2))  # the default 2 runners


def test_history_pieces_and_recurrent_modules_are_refused_in_one_line() -> None:
    from connectors.env_to_module import FrameStackingEnvToModule
    from ray_sampler.modules.torch_lstm import TorchLSTMModule

    stacked = dataclasses.replace(
        config().env_runner, env_to_module_connectors=(FrameStackingEnvToModule(),), episode_lookback_horizon=None
    )
    with pytest.raises(ConfigError, match=r"'env_to_module_connectors' \['FrameStackingEnvToModule'\]: a multi-agent"):
        train_dqn(dataclasses.replace(config(), env_runner=stacked))
    lstm = dataclasses.replace(config().env_runner, module_class=TorchLSTMModule, module_config={})
    with pytest.raises(ConfigError, match=r"^modules \['p0', 'p1'\] are recurrent: a multi-agent DQN run trains"):
        train_dqn(dataclasses.replace(config(), env_runner=lstm, framework="torch"))


@pytest.mark.usefixtures("ray_session")
def test_a_checkpoint_holds_the_learners_and_the_replay_and_resumes(tmp_path: Path) -> None:
    cfg = config(target_return=None, max_env_steps=1536)
    train_dqn(cfg, log_every_s=0.0, checkpointer=Checkpointer(tmp_path, every=6, keep=1), on_iteration=lambda r: None)
    found = latest_checkpoint(tmp_path)
    assert found is not None and (found / "replay" / "multi_agent.json").is_file()
    space = run_observation_space(cfg.env_runner)
    state = load_checkpoint(found, algo="dqn", env=env_name(cfg.env_runner.env), observation_space=space)
    assert state.replay_path == found / "replay" and sorted(state.learner["modules"]) == ["p0", "p1"]
    assert state.counters["num_updates"] > 0
    # The saved replay holds every step counted at the save (and what runners had in flight then).
    assert restore_multi_agent_buffer(state.replay_path).get_num_timesteps() >= state.env_steps > 0
    more: list[IterationRecord] = []
    resumed = config(target_return=None, max_env_steps=state.env_steps + 256)
    result = train_dqn(resumed, log_every_s=0.0, resume=state, on_iteration=more.append)
    assert more[0].iteration == state.iteration + 1 and more[0].env_steps > state.env_steps
    # The restored replay actor received exactly the steps sampled after the resume.
    assert result.replay_num_env_steps_received == result.runner_env_steps_sent - state.env_steps > 0
    assert [p.name for p in tmp_path.iterdir()] == [found.name]  # its working copy is gone
