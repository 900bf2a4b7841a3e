"""SingleAgentEpisode's setters (RLlib's signatures), in list and numpy form."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EpisodeError


def make(numpy_form: bool) -> SingleAgentEpisode:
    """Lookback o-2, o-1 | data o0..o3; actions/rewards/logp -2, -1 | 0, 1, 2."""
    ep = SingleAgentEpisode(
        observations=[-2, -1, 0, 1, 2, 3],
        actions=[-2, -1, 0, 1, 2],
        rewards=[-2.0, -1.0, 0.0, 1.0, 2.0],
        extra_model_outputs={"logp": [-0.2, -0.1, 0.0, 0.1, 0.2]},
        len_lookback_buffer=2,
    )
    return ep.to_numpy() if numpy_form else ep


def values(x: object) -> list:
    return np.asarray(x).tolist()


FORMS = pytest.mark.parametrize("numpy_form", [False, True], ids=["list", "numpy"])


@FORMS
def test_set_observations_at_an_index_and_into_the_lookback(numpy_form: bool) -> None:
    ep = make(numpy_form)
    ep.set_observations(new_data=30, at_indices=-1)
    ep.set_observations(new_data=-10, at_indices=-1, neg_index_as_lookback=True)
    assert values(ep.get_observations(slice(-2, None), neg_index_as_lookback=True)) == [-2, -10, 0, 1, 2, 30]
    assert len(ep) == 3


@FORMS
def test_set_actions_over_all_data_items(numpy_form: bool) -> None:
    ep = make(numpy_form)
    new = [7, 8, 9] if not numpy_form else np.array([7, 8, 9])
    ep.set_actions(new_data=new)
    assert values(ep.get_actions(slice(-2, None), neg_index_as_lookback=True)) == [-2, -1, 7, 8, 9]


@FORMS
def test_set_rewards_on_a_slice_across_the_cut(numpy_form: bool) -> None:
    ep = make(numpy_form)
    new = [5.0, 6.0] if not numpy_form else np.array([5.0, 6.0])
    ep.set_rewards(new_data=new, at_indices=slice(-1, 1), neg_index_as_lookback=True)
    assert values(ep.get_rewards(slice(-2, None), neg_index_as_lookback=True)) == [-2.0, 5.0, 6.0, 1.0, 2.0]
    assert ep.get_return() == 9.0  # the lookback reward is not this chunk's


@FORMS
def test_set_extra_model_outputs_at_a_list_of_indices(numpy_form: bool) -> None:
    ep = make(numpy_form)
    new = [1.5, 2.5] if not numpy_form else np.array([1.5, 2.5])
    ep.set_extra_model_outputs(key="logp", new_data=new, at_indices=[0, 2])
    assert values(ep.get_extra_model_outputs("logp")) == [1.5, 0.1, 2.5]


def test_set_extra_model_outputs_needs_an_existing_key() -> None:
    with pytest.raises(EpisodeError, match=r"set_extra_model_outputs: no extra model output 'vf'; .*\['logp'\]"):
        make(False).set_extra_model_outputs(key="vf", new_data=1.0, at_indices=0)


@FORMS
def test_setters_never_reach_past_the_data(numpy_form: bool) -> None:
    ep = make(numpy_form)
    with pytest.raises(IndexError, match="outside the 2 lookback and 3 data items"):
        ep.set_rewards(new_data=1.0, at_indices=3)
    with pytest.raises(IndexError, match="3 positions at None but 'new_data' holds 2 items"):
        ep.set_actions(new_data=[1, 2] if not numpy_form else np.array([1, 2]))


def test_setters_are_keyword_only_as_rllibs() -> None:
    with pytest.raises(TypeError):
        make(False).set_rewards(1.0, 0)  # type: ignore[misc]


def test_set_observations_of_a_nested_numpy_episode() -> None:
    obs = [{"pos": np.full(2, t, np.float32), "id": t} for t in range(3)]
    ep = SingleAgentEpisode(observations=obs, actions=[0, 1], rewards=[0.0, 0.0]).to_numpy()
    ep.set_observations(new_data={"pos": np.full(2, 5, np.float32), "id": 9}, at_indices=1)
    got = ep.get_observations()
    assert got["pos"].tolist() == [[0, 0], [5, 5], [2, 2]] and got["id"].tolist() == [0, 9, 2]
    assert got["pos"].dtype == np.float32
