"""Replay persistence: save -> restore equality (contents, eviction order, samples), streaming,
atomic writes, corrupt files rejected, files any Arrow tool reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ray_sampler.data.arrow_format import arrow_to_columnar
from ray_sampler.data.columnar import columnar_to_episodes
from ray_sampler.errors import DataFormatError
from replay.buffer import EpisodeReplayBuffer
from replay.persistence import restore_buffer, save_buffer
from tests.helpers import assert_episodes_equal
from tests.replay.test_buffer import fill_from_runner


def rewrite_metadata(path: Path, changes: dict[bytes, bytes], table: pa.Table | None = None) -> None:
    """Rewrites the file at ``path`` with its schema metadata keys updated."""
    table = pq.read_table(path) if table is None else table
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, **changes}), path)


def replay_meta(path: Path) -> dict:
    return json.loads(pq.read_table(path).schema.metadata[b"ray_sampler.replay"])


@pytest.fixture
def buffer() -> EpisodeReplayBuffer:
    buf = EpisodeReplayBuffer(capacity_env_steps=60, seed=4)
    fill_from_runner(buf, 8)  # 120 steps into 60: evictions, chunks with and without lookback
    buf.sample(10)  # the RNG has moved on
    return buf


def assert_buffers_equal(a: EpisodeReplayBuffer, b: EpisodeReplayBuffer) -> None:
    assert list(a.storage.episodes) == list(b.storage.episodes)  # eviction order
    assert len(a) == len(b) and a.get_metrics().num_evicted_episodes == b.get_metrics().num_evicted_episodes
    ids = list(a.storage.episodes)
    for x, y in zip(
        columnar_to_episodes(a.storage.episodes_columnar(ids)),
        columnar_to_episodes(b.storage.episodes_columnar(ids)),
        strict=True,
    ):
        assert_episodes_equal(x, y)
    for _ in range(3):
        x, y = a.sample(64, n_step=3, gamma=0.9), b.sample(64, n_step=3, gamma=0.9)
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def test_save_restore_gives_an_equal_buffer_that_samples_alike(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "replay.parquet"
    assert save_buffer(buffer, path, row_group_env_steps=16) > 1
    restored = restore_buffer(path)
    assert_buffers_equal(buffer, restored)


def test_state_round_trip(buffer: EpisodeReplayBuffer) -> None:
    other = EpisodeReplayBuffer(capacity_env_steps=1)
    other.set_state(buffer.get_state())
    assert_buffers_equal(buffer, other)


def test_row_groups_hold_whole_episodes_and_read_alone(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    groups = save_buffer(buffer, path, row_group_env_steps=16)
    pf = pq.ParquetFile(path)
    assert pf.num_row_groups == groups
    ids = []
    for g in range(groups):
        ids += arrow_to_columnar(pf.read_row_group(g)).ids
    assert ids == list(buffer.storage.episodes)
    whole = arrow_to_columnar(pq.read_table(path))  # plain pyarrow reads the whole file too
    assert whole.ids == ids and whole.num_env_steps == len(buffer)


def test_file_is_readable_by_pandas(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    frame = pd.read_parquet(path)
    table = pq.read_table(path)
    assert len(frame) == table.num_rows and list(frame.columns) == table.column_names
    assert frame["reward"].notna().sum() == len(buffer) + int(table.column("is_lookback").to_numpy().sum())


@pytest.mark.usefixtures("ray_session")
def test_file_is_readable_by_ray_data(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    import ray.data

    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    ds = ray.data.read_parquet(str(path))
    assert ds.count() == pq.read_table(path).num_rows
    assert "obs" in ds.schema().names


def test_a_crash_mid_write_leaves_the_old_file(
    buffer: EpisodeReplayBuffer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path, row_group_env_steps=16)
    before = path.read_bytes()
    import replay.persistence as persistence

    calls = {"n": 0}
    real = persistence.columnar_to_arrow

    def crash_on_second(*args: object, **kwargs: object) -> pa.Table:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(persistence, "columnar_to_arrow", crash_on_second)
    fill_from_runner(buffer, 2)
    with pytest.raises(OSError, match="disk full"):
        save_buffer(buffer, path, row_group_env_steps=16)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]  # no temporary file left


def test_truncated_file_raises(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataFormatError, match=r"r.parquet: not a readable Parquet file"):
        restore_buffer(path)


def test_other_schema_raises(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    with pytest.raises(DataFormatError, match=r"'ray_sampler.replay' is missing or malformed"):
        restore_buffer(path)


def test_newer_schema_version_raises(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    rewrite_metadata(path, {b"ray_sampler.schema_version": b"9"})
    with pytest.raises(DataFormatError, match="schema version 9 is newer"):
        restore_buffer(path)


def test_corrupted_column_data_raises(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    column = pq.ParquetFile(path).metadata.row_group(0).column(6)  # the obs column
    data = bytearray(path.read_bytes())
    at = column.data_page_offset + column.total_compressed_size // 2
    data[at : at + 8] = bytes(b ^ 0xFF for b in data[at : at + 8])
    path.write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match=r"r.parquet: row group 0"):
        restore_buffer(path)


def test_malformed_replay_metadata_raises(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    rewrite_metadata(path, {b"ray_sampler.replay": json.dumps({"capacity_env_steps": "lots"}).encode()})
    with pytest.raises(DataFormatError, match=r"'ray_sampler.replay' is missing or malformed"):
        restore_buffer(path)


def test_saving_an_empty_buffer_raises(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="holds no episodes"):
        save_buffer(EpisodeReplayBuffer(capacity_env_steps=10), tmp_path / "x.parquet")


@pytest.mark.parametrize(
    "meta",
    [
        {"capacity_env_steps": 0},
        {"capacity_env_steps": 100, "capacity_bytes": "10"},
        {"capacity_env_steps": 100, "num_evicted_episodes": "x"},
    ],
    ids=["capacity_zero", "bytes_str", "counter_str"],
)
def test_bad_replay_metadata_values_raise(buffer: EpisodeReplayBuffer, tmp_path: Path, meta: dict) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    rewrite_metadata(path, {b"ray_sampler.replay": json.dumps(meta).encode()})
    with pytest.raises(DataFormatError, match=r"'ray_sampler.replay' is missing or malformed"):
        restore_buffer(path)


def test_contents_that_break_continuity_or_exceed_capacity_raise(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    table = pq.read_table(path)
    rewrite_metadata(path, {b"ray_sampler.replay": json.dumps({**replay_meta(path), "capacity_env_steps": 5}).encode()})
    with pytest.raises(DataFormatError, match=r"only .* fit its own capacity"):
        restore_buffer(path)
    ids = table.column("episode_id").to_pylist()
    ids = [ids[0]] * len(ids)  # every chunk claims one episode: continuity breaks
    table = table.set_column(1, "episode_id", pa.array(ids))
    pq.write_table(table, path)
    with pytest.raises(DataFormatError, match=r"r.parquet: row group 0: chunk 1"):
        restore_buffer(path)


def test_restore_blames_bad_arguments_on_the_caller_not_the_file(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    from ray_sampler.errors import ReplayError
    from replay.prioritized import PrioritizedEpisodeReplayBuffer

    path = str(tmp_path / "b.parquet")
    save_buffer(buffer, path)
    with pytest.raises(ReplayError, match="'alpha' must be in \\[0, 1\\]"):
        restore_buffer(path, buffer_class=PrioritizedEpisodeReplayBuffer, alpha=2.0)
    with pytest.raises(TypeError, match="alpah"):
        restore_buffer(path, buffer_class=PrioritizedEpisodeReplayBuffer, alpah=0.5)
    with pytest.raises(ReplayError, match="restore takes \\['capacity_env_steps'\\] from the file"):
        restore_buffer(path, capacity_env_steps=50)
    restored = restore_buffer(path, buffer_class=PrioritizedEpisodeReplayBuffer, alpha=0.5)
    assert len(restored) == len(buffer) and restored.alpha == 0.5
