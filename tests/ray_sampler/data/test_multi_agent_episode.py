"""MultiAgentEpisode: turn-based steps, hanging actions and rewards, truncation, cut/concat, state, errors."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.multi_agent_episode import SKIP_ENV_TS, MultiAgentEpisode
from ray_sampler.errors import EpisodeError, MultiAgentEnvError
from tests.ray_sampler.ma_envs import RandomScheduleEnv, TurnTakingEnv, assert_same_episode

GOING = {"__all__": False}


def turn_based() -> MultiAgentEpisode:
    """p0 and p1 take turns for 4 env steps; rewards go to the mover and, at step 3, to p0 while it waits."""
    ep = MultiAgentEpisode("e")
    ep.add_env_reset(observations={"p0": 0})
    ep.add_env_step({"p1": 1}, {"p0": 10}, {"p0": 1.0}, terminateds=GOING, truncateds=GOING)
    ep.add_env_step({"p0": 2}, {"p1": 11}, {"p1": 2.0}, terminateds=GOING, truncateds=GOING)
    ep.add_env_step({"p1": 3}, {"p0": 12}, {"p0": 3.0}, terminateds=GOING, truncateds=GOING)
    ep.add_env_step({"p0": 4}, {"p1": 13}, {"p1": 4.0, "p0": 0.5}, terminateds=GOING, truncateds=GOING)
    return ep


class TestSteps:
    def test_turn_based_steps_complete_at_the_next_observation(self) -> None:
        ep = turn_based()
        p0, p1 = ep.agent_episodes["p0"], ep.agent_episodes["p1"]
        assert p0.get_observations() == [0, 2, 4] and p0.get_actions() == [10, 12]
        assert p0.get_rewards() == [1.0, 3.5]  # the reward that came while it waited is summed in
        assert p1.get_observations() == [1, 3] and p1.get_actions() == [11]
        assert ep.get_hanging_action("p1") == 13
        assert ep.env_t_to_agent_t["p0"].tolist() == [0, SKIP_ENV_TS, 1, SKIP_ENV_TS, 2]
        assert ep.env_t_to_agent_t["p1"].tolist() == [SKIP_ENV_TS, 0, SKIP_ENV_TS, 1, SKIP_ENV_TS]
        assert (ep.env_steps(), ep.agent_steps(), ep.get_agents_to_act()) == (4, 3, {"p0"})
        assert ep.get_return() == 1.0 + 3.5 + 2.0
        assert ep.get_return(include_hanging_rewards=True) == 1.0 + 3.5 + 2.0 + 4.0

    def test_rewards_before_the_first_observation_are_kept_apart(self) -> None:
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations={"a": 0})
        ep.add_env_step({"a": 1}, {"a": 0}, {"a": 1.0, "b": 5.0}, terminateds=GOING, truncateds=GOING)
        ep.add_env_step({"a": 2, "b": 7}, {"a": 0}, {"a": 1.0, "b": 1.0}, terminateds=GOING, truncateds=GOING)
        assert ep.agent_episodes["b"].get_observations() == [7] and len(ep.agent_episodes["b"]) == 0
        assert ep.get_return() == 2.0
        assert ep.get_return(include_hanging_rewards=True) == 8.0

    def test_time_limit_truncates_episode_and_agents_never_terminates(self) -> None:
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations={"a": 0, "b": 0})
        ep.add_env_step(
            {"a": 1, "b": 1}, {"a": 0, "b": 0}, {"a": 1.0, "b": 1.0},
            terminateds={"__all__": False}, truncateds={"__all__": True, "a": True, "b": True},
        )  # fmt: skip
        assert (ep.is_truncated, ep.is_terminated) == (True, False)
        for sa in ep.agent_episodes.values():
            assert (sa.is_truncated, sa.is_terminated) == (True, False)

    def test_time_limit_with_both_all_flags_set_is_a_truncation(self) -> None:
        """RLlib's own make_multi_agent sets both "__all__" flags at a time limit."""
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations={"a": 0})
        ep.add_env_step({"a": 1}, {"a": 0}, {"a": 1.0}, terminateds={"__all__": True}, truncateds={"__all__": True})
        assert (ep.is_truncated, ep.is_terminated) == (True, False)
        assert (ep.agent_episodes["a"].is_truncated, ep.agent_episodes["a"].is_terminated) == (True, False)

    def test_agent_flags_win_over_all(self) -> None:
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations={"a": 0, "b": 0})
        ep.add_env_step(
            {"a": 1, "b": 1}, {"a": 0, "b": 0}, {},
            terminateds={"__all__": False, "a": True}, truncateds={"__all__": True},
        )  # fmt: skip
        assert ep.agent_episodes["a"].is_terminated and not ep.agent_episodes["a"].is_truncated
        assert ep.agent_episodes["b"].is_truncated and not ep.agent_episodes["b"].is_terminated

    def test_game_end_completes_a_hanging_step_on_the_last_observation(self) -> None:
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations={"p0": 0})
        ep.add_env_step({"p1": 1}, {"p0": 5}, {"p0": 1.0}, terminateds=GOING, truncateds=GOING)
        ep.add_env_step({}, {"p1": 6}, {"p1": 1.0, "p0": -1.0}, terminateds={"__all__": True}, truncateds=GOING)
        p0 = ep.agent_episodes["p0"]
        assert p0.get_observations() == [0, 0] and p0.get_actions() == [5] and p0.get_rewards() == [0.0]
        assert p0.is_terminated and ep.is_terminated and not ep.is_truncated

    def test_turn_taking_env_records_each_players_moves(self) -> None:
        env = TurnTakingEnv({"length": 5})
        obs, infos = env.reset()
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations=obs, infos=infos)
        while not ep.is_done:
            actions = {a: 1 for a in ep.get_agents_to_act()}
            obs, rew, term, trunc, infos = env.step(actions)
            ep.add_env_step(obs, actions, rew, infos, terminateds=term, truncateds=trunc)
        assert [len(ep.agent_episodes[a]) for a in ("p0", "p1")] == [3, 2]
        assert ep.get_return() == 5.0 and ep.is_terminated


class TestErrors:
    def test_action_for_agent_without_observation_names_agent_and_step(self) -> None:
        ep = turn_based()
        with pytest.raises(MultiAgentEnvError, match=r"action for agent 'p1' at env step 4: it got no observation"):
            ep.add_env_step({}, {"p0": 1, "p1": 1}, {}, terminateds=GOING, truncateds=GOING)

    def test_missing_action_for_agent_to_act(self) -> None:
        ep = turn_based()
        with pytest.raises(MultiAgentEnvError, match=r"no action for agent 'p0' at env step 4"):
            ep.add_env_step({}, {}, {}, terminateds=GOING, truncateds=GOING)

    def test_observation_for_done_agent(self) -> None:
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations={"a": 0, "b": 0})
        ep.add_env_step({"a": 1, "b": 1}, {"a": 0, "b": 0}, {}, terminateds={"__all__": False, "a": True},
                        truncateds=GOING)  # fmt: skip
        with pytest.raises(
            MultiAgentEnvError, match=r"an observation for agent 'a' at env step 2, which is already done"
        ):
            ep.add_env_step({"a": 2, "b": 2}, {"b": 0}, {}, terminateds=GOING, truncateds=GOING)

    def test_truncation_without_a_last_observation_is_refused_unchanged(self) -> None:
        ep = turn_based()
        state = ep.get_state()
        with pytest.raises(MultiAgentEnvError, match=r"agent 'p1' was truncated at env step 5 without a last obs"):
            ep.add_env_step({"p0": 5}, {"p0": 1}, {}, terminateds=GOING, truncateds={"__all__": True})
        assert_same_episode(ep, MultiAgentEpisode.from_state(state))

    def test_cut_of_done_episode(self) -> None:
        ep = MultiAgentEpisode()
        ep.add_env_reset(observations={"a": 0})
        ep.add_env_step({"a": 1}, {"a": 0}, {}, terminateds={"__all__": True}, truncateds=GOING)
        with pytest.raises(EpisodeError, match="is done"):
            ep.cut()


class TestChunks:
    def test_cut_keeps_hanging_agents_last_observation_and_carries_its_action(self) -> None:
        ep = turn_based()
        cont = ep.cut(len_lookback_buffer=1)
        assert (cont.env_t_started, len(cont), cont.len_lookback_buffer) == (4, 0, 1)
        assert cont.get_hanging_action("p1") == 13
        assert cont.agent_episodes["p1"].get_observations(-1) == 3  # older than the 1-step lookback
        assert cont.env_t_to_agent_t["p1"].tolist() == [1, SKIP_ENV_TS]
        cont.add_env_step({"p1": 5}, {"p0": 14}, {"p1": 1.0}, terminateds=GOING, truncateds=GOING)
        assert cont.agent_episodes["p1"].get_rewards() == [5.0]  # 4.0 while waiting + 1.0
        ep.concat_episode(cont)
        assert ep.agent_episodes["p1"].get_actions() == [11, 13]
        assert ep.get_return() == 1.0 + 3.5 + 2.0 + 5.0

    def test_lookback_covers_the_last_h_env_steps(self) -> None:
        ep = turn_based()
        cont = ep.cut(len_lookback_buffer=3)
        assert cont.get_observations(-1, neg_index_as_lookback=True) == {"p1": 3}
        assert cont.get_observations(-2, neg_index_as_lookback=True) == {"p0": 2}
        assert cont.get_observations(0) == {"p0": 4}
        assert cont.get_actions(-1, neg_index_as_lookback=True) == {"p1": 13}
        cont.validate()

    def test_agent_lookback_keeps_each_agents_own_steps_beyond_the_env_lookback(self) -> None:
        ep = turn_based()
        cont = ep.cut(len_lookback_buffer=1, agent_lookback=2)
        p0, p1 = cont.agent_episodes["p0"], cont.agent_episodes["p1"]
        assert (p0.len_lookback_buffer, p1.len_lookback_buffer) == (2, 1)  # p1 has made only 1 step
        assert p0.get_observations(slice(-3, None), neg_index_as_lookback=False) == [0, 2, 4]
        assert p0.get_actions(slice(0, None)) == [] and cont.len_lookback_buffer == 1
        assert cont.env_t_to_agent_t["p0"].tolist() == [SKIP_ENV_TS, 2]  # the env-step map keeps its 1 step
        cont.validate()
        cont.add_env_step({"p1": 5}, {"p0": 14}, {"p1": 1.0}, terminateds=GOING, truncateds=GOING)
        cont.add_env_step({"p0": 6}, {"p1": 15}, {}, terminateds=GOING, truncateds=GOING)
        ep.concat_episode(cont)
        assert ep.agent_episodes["p0"].get_actions() == [10, 12, 14]
        assert ep.agent_episodes["p0"].get_observations() == [0, 2, 4, 6]
        with pytest.raises(EpisodeError, match="'agent_lookback' must be"):
            turn_based().cut(agent_lookback=-1)

    def test_constructor_replays_lists_with_lookback(self) -> None:
        ep = turn_based()
        made = MultiAgentEpisode(
            "e",
            observations=[{"p0": 0}, {"p1": 1}, {"p0": 2}, {"p1": 3}, {"p0": 4}],
            actions=[{"p0": 10}, {"p1": 11}, {"p0": 12}, {"p1": 13}],
            rewards=[{"p0": 1.0}, {"p1": 2.0}, {"p0": 3.0}, {"p1": 4.0, "p0": 0.5}],
            env_t_started=2,
            len_lookback_buffer=2,
        )
        assert (made.env_t_started, len(made), made.len_lookback_buffer) == (2, 2, 2)
        want = MultiAgentEpisode("e")  # the same steps recorded, cut at env step 2 with 2 steps of lookback
        want.add_env_reset(observations={"p0": 0})
        want.add_env_step({"p1": 1}, {"p0": 10}, {"p0": 1.0}, terminateds=GOING, truncateds=GOING)
        want.add_env_step({"p0": 2}, {"p1": 11}, {"p1": 2.0}, terminateds=GOING, truncateds=GOING)
        want = want.cut(len_lookback_buffer=2)
        want.add_env_step({"p1": 3}, {"p0": 12}, {"p0": 3.0}, terminateds=GOING, truncateds=GOING)
        want.add_env_step({"p0": 4}, {"p1": 13}, {"p1": 4.0, "p0": 0.5}, terminateds=GOING, truncateds=GOING)
        assert_same_episode(made, want)
        assert made.agent_episodes["p0"].get_observations() == [2, 4]
        assert made.agent_episodes["p0"].get_rewards() == [3.5]
        assert made.get_return() == ep.get_return() - 1.0  # p1's first step ends at env step 3, in the chunk

    def test_getters_by_env_step_and_by_agent_step(self) -> None:
        ep = turn_based()
        assert ep.get_observations(2) == {"p0": 2}
        assert ep.get_observations(slice(0, 3)) == {"p0": [0, 2], "p1": [1]}
        assert ep.get_observations([0, 1], fill=-9) == {"p0": [0, -9], "p1": [-9, 1]}
        assert ep.get_observations(slice(0, 2), return_list=True) == [{"p0": 0}, {"p1": 1}]
        assert ep.get_actions(-1) == {"p1": 13}  # the hanging action, taken at env step 3
        assert ep.get_rewards(0) == {"p0": 1.0}  # at the env step p0 acted, as RLlib
        assert ep.get_rewards(-1) == {"p1": 4.0}  # p1's hanging reward so far
        assert ep.get_observations(-1, env_steps=False) == {"p0": 4, "p1": 3}
        with pytest.raises(ValueError, match="return_list=True needs env_steps=True"):
            ep.get_observations(env_steps=False, return_list=True)

    def test_state_round_trip_and_validate_catches_a_bad_map(self) -> None:
        ep = turn_based()
        back = MultiAgentEpisode.from_state(ep.get_state())
        assert_same_episode(back, ep)
        state = ep.get_state()
        state["env_t_to_agent_t"]["p0"][2] = SKIP_ENV_TS
        with pytest.raises(EpisodeError, match="agent 'p0'"):
            MultiAgentEpisode.from_state(state)

    def test_concat_refuses_a_gap_and_a_foreign_chunk(self) -> None:
        ep = turn_based()
        cont = ep.cut()
        cont.add_env_step({"p1": 5}, {"p0": 14}, {}, terminateds=GOING, truncateds=GOING)
        later = cont.cut()
        with pytest.raises(EpisodeError, match="env_t_started"):
            ep.concat_episode(later)
        with pytest.raises(EpisodeError, match="'id_' differs"):
            ep.concat_episode(MultiAgentEpisode("other", env_t_started=4))

    def test_module_mapping_is_decided_once_per_agent_and_carried_by_cut(self) -> None:
        calls: list[str] = []

        def mapping(aid: str, episode: MultiAgentEpisode) -> str:
            calls.append(aid)
            return f"m_{aid}"

        ep = MultiAgentEpisode(agent_to_module_mapping_fn=mapping)
        ep.add_env_reset(observations={"a": 0})
        cont = ep.cut()
        assert (cont.module_for("a"), calls) == ("m_a", ["a"])


def record(seed: int, *, cut_every: list[int], lookbacks: list[int], max_steps: int = 40, **env_config: float) -> tuple:
    """One episode of RandomScheduleEnv recorded whole, and again as chunks cut at the given lengths."""
    env = RandomScheduleEnv({"num_agents": 4, "max_steps": max_steps, **env_config})
    rng = np.random.default_rng(seed + 1000)
    obs, infos = env.reset(seed=seed)
    whole = MultiAgentEpisode("ep")
    chunk = MultiAgentEpisode("ep")
    for e in (whole, chunk):
        e.add_env_reset(observations=obs, infos=infos)
    chunks, k = [], 0
    while not whole.is_done:
        actions = {a: int(rng.integers(3)) for a in whole.get_agents_to_act()}
        obs, rew, term, trunc, infos = env.step(actions)
        for e in (whole, chunk):
            e.add_env_step(obs, actions, rew, infos, terminateds=term, truncateds=trunc)
        if not chunk.is_done and len(chunk) >= cut_every[k % len(cut_every)]:
            nxt = chunk.cut(len_lookback_buffer=lookbacks[k % len(lookbacks)])
            chunks.append(chunk)
            chunk, k = nxt, k + 1
    chunks.append(chunk)
    return whole, chunks


@pytest.mark.parametrize("seed", range(60))
def test_random_schedules_cut_and_concat_give_back_the_whole_episode(seed: int) -> None:
    rng = np.random.default_rng(seed)
    whole, chunks = record(
        seed,
        cut_every=[int(x) for x in rng.integers(1, 8, 5)],
        lookbacks=[int(x) for x in rng.integers(0, 5, 5)],
        max_steps=int(rng.integers(5, 40)),  # about half the episodes end at the time limit
    )
    for c in chunks:
        c.validate()
        MultiAgentEpisode.from_state(c.get_state())  # every chunk round-trips and validates
    assert sum(len(c) for c in chunks) == len(whole)
    assert sum(c.agent_steps() for c in chunks) == whole.agent_steps()
    assert sum(c.get_return() for c in chunks) == pytest.approx(
        whole.get_return(), rel=1e-12
    )  # summed in another order
    joined = MultiAgentEpisode.from_state(chunks[0].get_state())
    for c in chunks[1:]:
        joined.concat_episode(c)
    whole.validate()
    assert_same_episode(joined, whole)
    assert not (whole.is_terminated and whole.is_truncated)


@pytest.mark.parametrize("seed", range(20))
def test_the_fast_path_for_full_steps_records_what_the_full_path_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps where every agent to act acts and gets its next observation take a fast path."""
    kwargs: dict = {"cut_every": [3, 5], "lookbacks": [2, 0], "max_steps": 30, "p_obs": 0.9, "p_join": 0.6}
    fast, fast_chunks = record(seed, **kwargs)
    taken = []
    full_step = MultiAgentEpisode._is_full_step  # noqa: SLF001

    def count(self: MultiAgentEpisode, *args: object) -> bool:
        taken.append(full_step(self, *args))
        return False

    monkeypatch.setattr(MultiAgentEpisode, "_is_full_step", count)
    slow, slow_chunks = record(seed, **kwargs)
    assert any(taken)  # the fast path would have been taken
    assert_same_episode(fast, slow)
    for f, s in zip(fast_chunks, slow_chunks, strict=True):
        assert_same_episode(f, s)
