"""AddColumnsFromEpisodesToTrainBatch against the episode getters, on runner chunks."""

from __future__ import annotations

import numpy as np
import pytest

from connectors.learner import AddColumnsFromEpisodesToTrainBatch
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from tests.connectors.learner.chunks import run, steps_of


def test_columns_are_what_the_episode_getters_give(chunks: list[SingleAgentEpisode]) -> None:
    out = run([AddColumnsFromEpisodesToTrainBatch()], chunks)
    rows = steps_of(chunks)
    assert len(out["obs"]) == len(rows) == sum(len(ep) for ep in chunks)
    for i, (ep, t) in enumerate(rows):
        np.testing.assert_array_equal(out["obs"][i], np.asarray(ep.get_observations(t)))
        assert out["actions"][i] == ep.get_actions(t) and out["rewards"][i] == ep.get_rewards(t)
        assert out["action_logp"][i] == ep.get_extra_model_outputs("action_logp", t)
        last = t == len(ep) - 1
        assert out["terminateds"][i] == (last and ep.is_terminated)
        assert out["truncateds"][i] == (last and ep.is_truncated)


def test_train_batch_never_aliases_numpy_episodes() -> None:
    ep = SingleAgentEpisode(
        observations=np.arange(4, dtype=np.float64)[:, None],
        actions=np.arange(3),
        rewards=np.array([1.0, 2.0, 3.0]),
        extra_model_outputs={"action_logp": np.zeros(3)},
    )
    out = run([AddColumnsFromEpisodesToTrainBatch()], [ep])
    out["rewards"] *= 100
    out["actions"] += 5
    assert ep.get_rewards().tolist() == [1.0, 2.0, 3.0] and ep.get_actions().tolist() == [0, 1, 2]


def test_a_missing_model_output_raises() -> None:
    ep = SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[1.0], extra_model_outputs={"action_logp": [0.0]})
    with pytest.raises(
        ConfigError, match=r"extra model output 'vf_preds' is not in the episodes \(they have \['action_logp'\]\)"
    ):
        run([AddColumnsFromEpisodesToTrainBatch(("vf_preds",))], [ep])
