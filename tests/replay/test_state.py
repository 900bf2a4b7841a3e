"""ReplayState: one record for get_state/set_state and the Parquet metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ray_sampler.errors import DataFormatError
from replay.buffer import EpisodeReplayBuffer
from replay.persistence import save_buffer
from replay.state import ReplayState, state_from_plain
from tests.replay.test_storage import episode


def test_get_state_is_the_record_and_the_file_metadata_is_it_without_episodes(tmp_path: Path) -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=6, seed=1)
    for k in range(3):
        buffer.add([episode(f"e{k}", 3, terminated=True)])
    state = buffer.get_state()
    assert isinstance(state, ReplayState) and state.episodes is not None and state.episodes.ids == ["e1", "e2"]
    assert (state.capacity_env_steps, state.num_evicted_episodes, state.num_evicted_env_steps, state.first_order) == (
        6,
        1,
        3,
        1,
    )
    path = tmp_path / "s.parquet"
    save_buffer(buffer, path)
    meta = json.loads(pq.read_table(path).schema.metadata[b"ray_sampler.replay"])
    assert meta == json.loads(json.dumps(state.to_metadata()))
    assert ReplayState.from_metadata(meta) == buffer.get_state(with_episodes=False)


def test_missing_counters_default_to_zero() -> None:
    assert ReplayState.from_metadata({"capacity_env_steps": 5}) == ReplayState(capacity_env_steps=5)


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        (None, "'ray_sampler.replay' must be a dict"),
        ({}, "'capacity_env_steps' is missing"),
        ({"capacity_env_steps": True}, "'capacity_env_steps' must be an int >= 1"),
        ({"capacity_env_steps": 5, "capacity_bytes": "10"}, "'capacity_bytes' must be an int >= 1 or None"),
        ({"capacity_env_steps": 5, "first_order": -1}, "'first_order' must be an int >= 0"),
    ],
    ids=["none", "no_capacity", "bool_capacity", "bytes_str", "negative_order"],
)
def test_malformed_metadata_raises(meta: object, match: str) -> None:
    with pytest.raises(DataFormatError, match=match):
        ReplayState.from_metadata(meta)


def test_state_from_plain_refuses_bytes_that_are_not_an_arrow_stream() -> None:
    with pytest.raises(DataFormatError, match=r"'episodes' is not an Arrow IPC stream"):
        state_from_plain({"capacity_env_steps": 10, "episodes": b"not arrow"})
