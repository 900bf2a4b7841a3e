"""History per agent in multi-agent runs: frame stacks, previous actions and rewards, and a recurrent
module's state, each built from the agent's own steps, per module, across continuation chunks.

RandomScheduleEnv's observations are ``[env step, agent index]`` and its rewards ``env step + agent
index / 10``, agents act on irregular turns and actions hang: a stack or a state taken from the
wrong agent, the wrong step or a lost chunk boundary shows up as a wrong number."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from connectors.env_to_module import FrameStackingEnvToModule, PrevActionsPrevRewardsEnvToModule
from ray_sampler.data.columns import Columns
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner, build_multi_rl_module
from tests.ray_sampler.ma_envs import RandomScheduleEnv
from tests.ray_sampler.sampling.counter_module import CounterModule
from tests.ray_sampler.sampling.frames import SeeingModule
from tests.ray_sampler.sampling.test_multi_agent_env_runner import joined

EVEN_ODD = MultiAgentConfig(
    policies=("even", "odd"), policy_mapping_fn=lambda aid, episode, **kw: ("even", "odd")[int(aid[1:]) % 2]
)


def schedule(cfg: dict[str, Any]) -> RandomScheduleEnv:
    return RandomScheduleEnv({"num_agents": 4, "max_steps": 30, **cfg})


def sampled(
    module_class: type, lookback: int | None, **kwargs: Any
) -> tuple[MultiAgentEnvRunner, list[MultiAgentEpisode]]:
    """Many short truncate-mode calls (chunks of 5 env steps, ``lookback`` env steps of lookback)."""
    r = MultiAgentEnvRunner(
        EnvRunnerConfig(
            env=schedule, module_class=module_class, num_envs_per_env_runner=3, rollout_fragment_length=5,
            episode_lookback_horizon=lookback, multi_agent=EVEN_ODD, seed=4, **kwargs,
        )
    )  # fmt: skip
    chunks: list[MultiAgentEpisode] = []
    for _ in range(25):
        chunks += r.sample()
    return r, chunks


def emo(sa: Any, key: str) -> np.ndarray:
    """The agent's extra model output ``key`` at every step of its chunk (none for an agent without steps)."""
    return np.asarray(sa.get_extra_model_outputs(key, slice(0, None)) if len(sa) else [])


def fill_before(items: np.ndarray, k: int, n: int) -> np.ndarray:
    """``items[k - n + 1 .. k]``, zeros where the index is below 0."""
    out = np.zeros((n, *items.shape[1:]), items.dtype)
    take = items[max(k - n + 1, 0) : k + 1]
    out[n - len(take) :] = take
    return out


@pytest.mark.parametrize("lookback", [2, 5])
def test_each_agent_acts_on_a_stack_of_its_own_last_observations(lookback: int) -> None:
    r, chunks = sampled(SeeingModule, lookback, env_to_module_connectors=(FrameStackingEnvToModule(num_frames=3),))
    assert r.agent_lookback == 2
    checked = 0
    for ep in joined(chunks).values():
        for aid, sa in ep.agent_episodes.items():
            obs = np.asarray(sa.get_observations(slice(0, None)))
            inputs = emo(sa, "seen_obs")
            for k in range(len(sa)):  # the stack it acted on at its k-th observation
                assert inputs[k].tolist() == fill_before(obs, k, 3).tolist(), (ep.id_, aid, k)
                checked += 1
    assert checked > 300
    # Each chunk keeps at least the agent's own last 2 steps as lookback, however many env steps back.
    continued = [sa for c in chunks for sa in c.agent_episodes.values() if sa.t_started >= 2]
    assert continued and all(sa.len_lookback_buffer >= 2 for sa in continued)


def test_each_agent_gets_its_own_previous_actions_and_rewards() -> None:
    piece = PrevActionsPrevRewardsEnvToModule(n_prev_actions=2, n_prev_rewards=2)
    _, chunks = sampled(SeeingModule, None, env_to_module_connectors=(piece,))
    checked = 0
    for ep in joined(chunks).values():
        for sa in ep.agent_episodes.values():
            actions = np.asarray(sa.get_actions(slice(0, None)))
            rewards = np.asarray(sa.get_rewards(slice(0, None)))
            prev_actions = emo(sa, f"seen_{Columns.PREV_ACTIONS}")
            prev_rewards = emo(sa, f"seen_{Columns.PREV_REWARDS}")
            for k in range(len(sa)):  # acting at its k-th observation: its steps k-2 and k-1
                assert prev_actions[k].tolist() == fill_before(actions, k - 1, 2).tolist()
                assert prev_rewards[k].tolist() == fill_before(rewards, k - 1, 2).tolist()
                checked += 1
    assert checked > 300


@pytest.mark.parametrize("lookback", [1, 3])
def test_a_recurrent_state_follows_each_agent_across_chunks(lookback: int) -> None:
    """CounterModule's state counts the steps it was given: at an agent's k-th observation its
    state_in must be k, whatever the other agents and the chunk boundaries did."""
    r, chunks = sampled(CounterModule, lookback)
    assert r.agent_lookback == 1
    checked = 0
    for ep in joined(chunks).values():
        for sa in ep.agent_episodes.values():
            seen = emo(sa, "seen")
            assert seen.tolist() == list(range(len(sa)))
            checked += len(sa)
    assert checked > 300
    # What a learner starts a chunk's first sequence from: the lookback's last state_out, which is
    # the state_in the runner used for the chunk's first step.
    for chunk in chunks:
        for sa in chunk.agent_episodes.values():
            if sa.t_started > 0 and len(sa):
                before = sa.get_extra_model_outputs(Columns.STATE_OUT, -1, neg_index_as_lookback=True)
                assert float(before["count"][0]) == float(sa.get_extra_model_outputs("seen", 0))


def test_every_new_episode_starts_each_agent_from_the_initial_state() -> None:
    _, chunks = sampled(CounterModule, 1, batch_mode="complete_episodes")
    for ep in chunks:
        for sa in ep.agent_episodes.values():
            assert emo(sa, "seen").tolist() == list(range(len(sa)))


def test_the_learners_modules_take_the_stacked_space() -> None:
    config = EnvRunnerConfig(
        env=schedule, multi_agent=EVEN_ODD, env_to_module_connectors=(FrameStackingEnvToModule(num_frames=3),)
    )
    modules = build_multi_rl_module(config)
    assert {mid: m.observation_space.shape for mid, m in modules.items()} == {"even": (3, 2), "odd": (3, 2)}


def test_a_stateful_module_without_state_out_is_refused_in_one_line() -> None:
    class NoStateOut(CounterModule):
        def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
            out = super().forward_exploration(batch)
            del out[Columns.STATE_OUT]
            return out

        forward_inference = forward_exploration

    r = MultiAgentEnvRunner(EnvRunnerConfig(env=schedule, module_class=NoStateOut))
    with pytest.raises(ConfigError, match=r"must output 'state_out', a dict with the keys of its initial state"):
        r.sample()


def test_module_to_env_pieces_are_refused_in_one_line() -> None:
    def piece(**kwargs: Any) -> dict[str, Any]:
        return kwargs["batch"]

    with pytest.raises(ConfigError, match=r"take no 'module_to_env_connectors' pieces yet \(got \['piece'\]\)"):
        MultiAgentEnvRunner(EnvRunnerConfig(env=schedule, module_to_env_connectors=(piece,)))
