"""MultiAgentEpisode getters by env step: RLlib's documented index rules, per-agent answers, fill and return_list."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from tests.ray_sampler.data.test_multi_agent_episode_slicing import gappy


def one_agent(observations: list[int], lookback: int) -> MultiAgentEpisode:
    """Agent "A" observes every env step; its actions and rewards equal the observation acted on."""
    return MultiAgentEpisode(
        observations=[{"A": o} for o in observations],
        actions=[{"A": o} for o in observations[:-1]],
        rewards=[{"A": float(o)} for o in observations[:-1]],
        extra_model_outputs=[{"A": {"logp": -o}} for o in observations[:-1]],
        len_lookback_buffer=lookback,
    )


class TestIndices:
    def test_neg_index_as_lookback_counts_back_from_env_step_0(self) -> None:
        ep = one_agent([4, 5, 6, 7, 8, 9], lookback=3)
        assert ep.get_observations(-1, "A", neg_index_as_lookback=True) == {"A": 6}
        assert ep.get_observations(slice(-2, 1), "A", neg_index_as_lookback=True) == {"A": [5, 6, 7]}

    def test_fill_pads_positions_before_the_lookback(self) -> None:
        ep = one_agent([10, 11, 12, 13, 14], lookback=2)
        assert ep.get_observations(slice(-7, -2), "A", fill=0.0) == {"A": [0.0, 0.0, 10, 11, 12]}
        assert ep.get_actions(slice(-4, None), "A", neg_index_as_lookback=True, fill=-1) == {
            "A": [-1, -1, 10, 11, 12, 13]
        }

    def test_a_negative_index_runs_from_the_end_into_the_lookback(self) -> None:
        ep = one_agent([4, 5, 6, 7, 8, 9], lookback=3)
        assert (ep.get_observations(-1), ep.get_observations(-4), ep.get_observations(-6)) == (
            {"A": 9},
            {"A": 6},
            {"A": 4},
        )

    @pytest.mark.parametrize(
        ("index", "nal"),
        [(3, False), (-7, False), (-4, True), ([0, 5], False)],
        ids=["past-end", "before-lookback", "nal-before-lookback", "list"],
    )
    def test_an_index_outside_lookback_and_chunk_raises(self, index: int | list[int], nal: bool) -> None:
        ep = one_agent([4, 5, 6, 7, 8, 9], lookback=3)
        with pytest.raises(IndexError, match=r"reaches outside the 3 lookback and 3 chunk entries; pass fill="):
            ep.get_observations(index, neg_index_as_lookback=nal)

    def test_actions_have_one_env_step_fewer_than_observations(self) -> None:
        ep = one_agent([4, 5, 6, 7, 8, 9], lookback=3)
        assert ep.get_actions(-1) == {"A": 8}
        with pytest.raises(IndexError, match="reaches outside the 3 lookback and 2 chunk entries"):
            ep.get_actions(2)

    def test_a_numpy_episode_raises_the_same(self) -> None:
        ep = one_agent([4, 5, 6, 7, 8, 9], lookback=3).to_numpy()
        with pytest.raises(IndexError, match="reaches outside"):
            ep.get_observations(-7)

    def test_a_slice_is_clipped_to_lookback_and_chunk(self) -> None:
        ep = one_agent([4, 5, 6, 7, 8, 9], lookback=3)
        assert ep.get_observations(slice(-100, None)) == {"A": [4, 5, 6, 7, 8, 9]}
        assert ep.get_observations(slice(1, 100)) == {"A": [8, 9]}
        assert ep.get_observations() == {"A": [7, 8, 9]}


class TestPerAgent:
    def test_an_int_answers_for_the_agents_that_observed_there(self) -> None:
        ep = gappy()
        assert (ep.get_observations(1), ep.get_observations(3)) == ({"a1": 1}, {"a0": 3, "a1": 3})

    def test_a_list_leaves_out_the_env_steps_an_agent_skipped(self) -> None:
        assert gappy().get_observations([0, 1, 3]) == {"a0": [0, 3], "a1": [0, 1, 3]}

    def test_an_agent_with_nothing_in_range_is_left_out(self) -> None:
        assert gappy().get_observations(slice(1, 3)) == {"a1": [1, 2]}

    def test_fill_pads_the_env_steps_an_agent_skipped(self) -> None:
        ep = gappy()
        assert ep.get_observations([0, 1, 3], fill=-1) == {"a0": [0, -1, 3], "a1": [0, 1, 3]}
        assert ep.get_observations(1, fill=-1) == {"a0": -1, "a1": 1}

    def test_actions_and_rewards_sit_at_the_env_step_the_agent_acted(self) -> None:
        ep = gappy()
        assert ep.get_actions() == {"a0": [0, 3], "a1": [0, 1, 2, 3]}
        assert ep.get_rewards(0) == {"a0": pytest.approx(0.1), "a1": pytest.approx(0.1)}  # a0's step 0->3
        assert ep.get_rewards(1) == {"a1": pytest.approx(0.2)}

    def test_the_last_env_step_gives_the_hanging_action_and_its_rewards_so_far(self) -> None:
        ep = gappy()
        assert ep.get_actions(-1) == {"a0": 3, "a1": 3}
        assert ep.get_rewards(-1) == {"a0": pytest.approx(0.4), "a1": pytest.approx(0.4)}

    def test_extra_model_outputs_by_env_step(self) -> None:
        ep = one_agent([4, 5, 6], lookback=0)
        assert ep.get_extra_model_outputs("logp") == {"A": [-4, -5]}
        assert ep.get_extra_model_outputs("logp", -1, "A") == {"A": -5}

    def test_agent_ids_picks_agents(self) -> None:
        ep = gappy()
        assert ep.get_observations(3, agent_ids="a1") == {"a1": 3}
        assert ep.get_observations(3, agent_ids=["a0", "zz"]) == {"a0": 3}

    def test_return_list_gives_one_dict_per_env_step(self) -> None:
        ep = gappy()
        assert ep.get_observations(slice(0, 3), return_list=True) == [{"a0": 0, "a1": 0}, {"a1": 1}, {"a1": 2}]
        assert ep.get_observations(slice(1, 3), return_list=True, fill=-1) == [{"a0": -1, "a1": 1}, {"a0": -1, "a1": 2}]

    def test_return_list_needs_env_steps(self) -> None:
        with pytest.raises(ValueError, match="return_list=True needs env_steps=True"):
            gappy().get_actions(env_steps=False, return_list=True)

    def test_env_steps_false_reads_each_agents_own_steps(self) -> None:
        ep = gappy()
        assert ep.get_observations(-1, env_steps=False) == {"a0": 4, "a1": 3}
        assert ep.get_actions(slice(0, 2), env_steps=False) == {"a0": [0, 3], "a1": [0, 1]}

    def test_numpy_episodes_answer_with_arrays(self) -> None:
        ep = gappy().to_numpy()
        got = ep.get_observations([1, 3], agent_ids="a1")
        assert isinstance(got["a1"], np.ndarray) and got["a1"].tolist() == [1, 3]
        assert ep.get_infos([0, 3], agent_ids="a0") == {"a0": [{}, {}]}  # infos stay lists
