"""What the learner pieces share: one columnar view per call, step indices, episodes left unchanged."""

from __future__ import annotations

import numpy as np

from connectors.learner import (
    AddColumnsFromEpisodesToTrainBatch,
    AddNextObservationsFromEpisodesToTrainBatch,
    FrameStacking,
    GeneralAdvantageEstimation,
    LearnerPiece,
    NStepReturns,
    PrevActionsPrevRewards,
    columnar_of,
    step_index,
)
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.episode import SingleAgentEpisode
from tests.connectors.learner.chunks import run
from tests.helpers import full_state


def test_learner_pipeline_never_changes_the_episodes(chunks: list[SingleAgentEpisode]) -> None:
    before = [full_state(ep) for ep in chunks]
    run(
        [
            AddColumnsFromEpisodesToTrainBatch(),
            AddNextObservationsFromEpisodesToTrainBatch(),
            GeneralAdvantageEstimation(),
            NStepReturns(),
            PrevActionsPrevRewards(),
            FrameStacking(),
        ],
        chunks,
    )
    after = [full_state(ep) for ep in chunks]
    for a, b in zip(before, after, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if key in ("observations", "actions", "rewards"):
                np.testing.assert_array_equal(a[key], b[key])
            elif key != "extra_model_outputs":
                assert a[key] == b[key]


def test_a_reused_shared_dict_does_not_serve_stale_episodes(chunks: list[SingleAgentEpisode]) -> None:
    shared: dict = {}
    pipe = ConnectorPipelineV2([AddColumnsFromEpisodesToTrainBatch()])
    first = pipe(rl_module=None, batch={}, episodes=chunks[:2], shared_data=shared)["default_policy"]
    second = pipe(rl_module=None, batch={}, episodes=chunks[2:4], shared_data=shared)["default_policy"]
    assert len(second["rewards"]) == sum(len(ep) for ep in chunks[2:4]) != 0
    del first


def test_columnar_view_is_packed_once_per_shared_dict(chunks: list[SingleAgentEpisode]) -> None:
    shared: dict = {}
    assert columnar_of(chunks, shared) is columnar_of(chunks, shared)


def test_step_index_gives_each_step_its_chunk_and_position() -> None:
    eps = [
        SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 0], rewards=[1.0, 1.0]),
        SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[1.0]),
    ]
    chunk, k = step_index(columnar_of(eps, None))
    assert chunk.tolist() == [0, 0, 1] and k.tolist() == [0, 1, 0]


def test_pieces_write_into_their_module_batch() -> None:
    piece = LearnerPiece(module_id="pi")
    batch: dict = {}
    piece.module_batch(batch)["x"] = 1
    assert batch == {"pi": {"x": 1}}
