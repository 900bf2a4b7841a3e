"""Parquet persistence of a MultiAgentEpisodeReplayBuffer: a folder, written atomically, verified on restore.

The folder holds one Parquet file per module, each a single-agent replay file
(:mod:`replay.persistence`: the episode table of :mod:`ray_sampler.data.arrow_format`, its own
checksums), and ``multi_agent.json``: the format name, the capacity, the counters, the sampling
RNG's state, each module's file with the SHA-256 of its bytes, and one record per stored
multi-agent episode (env-step span, flags, and per agent: its module, the observation index of
its first stored observation and the env step of each stored observation; agent ids are JSON
strings or ints). The JSON ends with the SHA-256 of everything else in it. Nothing is pickled.

A save writes a new folder beside the target and renames it into place (the previous folder is
removed after), so a crash leaves the old checkpoint or the new one, never a mix. A restore checks
the JSON's digest and every module file's digest before it reads anything, then each file's own
checksums: any damage raises DataFormatError naming the folder and the part, never a different
buffer. Episodes that were running accept their next chunk after a gap, as single-agent
restores do.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from ray_sampler.errors import DataFormatError, FileWriteError
from replay.multi_agent_buffer import COUNTERS, MultiAgentEpisodeReplayBuffer
from replay.multi_agent_record import MultiAgentRecord
from replay.persistence import restore_buffer, save_buffer

__all__ = ["FORMAT", "restore_multi_agent_buffer", "save_multi_agent_buffer"]

FORMAT = "ray-sampler-multi-agent-replay/1"
_MANIFEST = "multi_agent.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def save_multi_agent_buffer(buffer: MultiAgentEpisodeReplayBuffer, path: str | os.PathLike) -> Path:
    """Writes ``buffer`` to the folder ``path`` atomically (see the module docstring); returns it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.mkdir(parents=False)
        modules = []
        for k, (mid, buf) in enumerate(sorted(buffer.modules.items())):
            name = f"module-{k}.parquet"
            save_buffer(buf, tmp / name)
            modules.append({"id": mid, "file": name, "sha256": _sha256((tmp / name).read_bytes())})
        record: dict[str, Any] = {
            "format": FORMAT,
            "capacity_env_steps": buffer.capacity_env_steps,
            "batch_size_B": buffer.batch_size_B,
            "num_env_steps": buffer.get_num_timesteps(),
            "counters": {name: getattr(buffer, name) for name in COUNTERS},
            "num_module_steps_sampled": buffer.num_module_steps_sampled,
            "rng": buffer.rng.bit_generator.state,
            "modules": modules,
            "records": [rec.to_plain(id_) for id_, rec in buffer.records.items()],
        }
        record["sha256"] = _sha256(_canonical(record))
        with open(tmp / _MANIFEST, "wb") as f:
            f.write(_canonical(record))
            f.flush()
            os.fsync(f.fileno())
        old = path.with_name(f".{path.name}.{uuid.uuid4().hex}.old")
        if path.exists():
            path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise FileWriteError("the multi-agent replay checkpoint", path, e) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def restore_multi_agent_buffer(path: str | os.PathLike, *, seed: int | None = None) -> MultiAgentEpisodeReplayBuffer:
    """A buffer equal to the one saved in the folder ``path`` (``seed`` overrides the saved RNG
    state); DataFormatError, naming the part, if anything in it is damaged or missing."""
    path = Path(path)
    try:
        raw = (path / _MANIFEST).read_bytes()
    except OSError as e:
        raise DataFormatError(f"multi-agent replay checkpoint {path}: cannot read {_MANIFEST}: {e.strerror}") from e
    try:
        record = json.loads(raw)
        if not isinstance(record, dict):
            raise ValueError("not an object")
    except ValueError as e:
        raise DataFormatError(f"multi-agent replay checkpoint {path}: {_MANIFEST} is not valid JSON: {e}") from e
    digest = record.pop("sha256", None)
    if digest != _sha256(_canonical(record)):
        raise DataFormatError(f"multi-agent replay checkpoint {path}: {_MANIFEST} does not match its digest")
    if record.get("format") != FORMAT:
        raise DataFormatError(
            f"multi-agent replay checkpoint {path}: format {record.get('format')!r}, expected {FORMAT!r}"
        )
    for m in record["modules"]:
        file = path / m["file"]
        try:
            data = file.read_bytes()
        except OSError as e:
            raise DataFormatError(f"multi-agent replay checkpoint {path}: module {m['id']!r}: {e.strerror}") from e
        if _sha256(data) != m["sha256"]:
            raise DataFormatError(
                f"multi-agent replay checkpoint {path}: module {m['id']!r}'s file {m['file']} does not match its digest"
            )
    buffer = MultiAgentEpisodeReplayBuffer(
        capacity_env_steps=record["capacity_env_steps"], batch_size_B=record["batch_size_B"], seed=seed
    )
    if seed is None:
        buffer.rng.bit_generator.state = record["rng"]
    for m in record["modules"]:
        buffer.modules[m["id"]] = restore_buffer(path / m["file"])
    for name, value in record["counters"].items():
        if name in COUNTERS:
            setattr(buffer, name, int(value))
    buffer.num_module_steps_sampled = {str(k): int(v) for k, v in record.get("num_module_steps_sampled", {}).items()}
    for r in record["records"]:
        rec = MultiAgentRecord.from_plain(r)
        rec.restored_open = not rec.is_done  # chunks made after the save were lost: a gap may come
        buffer.records[r["id"]] = rec
    buffer._num_env_steps = int(record["num_env_steps"])  # noqa: SLF001  # the buffer's own count, saved whole
    return buffer
