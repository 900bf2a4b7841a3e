"""PettingZoo adapters: AEC turn-based play with each reward counted once, Parallel envs, end flags."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpe2 import simple_spread_v3
from pettingzoo.classic import rps_v2, tictactoe_v3

from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import EnvCreatorError
from ray_sampler.sampling.env_creator import resolve_creator
from ray_sampler.sampling.multi_agent_env import ALL, check_multi_agent_output
from ray_sampler.sampling.pettingzoo_env import ParallelPettingZooEnv, PettingZooEnv, wrap_pettingzoo


def play(env: Any, seed: int) -> MultiAgentEpisode:
    """One episode with random legal-or-not actions, every output checked against the contract."""
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    check_multi_agent_output(env, 0, obs, infos=infos)
    ep = MultiAgentEpisode()
    ep.add_env_reset(observations=obs, infos=infos)
    while not ep.is_done:
        actions = {a: int(rng.integers(env.get_action_space(a).n)) for a in ep.get_agents_to_act()}
        out = env.step(actions)
        check_multi_agent_output(env, ep.env_t + 1, *out)
        ep.add_env_step(out[0], actions, out[1], out[4], terminateds=out[2], truncateds=out[3])
    ep.validate()
    return ep


def test_tictactoe_is_turn_based_and_counts_each_reward_once() -> None:
    for seed in range(20):
        env = wrap_pettingzoo(tictactoe_v3.env())
        assert isinstance(env, PettingZooEnv)
        ep = play(env, seed)
        maps = ep.env_t_to_agent_t
        # One agent moves per env step (the last holds the final observations of both).
        assert all(sum(m[t] >= 0 for m in maps.values()) == 1 for t in range(len(ep)))
        # Zero-sum outcome: the winner's +1 and the loser's -1 (or an illegal move's -1 alone), each counted once.
        returns = {a: sa.get_return() for a, sa in ep.agent_episodes.items()}
        assert sorted(returns.values()) in ([-1.0, 1.0], [0.0, 0.0], [-1.0, 0.0]), returns
        assert ep.is_terminated and not ep.is_truncated


def test_tictactoe_rewards_match_pettingzoos_cumulative_rewards() -> None:
    raw = tictactoe_v3.env()
    env = PettingZooEnv(tictactoe_v3.env())
    raw.reset(seed=3)
    env.reset(seed=3)
    totals = dict.fromkeys(raw.possible_agents, 0.0)
    moves = [4, 0, 8, 2, 1, 6, 7]  # legal; player_2 wins with 2-4-6... or the game ends first
    got = dict.fromkeys(env.possible_agents, 0.0)
    for m in moves:
        if not raw.agents:
            break
        agent = raw.agent_selection
        raw.step(m)
        for a, r in raw.rewards.items():
            totals[a] += r
        while raw.agents and (raw.terminations[raw.agent_selection] or raw.truncations[raw.agent_selection]):
            raw.step(None)
        _, rew, term, _, _ = env.step({agent: m})
        for a, r in rew.items():
            got[a] += r
    assert got == totals and sorted(got.values()) == [-1.0, 1.0] and term[ALL]


def test_rps_parallel_ends_truncated_at_its_cycle_limit() -> None:
    env = wrap_pettingzoo(rps_v2.parallel_env(max_cycles=5))
    assert isinstance(env, ParallelPettingZooEnv)
    ep = play(env, 0)
    assert (len(ep), ep.agent_steps(), ep.is_truncated, ep.is_terminated) == (5, 10, True, False)
    assert all(sa.is_truncated and not sa.is_terminated for sa in ep.agent_episodes.values())


def test_simple_spread_samples_three_agents_to_max_cycles() -> None:
    env = wrap_pettingzoo(simple_spread_v3.parallel_env(N=3, max_cycles=25))
    ep = play(env, 1)
    assert (len(ep), ep.agent_steps(), ep.is_truncated) == (25, 75, True)
    assert ep.agent_episodes["agent_0"].get_observations(0).shape == (18,)


def test_other_envs_pass_through() -> None:
    from tests.ray_sampler.ma_envs import TurnTakingEnv

    env = TurnTakingEnv()
    assert wrap_pettingzoo(env) is env


class TestNames:
    """The env names of multi-agent envs: ``ma-<gymnasium id>:<N>`` and ``pettingzoo:<module>``."""

    def test_ma_copies_of_a_gymnasium_env(self) -> None:
        env = resolve_creator("ma-cartpole:3")({})
        assert env.possible_agents == [0, 1, 2] and env.get_observation_space(2).shape == (4,)
        assert resolve_creator("ma-Acrobot-v1:2")({}).get_action_space(1).n == 3

    @pytest.mark.parametrize(
        ("name", "message"),
        [
            ("ma-cartpol:2", "'env' 'ma-cartpol:2': 'cartpol' is not a gymnasium id; did you mean 'cartpole'?"),
            ("ma-cartpole:x", "the multi-agent form is 'ma-<gymnasium id>:<number of agents>', e.g. 'ma-cartpole:2'"),
            ("ma-cartpole:0", "the multi-agent form is 'ma-<gymnasium id>:<number of agents>'"),
            ("pettingzoo:nope_v1",
             "'env' 'pettingzoo:nope_v1': no such module (looked for nope_v1, pettingzoo.nope_v1, pettingzoo.classic"),
        ],
    )  # fmt: skip
    def test_bad_names_are_one_line(self, name: str, message: str) -> None:
        with pytest.raises(EnvCreatorError) as e:
            resolve_creator(name)
        assert message in str(e.value) and "\n" not in str(e.value)

    @pytest.mark.parametrize(
        "name", ["classic.tictactoe_v3", "tictactoe_v3", "mpe2.simple_spread_v3", "simple_spread_v3"]
    )
    def test_pettingzoo_modules_by_path_or_short_name(self, name: str) -> None:
        from ray_sampler.sampling.env_creator import resolve_creator

        env = wrap_pettingzoo(resolve_creator(f"pettingzoo:{name}")({"worker_index": 0, "vector_index": 0}))
        assert len(env.possible_agents) in (2, 3)
        env.close()


class _Totals:
    """An AEC env that keeps PettingZoo's own account of each game: every agent's rewards summed over
    every ``step`` (the per-step ``rewards`` that ``last()`` accumulates), one dict per game."""

    def __init__(self, env: Any) -> None:
        self.env, self.games = env, []

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        self.games.append(dict.fromkeys(self.env.possible_agents, 0.0))
        return self.env.reset(*args, **kwargs)

    def step(self, action: Any) -> None:
        self.env.step(action)
        for agent, reward in self.env.rewards.items():
            self.games[-1][agent] += float(reward)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


class _CountingPettingZooEnv(PettingZooEnv):
    """The AEC adapter over ``_Totals``; the creator keeps it so the test can read the games."""

    built: list[_Totals] = []  # noqa: RUF012  # the test's record of what the creator built

    def __init__(self, env: Any) -> None:
        totals = _Totals(env)
        _CountingPettingZooEnv.built.append(totals)
        super().__init__(totals)


CLASSIC = {  # name: (creator kwargs, games): games of random legal moves, a few of the long ones
    "chess_v6": ({}, 2),
    "connect_four_v3": ({}, 20),
    "go_v5": ({"board_size": 5, "komi": 0.5}, 5),
    "hanabi_v5": ({"players": 2, "hand_size": 5, "max_life_tokens": 1}, 10),
    "leduc_holdem_v4": ({}, 60),
    "rps_v2": ({"num_actions": 3, "max_cycles": 5}, 20),
    "texas_holdem_v4": ({}, 60),
    "texas_holdem_no_limit_v6": ({}, 60),
    "tictactoe_v3": ({}, 30),
}


@pytest.mark.parametrize("name", sorted(CLASSIC))
def test_every_reward_a_classic_game_gives_is_in_the_returns(name: str) -> None:
    """PettingZoo's own totals per agent, game by game, equal the runner's per-agent returns; their
    sum is the episode's return (0 in a zero-sum game). A poker player whose opponent folds at once
    wins without ever acting: its reward still counts."""
    import importlib

    from ray_sampler.modules import RandomModule
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner

    module = importlib.import_module(f"pettingzoo.classic.{name}")
    kwargs, games = CLASSIC[name]
    _CountingPettingZooEnv.built.clear()

    def creator(cfg: dict[str, Any]) -> Any:
        return _CountingPettingZooEnv(module.env(**kwargs))

    runner = MultiAgentEnvRunner(EnvRunnerConfig(env=creator, seed=0, module_class=RandomModule))
    runner.sample(num_episodes=games, random_actions=True)
    metrics = runner.get_metrics()
    (totals,) = _CountingPettingZooEnv.built
    played = totals.games[:games]  # the runner has started the next game
    for agent in totals.env.possible_agents:
        assert metrics.agent_episode_returns[agent] == pytest.approx([g[agent] for g in played], abs=1e-9), agent
    assert metrics.episode_returns == pytest.approx([sum(g.values()) for g in played], abs=1e-9)
