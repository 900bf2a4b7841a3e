"""CursorBatch: cursors from and to zero-step SingleAgentEpisode continuations."""

from __future__ import annotations

import numpy as np

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.cursors import CursorBatch, awaiting_reset


def test_running_and_awaiting_cursors_round_trip() -> None:
    running = SingleAgentEpisode("a", observations=[0, 1, 2], actions=[5, 6], rewards=[1.0, 2.0]).cut(1)
    ended = SingleAgentEpisode("b", observations=[7, 8], actions=[1], rewards=[3.0], terminated=True)
    batch = CursorBatch.from_episodes([running, ended])
    assert batch.awaiting.tolist() == [False, True] and batch.chunks.ids == ["a", "b"]
    assert batch.chunks.lens.tolist() == [0, 0] and batch.chunks.lookback_lens.tolist() == [1, 0]
    back = batch.to_episodes()
    assert back[0].id_ == "a" and back[0].t_started == 2 and back[0].get_observations(-1) == 2
    assert back[0].get_actions(-1, neg_index_as_lookback=True) == 6
    assert back[1].id_ == "b" and back[1].is_done and int(np.asarray(back[1].get_observations(-1))) == 8


def test_a_placeholder_is_done_with_one_observation() -> None:
    ep = awaiting_reset("z", 4)
    assert ep.is_terminated and len(ep) == 0 and ep.get_observations(-1) == 4
