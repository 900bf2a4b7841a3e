"""Replay persistence: save -> restore equality (contents, eviction order, samples), streaming,
atomic writes, corrupt files rejected, files any Arrow tool reads."""

from __future__ import annotations

import copy
import errno
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ray_sampler.data.arrow_format import arrow_to_columnar, columnar_to_arrow
from ray_sampler.data.columnar import columnar_to_episodes
from ray_sampler.errors import DataFormatError, FileWriteError, ReplayError
from replay.buffer import EpisodeReplayBuffer
from replay.persistence import restore_buffer, save_buffer
from tests.helpers import assert_episodes_equal
from tests.replay.test_buffer import fill_from_runner
from tests.replay.test_storage import episode


def rewrite_metadata(path: Path, changes: dict[bytes, bytes], table: pa.Table | None = None) -> None:
    """Rewrites the file at ``path`` with its schema metadata keys updated, as another tool would: the
    file has no checksums any more (restore it with ``allow_unverified=True``)."""
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
    import ray_sampler.data.arrow_format as arrow_format  # save_buffer imports it when it writes

    calls = {"n": 0}
    real = arrow_format.columnar_to_arrow

    def crash_on_second(*args: object, **kwargs: object) -> pa.Table:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(arrow_format, "columnar_to_arrow", crash_on_second)
    fill_from_runner(buffer, 2)
    with pytest.raises(OSError, match="disk full"):
        save_buffer(buffer, path, row_group_env_steps=16)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]  # no temporary file left


@pytest.mark.parametrize(
    ("owner", "name"),
    [(pq.ParquetWriter, "write_table"), (os, "fsync"), (os, "replace")],
    ids=["write_table", "fsync", "replace"],
)
def test_a_save_failing_on_disk_raises_its_error_removes_its_temp_file_and_keeps_the_old_checkpoint(
    buffer: EpisodeReplayBuffer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: object, name: str
) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path, row_group_env_steps=16)
    other = EpisodeReplayBuffer(capacity_env_steps=60, seed=5)
    fill_from_runner(other, 3)

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(owner, name, fail)
    with pytest.raises(
        OSError,
        match=r"^cannot write the replay checkpoint .*r\.parquet: No space left on device \(the disk or quota is "
        r"full\)$",
    ):
        save_buffer(other, path, row_group_env_steps=16)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]  # no temporary file left
    assert_buffers_equal(buffer, restore_buffer(path))


def test_a_save_where_no_file_can_be_written_names_the_path_and_why(
    buffer: EpisodeReplayBuffer, tmp_path: Path
) -> None:
    """Before: pyarrow's raw error, naming only the temporary file ("Failed to open local file ...")."""
    (tmp_path / "a_file").write_text("")
    path = tmp_path / "a_file" / "replay.parquet"
    with pytest.raises(FileWriteError) as raised:
        save_buffer(buffer, path)
    assert str(raised.value) == (
        f"cannot write the replay checkpoint {path}: Not a directory (its directory must exist and be writable)"
    )
    assert isinstance(raised.value, OSError) and raised.value.errno == errno.ENOTDIR


def test_pyarrows_permission_error_becomes_one_line_naming_the_checkpoint(
    buffer: EpisodeReplayBuffer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory without write permission (this suite may run as root, whom permissions do not stop:
    pyarrow's own error is raised in its place)."""

    def refuse(where: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, f"Failed to open local file '{where}'. Detail: [errno 13] Permission denied")

    monkeypatch.setattr(pq, "ParquetWriter", refuse)
    with pytest.raises(FileWriteError) as raised:
        save_buffer(buffer, tmp_path / "r.parquet")
    assert str(raised.value) == (
        f"cannot write the replay checkpoint {tmp_path / 'r.parquet'}: Permission denied (its directory must exist "
        "and be writable)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_checkpoint_says_what_one_is(tmp_path: Path) -> None:
    path = tmp_path / "notes.parquet"
    path.write_text("hello, not parquet")
    with pytest.raises(DataFormatError) as raised:
        restore_buffer(path)
    assert str(raised.value) == (
        f"{path} is not a replay checkpoint: one is a Parquet file that ReplayActor.save or save_buffer wrote, "
        "starting with b'PAR1', and this one starts with b'hell' (corrupted, or another file)"
    )


def test_truncated_file_raises(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataFormatError, match=r"r.parquet: not a readable Parquet file"):
        restore_buffer(path)


def test_other_schema_raises(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    with pytest.raises(DataFormatError, match=r"footer key 'ray_sampler.replay_integrity' is missing"):
        restore_buffer(path)
    with pytest.raises(DataFormatError, match=r"'ray_sampler.replay' is missing or malformed"):
        restore_buffer(path, allow_unverified=True)


def test_newer_schema_version_raises(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    rewrite_metadata(path, {b"ray_sampler.schema_version": b"9"})
    with pytest.raises(DataFormatError, match="schema version 9 is newer"):
        restore_buffer(path, allow_unverified=True)


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
        restore_buffer(path, allow_unverified=True)


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
        restore_buffer(path, allow_unverified=True)


def test_contents_that_break_continuity_or_exceed_capacity_raise(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    table = pq.read_table(path)
    rewrite_metadata(path, {b"ray_sampler.replay": json.dumps({**replay_meta(path), "capacity_env_steps": 5}).encode()})
    with pytest.raises(DataFormatError, match=r"only .* fit its own capacity"):
        restore_buffer(path, allow_unverified=True)
    ids = table.column("episode_id").to_pylist()
    ids = [ids[0]] * len(ids)  # every chunk claims one episode: continuity breaks
    table = table.set_column(1, "episode_id", pa.array(ids))
    pq.write_table(table, path)
    with pytest.raises(DataFormatError, match=r"r.parquet: row group 0: chunk 1"):
        restore_buffer(path, allow_unverified=True)


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


def thrift_string(data: bytes) -> bytes:
    """``data`` as Parquet's footer (Thrift compact protocol) writes a string: varint length, bytes."""
    n, prefix = len(data), b""
    while n >= 0x80:
        prefix, n = prefix + bytes([n & 0x7F | 0x80]), n >> 7
    return prefix + bytes([n]) + data


class TestCorruptedCheckpoints:
    """Truncation or one flipped bit anywhere gives DataFormatError naming the file, or (where the
    byte is one the restore never reads) exactly the saved state; never another error, never a
    different state. Positions are exhaustive per class (header, each column chunk, each footer
    metadata entry, the rest of the footer, the trailer), or a seeded sample of ``_CAP`` positions
    over a kind's classes. (Every byte, all 8 bits, was run once outside the suite: 60,688 flips and
    7,586 truncations, all refused or equal.)"""

    _CAP = 600

    @pytest.fixture
    def saved(self, tmp_path: Path) -> tuple[Path, bytes, EpisodeReplayBuffer]:
        buf = EpisodeReplayBuffer(capacity_env_steps=12, seed=3)
        buf.add([episode("a", 4, terminated=True)])
        buf.add([episode("b", 5, start=2, lookback=2), episode("c", 3, terminated=True)])
        buf.add([episode("b", 2, start=7, lookback=1)])  # "a" evicted, "b" in two segments
        buf.sample(5)  # the RNG has moved on
        path = tmp_path / "small.parquet"
        assert save_buffer(buf, path, row_group_env_steps=4) == 2
        return path, path.read_bytes(), restore_buffer(path)

    @staticmethod
    def position_classes(path: Path, data: bytes) -> dict[str, list[int]]:
        """Byte positions by class: header, each column chunk, each footer metadata value, the rest of
        the footer, the trailer (footer length and magic)."""
        md = pq.ParquetFile(path).metadata
        footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
        classes: dict[str, list[int]] = {"header": list(range(4))}
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(g).column(c)
                start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                classes[f"row group {g} column {col.path_in_schema}"] = list(
                    range(start, start + col.total_compressed_size)
                )
        in_metadata: set[int] = set()
        for key, value in md.metadata.items():  # each key, then its value, with their length prefixes
            at = data.index(thrift_string(key), footer_start)
            end = data.index(thrift_string(value), at) + len(thrift_string(value))
            classes[f"metadata {key.decode()}"] = list(range(at, end))
            in_metadata.update(range(at, end))
        classes["footer"] = [p for p in range(footer_start, len(data) - 8) if p not in in_metadata]
        classes["trailer"] = list(range(len(data) - 8, len(data)))
        assert len({p for positions in classes.values() for p in positions}) == sum(map(len, classes.values()))
        return classes

    @staticmethod
    def restore_or_refuse(path: Path, data: bytes, reference: EpisodeReplayBuffer) -> str:
        path.write_bytes(data)
        try:
            restored = restore_buffer(path)
        except DataFormatError as e:
            assert str(path) in str(e)
            return "refused"
        assert restored.get_state(with_episodes=False) == reference.get_state(with_episodes=False)
        episodes, expected = restored.get_state().episodes, reference.get_state().episodes
        assert episodes is not None and expected is not None
        assert columnar_to_arrow(episodes).equals(columnar_to_arrow(expected))
        # A copy samples: the reference keeps its RNG state and sampled counter for the next position.
        x, y = restored.sample(32, n_step=2, gamma=0.5), copy.deepcopy(reference).sample(32, n_step=2, gamma=0.5)
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in y)
        return "equal"

    @pytest.mark.parametrize("kind", ["header", "row group", "metadata", "footer", "trailer"])
    def test_a_flipped_bit_is_refused_or_changes_nothing(
        self, kind: str, saved: tuple[Path, bytes, EpisodeReplayBuffer]
    ) -> None:
        path, data, reference = saved
        rng = np.random.default_rng(0)
        outcomes = {"refused": 0, "equal": 0}
        classes = self.position_classes(path, data)
        positions = [p for name, ps in classes.items() if name.startswith(kind) for p in ps]
        if len(positions) > self._CAP:
            positions = sorted(rng.choice(positions, self._CAP, replace=False).tolist())
        for pos in positions:
            corrupted = bytearray(data)
            corrupted[pos] ^= 1 << int(rng.integers(8))
            outcomes[self.restore_or_refuse(path, bytes(corrupted), reference)] += 1
        assert outcomes["refused"] > 0

    @pytest.mark.parametrize("kind", ["header", "row group", "metadata", "footer", "trailer"])
    def test_a_truncated_file_is_refused(self, kind: str, saved: tuple[Path, bytes, EpisodeReplayBuffer]) -> None:
        path, data, reference = saved
        rng = np.random.default_rng(1)
        for name, positions in self.position_classes(path, data).items():
            if name.startswith(kind):
                for pos in rng.choice(positions, min(len(positions), 20), replace=False).tolist():
                    assert self.restore_or_refuse(path, data[:pos], reference) == "refused"


def rewrite_under_old_checksums(path: Path, tables: list[pa.Table]) -> None:
    """Rewrites ``path`` with ``tables`` as its row groups (new, valid pages) and its old checksums."""
    integrity = b"ray_sampler.replay_integrity"
    record = {integrity: pq.ParquetFile(path).metadata.metadata[integrity]}
    with pq.ParquetWriter(path, tables[0].schema, write_page_checksum=True) as writer:
        for table in tables:
            writer.write_table(table.cast(tables[0].schema))
        writer.add_key_value_metadata(record)


def test_an_edited_metadata_value_is_refused_naming_it(buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    meta = replay_meta(path)
    meta["rng_state"]["state"]["state"] += 1  # the 41 silent restores of issue #11: another RNG state
    table = pq.read_table(path)
    rewrite_under_old_checksums(
        path,
        [table.replace_schema_metadata({**table.schema.metadata, b"ray_sampler.replay": json.dumps(meta).encode()})],
    )
    with pytest.raises(DataFormatError, match=r"r.parquet: schema metadata 'ray_sampler.replay' does not match its"):
        restore_buffer(path)


def test_rewritten_contents_under_the_old_checksums_are_refused_naming_the_row_group(
    buffer: EpisodeReplayBuffer, tmp_path: Path
) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path, row_group_env_steps=16)
    pf = pq.ParquetFile(path)
    tables = [pf.read_row_group(g) for g in range(pf.num_row_groups)]
    rewards = tables[1].column("reward").to_pylist()
    at = next(k for k, r in enumerate(rewards) if r is not None)
    rewards[at] += 1.0  # one changed value
    tables[1] = tables[1].set_column(tables[1].schema.get_field_index("reward"), "reward", pa.array(rewards))
    rewrite_under_old_checksums(path, tables)
    with pytest.raises(DataFormatError, match=r"r.parquet: row group 1: its contents do not match their checksum"):
        restore_buffer(path)


def test_a_file_without_checksums_is_refused_unless_unverified_is_allowed(
    buffer: EpisodeReplayBuffer, tmp_path: Path
) -> None:
    path = tmp_path / "r.parquet"
    save_buffer(buffer, path)
    rewrite_metadata(path, {})  # as a file written before checksums existed
    with pytest.raises(DataFormatError, match=r"r.parquet: footer key 'ray_sampler.replay_integrity' is missing"):
        restore_buffer(path)
    assert_buffers_equal(buffer, restore_buffer(path, allow_unverified=True))


def test_stale_temp_files_of_the_path_are_removed_and_nothing_else(tmp_path: Path) -> None:
    from replay.persistence import remove_stale_temp_files

    for name in (".r.parquet.0123abcd.tmp", ".r.parquet.ffff.tmp", ".other.parquet.0123.tmp", "r.parquet"):
        (tmp_path / name).write_bytes(b"x")
    removed = remove_stale_temp_files(tmp_path / "r.parquet")
    assert [p.name for p in removed] == [".r.parquet.0123abcd.tmp", ".r.parquet.ffff.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.parquet.0123.tmp", "r.parquet"]
    assert remove_stale_temp_files(tmp_path / "missing" / "r.parquet") == []


class TestRLlibCounters:
    def test_counters_survive_save_and_restore(self, buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
        save_buffer(buffer, tmp_path / "c.parquet")
        restored = restore_buffer(tmp_path / "c.parquet")
        assert (restored.get_sampled_timesteps(), restored.get_added_timesteps()) == (10, 120)
        assert (restored.get_num_episodes_evicted(), restored.get_num_timesteps(), restored.get_num_episodes()) == (
            buffer.get_num_episodes_evicted(),
            buffer.get_num_timesteps(),
            buffer.get_num_episodes(),
        )

    def test_a_file_from_before_the_sampled_counter_restores_with_it_at_zero(
        self, buffer: EpisodeReplayBuffer, tmp_path: Path
    ) -> None:
        path = tmp_path / "old.parquet"
        save_buffer(buffer, path)
        meta = replay_meta(path)
        del meta["num_env_steps_sampled"]
        rewrite_metadata(path, {b"ray_sampler.replay": json.dumps(meta).encode()})
        restored = restore_buffer(path, allow_unverified=True)
        assert (restored.get_sampled_timesteps(), restored.get_added_timesteps()) == (0, 120)

    def test_restore_takes_rllibs_capacity_from_the_file_too(self, buffer: EpisodeReplayBuffer, tmp_path: Path) -> None:
        save_buffer(buffer, tmp_path / "c.parquet")
        with pytest.raises(ReplayError, match=r"^restore takes \['capacity'\] from the file"):
            restore_buffer(tmp_path / "c.parquet", capacity=5)
