"""MultiAgentEpisode built from per-env-step data, and sliced: RLlib's documented rules, and ours where they differ."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import EpisodeError
from tests.ray_sampler.data.test_multi_agent_episode import record, turn_based
from tests.ray_sampler.ma_envs import assert_same_episode

# RLlib's slicing example: a0 skips env steps 1 and 2, a1 acts at env step 3 and gets no observation at 4.
OBS = [{"a0": 0, "a1": 0}, {"a1": 1}, {"a1": 2}, {"a0": 3, "a1": 3}, {"a0": 4}]
ACTIONS = OBS[:-1]
REWARDS = [{aid: o / 10 + 0.1 for aid, o in step.items()} for step in OBS[:-1]]


def gappy(**kwargs: object) -> MultiAgentEpisode:
    return MultiAgentEpisode("g", observations=OBS, actions=ACTIONS, rewards=REWARDS, **kwargs)  # type: ignore[arg-type]


class TestFromData:
    def test_default_lookback_is_zero_so_the_data_is_the_episode(self) -> None:
        ep = gappy()
        assert (ep.env_t_started, ep.env_t, len(ep), ep.env_steps(), ep.len_lookback_buffer) == (0, 4, 4, 4, 0)
        assert ep.agent_steps() == 5  # a0: 0->3, 3->4; a1: 0->1, 1->2, 2->3
        assert ep.get_return() == pytest.approx(0.1 + 0.4 + 0.1 + 0.2 + 0.3)
        assert ep.get_return(include_hanging_rewards=True) == pytest.approx(1.1 + 0.4)  # a1's hanging 0.4

    def test_auto_makes_every_step_lookback(self) -> None:
        ep = gappy(len_lookback_buffer="auto")
        assert (ep.env_t_started, ep.env_t, len(ep), ep.len_lookback_buffer) == (0, 0, 0, 4)
        assert (ep.agent_steps(), ep.get_return()) == (0, 0.0)
        assert ep.get_observations(-1, neg_index_as_lookback=True) == {"a0": 3, "a1": 3}
        assert ep.get_observations(0) == {"a0": 4}

    def test_env_t_started_is_where_the_chunk_starts_after_its_lookback(self) -> None:
        ep = gappy(len_lookback_buffer=2, env_t_started=10)
        assert (ep.env_t_started, ep.env_t, len(ep), ep.len_lookback_buffer) == (10, 12, 2, 2)
        assert ep.get_observations() == {"a0": [3, 4], "a1": [2, 3]}
        assert ep.get_observations(-2, neg_index_as_lookback=True) == {"a0": 0, "a1": 0}

    def test_a_lookback_longer_than_the_data_is_clipped(self) -> None:
        ep = gappy(len_lookback_buffer=10)
        assert (len(ep), ep.len_lookback_buffer) == (0, 4)

    def test_agent_t_started_sets_each_agents_own_clock(self) -> None:
        ep = gappy(agent_t_started={"a0": 5, "a1": 7, "never_seen": 3})
        assert ep.agent_t_started == {"a0": 5, "a1": 7}
        assert (ep.agent_episodes["a0"].t, ep.agent_episodes["a1"].t) == (7, 10)
        assert ep.env_t_to_agent_t["a0"].tolist() == [5, -1, -1, 6, 7]

    def test_agents_start_at_timestep_0_without_lookback(self) -> None:
        assert gappy().agent_t_started == {"a0": 0, "a1": 0}

    def test_agent_t_started_defaults_to_the_agents_steps_before_the_chunk(self) -> None:
        """RLlib starts every agent at 0, so its lookback steps get negative timesteps."""
        assert gappy(len_lookback_buffer=2).agent_t_started == {"a0": 0, "a1": 2}

    def test_agent_t_started_below_the_agents_lookback_is_refused(self) -> None:
        with pytest.raises(EpisodeError, match=r"'agent_t_started\['a1'\]' must be at least the agent's 2 lookback"):
            gappy(len_lookback_buffer=2, agent_t_started={"a1": 1})

    def test_a_step_belongs_to_the_chunk_where_its_next_observation_arrives(self) -> None:
        """RLlib puts a0's step 0->3 into the lookback (env step 0 < 2) and so into no chunk."""
        ep = gappy(len_lookback_buffer=2)
        assert ep.agent_episodes["a0"].get_actions() == [0, 3] and ep.agent_steps() == 3
        assert ep.get_return() == pytest.approx(0.1 + 0.4 + 0.3)

    def test_an_agent_with_no_action_while_steps_follow_is_terminated_there(self) -> None:
        ep = MultiAgentEpisode(
            observations=[{"a": 0, "b": 0}, {"a": 1, "b": 1}, {"a": 2}],
            actions=[{"a": 0, "b": 0}, {"a": 1}],
            rewards=[{"a": 1.0, "b": 1.0}, {"a": 1.0}],
        )
        b = ep.agent_episodes["b"]
        assert (b.get_observations(), len(b), b.is_terminated, b.is_truncated) == ([0, 1], 1, True, False)
        assert ep.get_agents_to_act() == {"a"}

    def test_truncateds_say_which_ended_agents_were_truncated(self) -> None:
        ep = MultiAgentEpisode(
            observations=[{"a": 0, "b": 0}, {"a": 1, "b": 1}, {"a": 2}],
            actions=[{"a": 0, "b": 0}, {"a": 1}],
            rewards=[{"a": 1.0, "b": 1.0}, {"a": 1.0}],
            truncateds={"b": True},
        )
        b = ep.agent_episodes["b"]
        assert (b.is_terminated, b.is_truncated, ep.is_done) == (False, True, False)

    def test_an_agent_whose_only_observation_ends_it_is_left_out(self) -> None:
        ep = MultiAgentEpisode(observations=[{"a": 0, "c": 0}, {"a": 1}], actions=[{"a": 0}], rewards=[{"a": 1.0}])
        assert ep.agent_ids == ["a"]

    def test_final_flags_end_the_episode(self) -> None:
        ep = gappy(terminateds={"__all__": True})
        assert (ep.is_terminated, ep.is_truncated, ep.agent_episodes["a0"].is_terminated) == (True, False, True)

    def test_a_final_time_limit_truncates_every_running_agent(self) -> None:
        ep = MultiAgentEpisode(
            observations=[{"a": 0, "b": 0}, {"a": 1, "b": 1}], actions=[{"a": 0, "b": 0}], rewards=[{}], truncateds=True
        )
        assert (ep.is_truncated, ep.is_terminated) == (True, False)
        assert [ep.agent_episodes[a].is_truncated for a in ("a", "b")] == [True, True]
        # RLlib's get_truncateds() reports is_terminated under "__all__"; ours the episode's truncation.
        assert ep.get_truncateds() == {"a": True, "b": True, "__all__": True}
        assert ep.get_terminateds() == {"a": False, "b": False, "__all__": False}

    def test_lists_of_the_wrong_length_are_refused(self) -> None:
        with pytest.raises(EpisodeError, match=r"'actions' and 'rewards' must hold one dict per env step"):
            MultiAgentEpisode(observations=OBS, actions=ACTIONS[:-1], rewards=REWARDS)

    def test_a_lookback_that_is_neither_auto_nor_an_int_is_refused(self) -> None:
        with pytest.raises(EpisodeError, match=r"'len_lookback_buffer' must be 'auto' or an int >= 0 \(got 'all'\)"):
            gappy(len_lookback_buffer="all")

    def test_a_done_episode_cannot_be_all_lookback(self) -> None:
        with pytest.raises(EpisodeError, match="a done episode cannot be all lookback"):
            gappy(len_lookback_buffer="auto", terminateds=True)


class TestSlice:
    def test_an_agent_starts_at_its_first_observation_inside_the_slice(self) -> None:
        s = gappy()[1:3]
        a0, a1 = s.agent_episodes["a0"], s.agent_episodes["a1"]
        assert (a0.get_observations(), a1.get_observations()) == ([3], [1, 2, 3])
        assert (a0.get_actions(), a1.get_actions()) == ([], [1, 2])
        assert a1.get_rewards() == pytest.approx([0.2, 0.3])
        assert (a0.is_done, a1.is_done, s.env_t_started, len(s)) == (False, False, 1, 2)

    def test_a_slice_ending_in_a_gap_leaves_the_action_hanging(self) -> None:
        s = gappy()[:2]
        a0 = s.agent_episodes["a0"]
        assert (a0.get_observations(), a0.get_actions(), s.get_hanging_action("a0")) == ([0], [], 0)
        assert s.get_rewards(0)["a0"] == pytest.approx(0.1)  # its reward so far
        assert s.get_return(include_hanging_rewards=True) == pytest.approx(0.1 + 0.2 + 0.1)

    def test_each_agent_keeps_its_own_timesteps(self) -> None:
        assert gappy()[1:3].agent_t_started == {"a0": 1, "a1": 1}

    def test_negative_bounds_count_from_the_end(self) -> None:
        s = gappy()[-2:]
        assert (s.env_t_started, len(s)) == (2, 2)
        assert s.get_observations() == {"a0": [3, 4], "a1": [2, 3]}
        assert s.get_hanging_action("a1") == 3

    def test_len_lookback_buffer_takes_env_steps_before_the_start(self) -> None:
        s = gappy().slice(slice(2, 4), len_lookback_buffer=1)
        assert (s.len_lookback_buffer, s.env_t_started, len(s)) == (1, 2, 2)
        assert s.get_observations(-1, neg_index_as_lookback=True) == {"a1": 1}

    def test_the_lookback_defaults_to_the_chunks_own(self) -> None:
        s = gappy(len_lookback_buffer=2)[0:1]
        assert (s.len_lookback_buffer, s.env_t_started, len(s)) == (2, 0, 1)
        assert s.get_observations(-1, neg_index_as_lookback=True) == {"a1": 1}

    def test_a_slice_reaching_the_end_keeps_the_flags(self) -> None:
        ep = gappy(terminateds={"__all__": True})
        assert (ep[2:].is_terminated, ep[2:4].agent_episodes["a0"].is_terminated) == (True, True)
        assert (ep[1:3].is_done, ep[1:3].agent_episodes["a0"].is_done) == (False, False)

    def test_an_agent_done_inside_the_slice_stays_done(self) -> None:
        ep = MultiAgentEpisode(
            observations=[{"a": 0, "b": 0}, {"a": 1, "b": 1}, {"a": 2}, {"a": 3}],
            actions=[{"a": 0, "b": 0}, {"a": 1}, {"a": 2}],
            rewards=[{"a": 1.0, "b": 1.0}, {"a": 1.0}, {"a": 1.0}],
            truncateds={"b": True},
        )
        assert ep[:1].agent_episodes["b"].is_truncated and not ep[:1].is_done  # its last observation is at 1
        assert not ep[:0].agent_episodes["b"].is_done  # it ends after the slice

    def test_the_whole_slice_is_the_episode(self) -> None:
        ep = turn_based()
        assert_same_episode(ep[:], ep)

    def test_a_numpy_episode_gives_numpy_slices(self) -> None:
        s = gappy().to_numpy()[1:3]
        assert s.is_numpy and np.array_equal(s.agent_episodes["a1"].get_actions(), [1, 2])

    def test_a_step_other_than_one_is_refused(self) -> None:
        with pytest.raises(ValueError, match="episode slices take step 1"):
            gappy()[::2]

    def test_indexing_takes_only_slices(self) -> None:
        with pytest.raises(TypeError, match=r"episode\[\.\.\.\] takes a slice"):
            gappy()[0]  # type: ignore[index]


class TestCounts:
    def test_cut_and_concat_keep_the_counts(self) -> None:
        ep = gappy()[:3]
        cont = ep.cut()
        assert (len(cont), cont.env_t_started, cont.agent_steps(), cont.get_return()) == (0, 3, 0, 0.0)
        cont.add_env_step({"a0": 4}, {"a0": 3, "a1": 3}, {"a0": 0.4, "a1": 0.4})
        ep.concat_episode(cont)
        whole = gappy()
        assert (len(ep), ep.env_steps(), ep.agent_steps()) == (4, 4, 5)
        assert ep.get_return() == pytest.approx(whole.get_return())


@pytest.mark.parametrize("seed", range(15))
def test_slices_of_random_schedules_hold_the_episodes_env_steps(seed: int) -> None:
    """Every slice validates and holds the episode's actions and rewards at each of its env steps,
    and its observations, less those of agents whose only one in the slice is their last (RLlib drops them)."""
    whole, _ = record(seed, cut_every=[1000], lookbacks=[0], max_steps=25)
    rng = np.random.default_rng(seed)
    for _ in range(4):
        a = int(rng.integers(0, len(whole) + 1))
        b = int(rng.integers(a, len(whole) + 1))
        s = whole[a:b]
        s.validate()
        assert (s.env_t_started, len(s)) == (a, b - a)
        for name, window in (("get_actions", slice(a, b)), ("get_rewards", slice(a, b)), ("get_observations", None)):
            got = getattr(s, name)(return_list=True)
            want = getattr(whole, name)(window or slice(a, b + 1), return_list=True)
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert all(np.array_equal(g[k], w[k]) for k in g) and g.keys() <= w.keys()
                for aid in w.keys() - g.keys():
                    sa = whole.agent_episodes[aid]
                    seen = [p for p in range(a, b + 1) if whole.get_observations(p, aid)]
                    assert sa.is_done and len(seen) == 1, (aid, name)
