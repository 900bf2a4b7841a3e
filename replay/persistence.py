"""Parquet persistence of a replay buffer: streamed row groups, atomic writes, verified reading.

The file is the episode table of :mod:`ray_sampler.data.arrow_format` (schema version 1, one row
per observation, no pickle), with the stored episodes in insertion order (eviction order), each
as one chunk. One row group holds whole episodes, up to ``row_group_env_steps`` steps, so
writing and reading hold about one row group in memory at a time. The schema metadata adds
``ray_sampler.replay``: JSON of the buffer's :class:`~replay.state.ReplayState` without its
episodes (capacities, eviction and sampled counters, the sampling RNG's state), so a restored buffer equals
the saved one and draws the same samples.

A write goes to a temporary file (``.<name>.<random>.tmp``) in the same folder, is flushed to
disk, then renamed over the target: a crash mid-write never leaves a file that restores to wrong
data, and :func:`remove_stale_temp_files` clears what a killed writer left.

Integrity: the footer's key ``ray_sampler.replay_integrity`` holds SHA-256 digests of every
schema metadata value the restore reads (``ray_sampler.replay``, ``ray_sampler.structure``,
``ray_sampler.schema_version``), of every row group's decoded contents (ids, counters, flags,
every array with its dtype and shape, infos) and of the record itself. Pages carry checksums too.
A restore checks them all, then types and ranges; any corruption (truncation, a flipped byte
anywhere) raises DataFormatError naming the file and the field or row group, never another error,
and never yields a different state. A file without the record (written before it existed, or
rewritten by another tool) is refused unless ``allow_unverified=True``, which keeps only the type
and range checks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, StepRows
from ray_sampler.errors import DataFormatError, FileWriteError, RaySamplerError, ReplayError
from replay.buffer import EpisodeReplayBuffer
from replay.state import ReplayState

if TYPE_CHECKING:  # imported where a buffer is saved or restored: a training driver never loads pyarrow for it
    import pyarrow.parquet as pq

__all__ = ["Checkpoint", "remove_stale_temp_files", "restore_buffer", "restore_checkpoint", "save_buffer"]

_REPLAY_KEY = b"ray_sampler.replay"
_INTEGRITY_KEY = "ray_sampler.replay_integrity"
_PROTECTED = (_REPLAY_KEY, b"ray_sampler.structure", b"ray_sampler.schema_version")
_INTEGRITY_VERSION = 1


class Checkpoint(NamedTuple):
    """A restored buffer and the state record its file holds (counters, RNG state; no episodes)."""

    buffer: EpisodeReplayBuffer
    state: ReplayState


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest_columnar(col: ColumnarEpisodes) -> str:
    """SHA-256 of everything a restore takes from a row group: the same on the decoded table
    written and on the one read back, whatever Arrow's buffer layout."""
    h = hashlib.sha256()

    def text(value: Any) -> None:
        data = json.dumps(value, sort_keys=True).encode()
        h.update(len(data).to_bytes(8, "little") + data)

    def array(a: Any) -> None:
        a = np.asarray(a)
        text([a.dtype.str, list(a.shape)])
        if a.dtype == object or a.dtype.kind == "T":  # variable-width strings: their bytes hold pointers
            text([str(x) for x in a.ravel().tolist()])
        else:
            h.update(np.ascontiguousarray(a).tobytes())

    def struct(s: Any) -> None:
        text(tree.spec_of(s))
        for leaf in tree.flatten(s):
            array(leaf)

    def side(rows: StepRows) -> None:
        struct(rows.observations)
        struct(rows.actions)
        array(rows.rewards)
        text(sorted(rows.extra_model_outputs))
        for key in sorted(rows.extra_model_outputs):
            struct(rows.extra_model_outputs[key])
        array(rows.info_rows)
        text(rows.info_values)

    text(col.ids)
    for a in (col.t_started, col.lens, col.lookback_lens, col.terminated, col.truncated):
        array(a)
    side(col.data)
    side(col.lookback)
    return h.hexdigest()


def _record_digest(record: dict[str, Any]) -> str:
    return _sha256(json.dumps({k: v for k, v in record.items() if k != "self"}, sort_keys=True).encode())


def save_buffer(
    buffer: EpisodeReplayBuffer,
    path: str | os.PathLike,
    *,
    row_group_env_steps: int = 65536,
    drop_infos: bool = False,
    num_env_steps_received: int = 0,
) -> int:
    """Writes ``buffer`` to ``path`` atomically; returns the number of row groups written.
    ``num_env_steps_received``: the env steps acknowledged so far (a replay actor's count), kept
    in the file so a restore can tell how many acknowledged steps it lacks."""
    import pyarrow.parquet as pq

    from ray_sampler.data.arrow_format import arrow_to_columnar, columnar_to_arrow

    s = buffer.storage
    path = Path(path)
    state = dataclasses.replace(buffer.get_state(with_episodes=False), num_env_steps_received=num_env_steps_received)
    meta = json.dumps(state.to_metadata()).encode()
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    writer = None
    digests: list[str] = []
    schema_meta: dict[bytes, bytes] = {}
    try:
        ids = list(s.episodes)
        batch: list[str] = []
        steps = 0
        first_index = 0
        for k, id_ in enumerate(ids):
            batch.append(id_)
            steps += s.episodes[id_].num_steps
            if k == len(ids) - 1 or steps >= row_group_env_steps:
                table = columnar_to_arrow(s.episodes_columnar(batch), drop_infos=drop_infos, first_index=first_index)
                schema_meta = {**(table.schema.metadata or {}), _REPLAY_KEY: meta}
                table = table.replace_schema_metadata(schema_meta)
                digests.append(_digest_columnar(arrow_to_columnar(table)))  # what a restore will decode
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, write_page_checksum=True)
                writer.write_table(table, row_group_size=table.num_rows)
                first_index += len(batch)
                batch, steps = [], 0
        if writer is None:
            raise DataFormatError("save: the buffer holds no episodes; nothing to write")
        record: dict[str, Any] = {
            "version": _INTEGRITY_VERSION,
            "fields": {key.decode(): _sha256(schema_meta[key]) for key in _PROTECTED},
            "row_groups": digests,
        }
        record["self"] = _record_digest(record)
        writer.add_key_value_metadata({_INTEGRITY_KEY: json.dumps(record, sort_keys=True)})
        writer.close()
        writer = None
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:  # pyarrow's own says only "Failed to open local file '<the temp file>'"
        raise FileWriteError("the replay checkpoint", path, e) from e
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    return len(digests)


def remove_stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Removes the temporary files that writes to ``path`` left behind (a writer killed mid-save);
    returns them. Only for a path no other process is saving to at the same time."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    stale = sorted(path.parent.glob(f".{path.name}.*.tmp"))
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def _read_record(path: Any, pf: pq.ParquetFile) -> dict[str, Any] | None:
    """The verified integrity record, or None where the file has none."""
    raw = (pf.metadata.metadata or {}).get(_INTEGRITY_KEY.encode())
    if raw is None:
        return None
    where = f"{path}: footer key {_INTEGRITY_KEY!r}"
    try:
        record = json.loads(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DataFormatError(f"{where} is not JSON (corrupted)") from None
    if (
        not isinstance(record, dict)
        or set(record) != {"version", "fields", "row_groups", "self"}
        or not isinstance(record["fields"], dict)
        or not isinstance(record["row_groups"], list)
        or not all(isinstance(d, str) for d in [*record["fields"].values(), *record["row_groups"]])
    ):
        raise DataFormatError(f"{where} is malformed (corrupted)")
    if record["self"] != _record_digest(record):
        raise DataFormatError(f"{where} does not match its own checksum (corrupted)")
    if record["version"] != _INTEGRITY_VERSION:
        raise DataFormatError(f"{where} has version {record['version']!r}; this ray-sampler reads version 1")
    return record


def _verify_fields(path: Any, meta: dict[bytes, bytes], record: dict[str, Any]) -> None:
    for key in _PROTECTED:
        name = key.decode()
        value = meta.get(key)
        if name not in record["fields"] or value is None or _sha256(value) != record["fields"][name]:
            raise DataFormatError(f"{path}: schema metadata {name!r} does not match its checksum (corrupted)")


def restore_checkpoint(
    path: str | os.PathLike,
    *,
    seed: int | None = None,
    buffer_class: type[EpisodeReplayBuffer] | None = None,
    allow_unverified: bool = False,
    **buffer_kwargs: Any,
) -> Checkpoint:
    """The buffer saved at ``path`` and the file's state record (see ``restore_buffer``)."""
    import pyarrow.parquet as pq

    from ray_sampler.data.arrow_format import arrow_to_columnar

    buffer_class = buffer_class or EpisodeReplayBuffer
    taken = sorted({"capacity", "capacity_env_steps", "capacity_bytes", "seed"} & buffer_kwargs.keys())
    if taken:
        raise ReplayError(
            f"restore takes {taken} from the file (seed: the 'seed' argument); change capacities "
            "afterwards with set_capacity"
        )
    buffer_class(seed=seed, **buffer_kwargs)  # the caller's own arguments (e.g. alpha) raise as theirs, not the file's
    # Everything read from here on comes from the file: any failure is the file's (a corrupted footer
    # can make pyarrow raise UnicodeDecodeError, MemoryError, ...), reported as DataFormatError.
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if head != b"PAR1":  # readers check only the closing magic; a flip here is corruption too
                raise DataFormatError(
                    f"{path} is not a replay checkpoint: one is a Parquet file that ReplayActor.save or save_buffer "
                    f"wrote, starting with b'PAR1', and this one starts with {head!r} (corrupted, or another file)"
                )
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        meta = dict(pf.schema_arrow.metadata or {})
        record = _read_record(path, pf)
    except DataFormatError:
        raise
    except Exception as e:
        raise DataFormatError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    if record is None:
        if not allow_unverified:
            raise DataFormatError(
                f"{path}: footer key {_INTEGRITY_KEY!r} is missing: the file has no checksums (written before "
                "they existed, or rewritten by another tool); pass allow_unverified=True to restore it with type "
                "and range checks only"
            )
    else:
        _verify_fields(path, meta, record)
        if len(record["row_groups"]) != pf.num_row_groups:
            raise DataFormatError(
                f"{path}: the footer lists {pf.num_row_groups} row groups, its checksums "
                f"{len(record['row_groups'])} (corrupted)"
            )
    raw = meta.get(_REPLAY_KEY)
    try:
        state = ReplayState.from_metadata(json.loads(raw.decode("utf-8")) if raw is not None else None)
        buffer = buffer_class(
            capacity_env_steps=state.capacity_env_steps, capacity_bytes=state.capacity_bytes, seed=seed, **buffer_kwargs
        )
        buffer.set_state(dataclasses.replace(state, rng_state=None))  # counters and first order; episodes follow
    except (TypeError, ValueError, KeyError, RaySamplerError) as e:
        raise DataFormatError(f"{path}: schema metadata 'ray_sampler.replay' is missing or malformed ({e})") from None
    expected = 0
    group = 0
    try:
        for group in range(pf.num_row_groups):
            col = arrow_to_columnar(pf.read_row_group(group))
            if record is not None and _digest_columnar(col) != record["row_groups"][group]:
                raise DataFormatError("its contents do not match their checksum (corrupted)")
            expected += col.num_env_steps
            buffer.add(col)
    except RaySamplerError as e:
        raise DataFormatError(f"{path}: row group {group}: {e}") from None
    except Exception as e:
        raise DataFormatError(f"{path}: row group {group} cannot be read ({type(e).__name__}: {e})") from None
    if len(buffer) != expected:
        raise DataFormatError(
            f"{path}: holds {expected} env steps but only {len(buffer)} fit its own capacity "
            f"({state.capacity_env_steps} env steps); the file is inconsistent"
        )
    if seed is None and state.rng_state is not None:
        try:
            buffer.rng.bit_generator.state = state.rng_state
        except Exception:
            raise DataFormatError(f"{path}: 'rng_state' in 'ray_sampler.replay' is malformed") from None
    buffer.storage.mark_restored()
    return Checkpoint(buffer, dataclasses.replace(state, episodes=None))


def restore_buffer(
    path: str | os.PathLike,
    *,
    seed: int | None = None,
    buffer_class: type[EpisodeReplayBuffer] | None = None,
    allow_unverified: bool = False,
    **buffer_kwargs: Any,
) -> EpisodeReplayBuffer:
    """A buffer equal to the one saved at ``path`` (contents, eviction order, RNG state; ``seed``
    overrides the RNG state), built as ``buffer_class(capacity..., seed=seed, **buffer_kwargs)``
    (EpisodeReplayBuffer by default; a prioritized buffer gives every restored step the same,
    initial priority). Capacities come from the file: change them afterwards with set_capacity.
    Its episodes that were not done accept their next chunks, even after a gap (see
    EpisodeStorage.mark_restored). A corrupted file raises DataFormatError; a file without
    checksums too, unless ``allow_unverified`` (see the module docstring)."""
    return restore_checkpoint(
        path, seed=seed, buffer_class=buffer_class, allow_unverified=allow_unverified, **buffer_kwargs
    ).buffer
