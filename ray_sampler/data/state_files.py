"""Verified state directories: JSON plus one ``.npz`` of arrays, no pickle, written atomically.

Training checkpoints (``learner.checkpoint``) and saved policies (``ray_sampler.policy``) share this
form. A nested value of dicts, lists, numbers, strings and numpy arrays is split into JSON, each
array replaced by a reference into the ``.npz`` (read back with ``allow_pickle=False``), NaN and inf
kept as tagged strings. The JSON holds the SHA-256 of every other file of the directory and a
SHA-256 of its own content (over its canonical JSON), so a changed byte is refused on load, never
loaded as another value. A directory is written into a temporary sibling, each file fsynced, then
renamed into place: a crash leaves the old directory or the new one, never half of either.

>>> arrays = {}
>>> encoded = encode({"w": np.ones(2, np.float32), "best": float("nan")}, arrays, "state")
>>> encoded
{'w': {'__ndarray__': 'state/w'}, 'best': {'__float__': 'nan'}}
>>> back = decode(encoded, arrays); back["w"].tolist(), back["best"] != back["best"]
([1.0, 1.0], True)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ray_sampler.errors import ConfigError

__all__ = [
    "StateFileError",
    "content_digest",
    "decode",
    "encode",
    "fsync_dir",
    "read_verified",
    "replace_dir",
    "sha256_file",
    "write_bytes",
    "write_verified",
]

_ARRAY = "__ndarray__"
_FLOAT = "__float__"  # NaN and inf, which JSON does not have


class StateFileError(ConfigError):
    """A state file that cannot be written or read back: a value of a kind not saved, a missing or
    changed file, another format."""


def encode(value: Any, arrays: dict[str, np.ndarray], path: str, *, error: type[Exception] = StateFileError) -> Any:
    """``value`` as JSON, its arrays moved into ``arrays`` under their path (``error`` for a value
    that is not saved: an object array, a dict with keys that are not strings, another type)."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise error(f"checkpoint: {path} is an object array (only plain arrays are saved)")
        arrays[path] = value
        return {_ARRAY: path}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise error(f"checkpoint: {path} has keys that are not strings")
        return {k: encode(v, arrays, f"{path}/{k}", error=error) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v, arrays, f"{path}/{i}", error=error) for i, v in enumerate(value)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT: repr(value)}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise error(f"checkpoint: {path} is a {type(value).__name__}, which is not saved")


def decode(value: Any, arrays: Any) -> Any:
    """``encode``'s JSON back, with its arrays from ``arrays`` (KeyError for a missing one)."""
    if isinstance(value, dict):
        if set(value) == {_ARRAY}:
            return arrays[value[_ARRAY]]
        if set(value) == {_FLOAT}:
            return float(value[_FLOAT])
        return {k: decode(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v, arrays) for v in value]
    return value


def content_digest(meta: dict[str, Any]) -> str:
    """SHA-256 of ``meta`` as canonical JSON (sorted keys, no spaces): what a JSON file holds,
    whatever its layout."""
    return hashlib.sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_bytes(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path``, fsynced."""
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_verified(directory: Path, json_name: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Writes ``arrays`` as ``<json_name stem>.npz`` and ``meta`` as ``json_name`` into the existing
    ``directory``, with ``files`` (the SHA-256 of every other file under ``directory``) and ``sha256``
    (the digest of the JSON's own content) added to ``meta``."""
    import io

    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    write_bytes(directory / f"{Path(json_name).stem}.npz", buffer.getvalue())
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != json_name)
    meta["files"] = {p.relative_to(directory).as_posix(): sha256_file(p) for p in files}
    meta["sha256"] = content_digest(meta)
    write_bytes(directory / json_name, json.dumps(meta, indent=1, sort_keys=True).encode())
    fsync_dir(directory)


def read_verified(directory: Path, json_name: str, *, fmt: str, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta, arrays) of a directory ``write_verified`` wrote, checked: the format ``fmt``, the JSON's
    own digest, every listed file's hash. ``StateFileError`` naming ``what`` and the file otherwise."""
    try:
        meta = json.loads((directory / json_name).read_bytes())
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise StateFileError(f"{what} {directory} cannot be read: {json_name}: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise StateFileError(f"{what} {directory} is not a {fmt} {what} ({json_name}'s format: {got!r})")
    if meta.pop("sha256", None) != content_digest(meta):
        raise StateFileError(f"{what} {directory} is corrupt: {json_name} does not match its own digest")
    files = meta.get("files")
    npz = f"{Path(json_name).stem}.npz"
    if not isinstance(files, dict) or npz not in files:
        raise StateFileError(f"{what} {directory}: {json_name} lists no files")
    for name, digest in files.items():
        file = directory / str(name)
        if not file.is_file() or sha256_file(file) != digest:
            raise StateFileError(f"{what} {directory} is corrupt: {name} is missing or does not match its hash")
    try:
        with np.load(directory / npz, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise StateFileError(f"{what} {directory} is corrupt: {npz}: {e}") from None
    return meta, arrays


def replace_dir(final: Path, write: Callable[[Path], None]) -> Path:
    """Makes directory ``final`` anew: ``write(tmp)`` fills a temporary sibling, which is then renamed
    into place (an older ``final`` is moved aside first and removed after), so a reader sees the
    old directory or the new one whole, never a mix (a crash between the two renames leaves the old
    one as ``.<name>.tmp-old-*``). Leftovers of an interrupted call are removed first."""
    parent = final.parent
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = parent / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        fsync_dir(tmp)
        old = None
        if final.exists():
            old = parent / f".{final.name}.tmp-old-{uuid.uuid4().hex[:8]}"
            final.rename(old)
        tmp.rename(final)
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final
