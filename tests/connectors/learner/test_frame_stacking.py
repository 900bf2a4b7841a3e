"""FrameStacking: each step's last observations, from the chunk's data and lookback."""

from __future__ import annotations

import numpy as np
import pytest

from connectors.learner import FrameStacking
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from tests.connectors.learner.chunks import run, steps_of


@pytest.mark.parametrize("frames", [1, 4])
def test_frame_stacking_comes_from_the_lookback(chunks: list[SingleAgentEpisode], frames: int) -> None:
    out = run([FrameStacking(num_frames=frames)], chunks)
    nxt = run([FrameStacking(num_frames=frames, as_next_obs=True)], chunks)
    for i, (ep, t) in enumerate(steps_of(chunks)):
        expected = ep.get_observations(slice(t - frames + 1, t + 1), neg_index_as_lookback=True, fill=0)
        assert out["obs"][i].tolist() == np.asarray(expected).tolist()
        expected_next = ep.get_observations(slice(t - frames + 2, t + 2), neg_index_as_lookback=True, fill=0)
        assert nxt["next_obs"][i].tolist() == np.asarray(expected_next).tolist()


def test_stacked_frames_keep_their_dtype() -> None:
    frames = [np.full((2, 2), t, np.uint8) for t in range(4)]
    ep = SingleAgentEpisode(observations=frames, actions=[np.int32(0)] * 3, rewards=[1.0] * 3)
    out = run([FrameStacking(num_frames=2)], [ep])
    assert out["obs"].dtype == np.uint8 and out["obs"].shape == (3, 2, 2, 2)


def test_bad_num_frames_raises() -> None:
    with pytest.raises(ConfigError, match=r"'num_frames' must be an int >= 1 \(got 0\)"):
        FrameStacking(num_frames=0)


def test_dict_observations_are_stacked_leaf_by_leaf() -> None:
    dict_obs = SingleAgentEpisode(observations=[{"a": 5}, {"a": 6}], actions=[0], rewards=[1.0])
    assert run([FrameStacking(num_frames=2)], [dict_obs])["obs"]["a"].tolist() == [[0, 5]]


class ValueProbe:
    """compute_values records what it gets and gives each row's sum, so values show their inputs."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def compute_values(self, obs: np.ndarray) -> np.ndarray:
        self.seen.append(np.asarray(obs))
        return np.asarray(obs, np.float64).reshape(len(obs), -1).sum(axis=1)


@pytest.mark.parametrize("frames", [1, 3])
def test_gae_values_come_from_the_same_stacks_as_the_policy_inputs(
    chunks: list[SingleAgentEpisode], frames: int
) -> None:
    from connectors.learner import GeneralAdvantageEstimation
    from connectors.pipeline import ConnectorPipelineV2

    probe = ValueProbe()
    pipeline = ConnectorPipelineV2([FrameStacking(num_frames=frames), GeneralAdvantageEstimation()])
    out = pipeline(rl_module=probe, batch={}, episodes=chunks, shared_data={})["default_policy"]
    # Each step's value is the value of the very stack the policy gets for it...
    np.testing.assert_allclose(out["vf_preds"], np.asarray(out["obs"], np.float64).reshape(len(out["obs"]), -1).sum(1))
    # ... and every stored observation, the bootstrap ones included, is stacked from the lookback.
    stacked = probe.seen[0]
    row = 0
    for ep in chunks:
        for t in range(len(ep) + 1):
            expected = ep.get_observations(slice(t - frames + 1, t + 1), neg_index_as_lookback=True, fill=0)
            assert stacked[row].tolist() == np.asarray(expected).tolist()
            row += 1
    assert row == len(stacked)
