"""Parquet persistence of a replay buffer: streamed row groups, atomic writes, strict reading.

The file is the episode table of :mod:`ray_sampler.data.arrow_format` (schema version 1, one row
per observation, no pickle), with the stored episodes in insertion order (eviction order), each
as one chunk. One row group holds whole episodes, up to ``row_group_env_steps`` steps, so
writing and reading hold about one row group in memory at a time. The schema metadata adds
``ray_sampler.replay``: JSON of the buffer's :class:`~replay.state.ReplayState` without its
episodes (capacities, eviction counters, the sampling RNG's state), so a restored buffer equals
the saved one and draws the same samples.

A write goes to a temporary file in the same folder, is flushed to disk, then renamed over
the target: a crash mid-write never leaves a file that restores to wrong data. Pages carry
checksums, checked on read. A truncated file, another schema, a newer schema version or a
corrupted column raises DataFormatError naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ray_sampler.data.arrow_format import arrow_to_columnar, columnar_to_arrow
from ray_sampler.errors import DataFormatError, RaySamplerError, ReplayError
from replay.buffer import EpisodeReplayBuffer
from replay.state import ReplayState

__all__ = ["restore_buffer", "save_buffer"]

_REPLAY_KEY = b"ray_sampler.replay"


def save_buffer(
    buffer: EpisodeReplayBuffer, path: str | os.PathLike, *, row_group_env_steps: int = 65536, drop_infos: bool = False
) -> int:
    """Writes ``buffer`` to ``path`` atomically; returns the number of row groups written."""
    s = buffer.storage
    path = Path(path)
    meta = buffer.get_state(with_episodes=False).to_metadata()
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    writer = None
    groups = 0
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
                schema_meta = {**(table.schema.metadata or {}), _REPLAY_KEY: json.dumps(meta).encode()}
                table = table.replace_schema_metadata(schema_meta)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, write_page_checksum=True)
                writer.write_table(table, row_group_size=table.num_rows)
                groups += 1
                first_index += len(batch)
                batch, steps = [], 0
        if writer is None:
            raise DataFormatError("save: the buffer holds no episodes; nothing to write")
        writer.close()
        writer = None
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if writer is not None:
            writer.close()
        if tmp.exists():
            tmp.unlink()
    return groups


def restore_buffer(
    path: str | os.PathLike,
    *,
    seed: int | None = None,
    buffer_class: type[EpisodeReplayBuffer] | None = None,
    **buffer_kwargs: Any,
) -> EpisodeReplayBuffer:
    """A buffer equal to the one saved at ``path`` (contents, eviction order, RNG state; ``seed``
    overrides the RNG state), built as ``buffer_class(capacity..., seed=seed, **buffer_kwargs)``
    (EpisodeReplayBuffer by default; a prioritized buffer gives every restored step the same,
    initial priority). Capacities come from the file: change them afterwards with set_capacity."""
    buffer_class = buffer_class or EpisodeReplayBuffer
    taken = sorted({"capacity_env_steps", "capacity_bytes", "seed"} & buffer_kwargs.keys())
    if taken:
        raise ReplayError(
            f"restore takes {taken} from the file (seed: the 'seed' argument); change capacities "
            "afterwards with set_capacity"
        )
    buffer_class(seed=seed, **buffer_kwargs)  # the caller's own arguments (e.g. alpha) raise as theirs, not the file's
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        raise DataFormatError(f"{path}: not a readable Parquet file ({e})") from e
    raw = (pf.schema_arrow.metadata or {}).get(_REPLAY_KEY)
    try:
        state = ReplayState.from_metadata(json.loads(raw) if raw is not None else None)
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
            expected += col.num_env_steps
            buffer.add(col)
    except (pa.ArrowException, OSError) as e:
        raise DataFormatError(f"{path}: row group {group} cannot be read ({e})") from e
    except RaySamplerError as e:
        raise DataFormatError(f"{path}: row group {group}: {e}") from e
    if len(buffer) != expected:
        raise DataFormatError(
            f"{path}: holds {expected} env steps but only {len(buffer)} fit its own capacity "
            f"({state.capacity_env_steps} env steps); the file is inconsistent"
        )
    if seed is None and state.rng_state is not None:
        try:
            buffer.rng.bit_generator.state = state.rng_state
        except (TypeError, ValueError, KeyError):
            raise DataFormatError(f"{path}: 'rng_state' in 'ray_sampler.replay' is malformed") from None
    return buffer
