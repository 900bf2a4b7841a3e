"""PrevActionsPrevRewards: the steps before each step, from the chunk's data and lookback."""

from __future__ import annotations

import numpy as np
import pytest

from connectors.learner import PrevActionsPrevRewards
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from tests.connectors.learner.chunks import run, steps_of


@pytest.mark.parametrize("n", [1, 2, 5])
def test_prev_actions_and_rewards_come_from_the_lookback(chunks: list[SingleAgentEpisode], n: int) -> None:
    out = run([PrevActionsPrevRewards(n_prev_actions=n, n_prev_rewards=n)], chunks)
    for i, (ep, t) in enumerate(steps_of(chunks)):
        # The seed's trajectory view shift=[-n..-1], with the lookback and fill=0 before it.
        prev_a = ep.get_actions(slice(t - n, t), neg_index_as_lookback=True, fill=0)
        prev_r = ep.get_rewards(slice(t - n, t), neg_index_as_lookback=True, fill=0.0)
        assert out["prev_actions"][i].tolist() == np.asarray(prev_a).tolist()
        assert out["prev_rewards"][i].tolist() == np.asarray(prev_r).tolist()


def test_prev_actions_keep_their_dtype_and_dict_actions_are_refused() -> None:
    ep = SingleAgentEpisode(observations=[0, 1, 2, 3], actions=[np.int32(0)] * 3, rewards=[1.0] * 3)
    assert run([PrevActionsPrevRewards()], [ep])["prev_actions"].dtype == np.int32
    dict_actions = SingleAgentEpisode(observations=[0, 1], actions=[{"a": 1}], rewards=[1.0])
    with pytest.raises(ConfigError, match="needs array actions"):
        run([PrevActionsPrevRewards()], [dict_actions])
    with pytest.raises(ConfigError, match="'n_prev_actions' must be an int >= 0"):
        PrevActionsPrevRewards(n_prev_actions=-1)
