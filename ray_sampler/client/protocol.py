"""The external-simulator protocol: framing, the array form and the checks both ends share.

A message is a 4-byte unsigned big-endian length, then that many bytes of UTF-8 JSON holding one
object with a ``"type"``. JSON, not msgpack: every language a simulator is written in reads it with
no extra library. Numbers in observations and actions may be plain (nested) JSON lists; bulk arrays
(weights) travel as ``{"$array": {"dtype": "float32", "shape": [..], "data": "<base64>"}}``, the
bytes little-endian in C order. docs/external.md is the reference a client in another language
follows. This module imports only the standard library and numpy, so the client package can be
copied into a simulator's own code.

>>> decode_array(encode_array(np.arange(3, dtype=np.float32))).tolist()
[0.0, 1.0, 2.0]
>>> body = frame({"type": "ok"})
>>> int.from_bytes(body[:4], "big"), body[4:]
(14, b'{"type": "ok"}')
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from typing import Any

import numpy as np

__all__ = [
    "HEADER",
    "MAX_HANDSHAKE_BYTES",
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "ServerError",
    "decode_array",
    "encode_array",
    "frame",
    "parse",
    "read_message",
    "space_to_wire",
    "to_json_value",
]

PROTOCOL_VERSION = 1
"""The version a client's ``hello`` names; a server answers any other with an error and closes."""

HEADER = struct.Struct(">I")
"""The length prefix: 4 bytes, unsigned, big-endian."""

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The default largest body a server reads (``ExternalConfig.max_message_bytes``)."""

MAX_HANDSHAKE_BYTES = 64 * 1024
"""The largest body a server reads before a connection is authenticated (its ``hello``)."""

_DTYPES = {"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"}


class ProtocolError(Exception):
    """A message broke the protocol (framing, JSON, a field); the message says which and how."""


class ServerError(Exception):
    """The server answered a request with an error (its one line is the message)."""


def frame(message: dict[str, Any]) -> bytes:
    """``message`` as bytes on the wire: the length header and the JSON body."""
    body = json.dumps(message, separators=(", ", ": "), allow_nan=False).encode()
    return HEADER.pack(len(body)) + body


def parse(body: bytes) -> dict[str, Any]:
    """The message in ``body``; ProtocolError unless it is a JSON object with a string ``type``."""
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"a message must be UTF-8 JSON ({type(e).__name__}: {e})") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError('a message must be a JSON object with a string "type"')
    return message


def read_message(sock: socket.socket, *, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """One message from a blocking socket; ConnectionError when the peer closed, ProtocolError for
    a body over ``max_bytes`` or one that is no message."""
    (size,) = HEADER.unpack(_read_exactly(sock, HEADER.size))
    if size > max_bytes:
        raise ProtocolError(f"message of {size} bytes is over the limit of {max_bytes}")
    return parse(_read_exactly(sock, size))


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    parts, left = [], n
    while left:
        part = sock.recv(min(left, 1 << 20))
        if not part:
            raise ConnectionError("the connection closed")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def encode_array(array: np.ndarray) -> dict[str, Any]:
    """``array`` in the protocol's binary form (little-endian, C order, base64)."""
    a = np.ascontiguousarray(array)
    if a.dtype.name not in _DTYPES:
        raise ProtocolError(f"an array's dtype must be one of {sorted(_DTYPES)} (got {a.dtype.name})")
    data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    return {"$array": {"dtype": a.dtype.name, "shape": list(a.shape), "data": base64.b64encode(data).decode()}}


def decode_array(value: Any, dtype: Any = None) -> np.ndarray:
    """An array from the binary form or a (nested) JSON list or number; ``dtype`` casts it.
    ProtocolError for a malformed binary form or a list that is no rectangular array of numbers."""
    if isinstance(value, dict):
        spec = value.get("$array")
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data"}:
            raise ProtocolError('an array object must be {"$array": {"dtype", "shape", "data"}}')
        kind, shape = spec["dtype"], spec["shape"]
        if kind not in _DTYPES or not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ProtocolError(f"an array's dtype must be one of {sorted(_DTYPES)} and its shape a list of ints >= 0")
        try:
            raw = base64.b64decode(spec["data"], validate=True)
            out = np.frombuffer(raw, dtype=np.dtype(kind).newbyteorder("<")).reshape(shape)
        except (TypeError, ValueError) as e:
            raise ProtocolError(f"an array's data must be base64 of its shape's bytes ({e})") from None
        out = out.astype(np.dtype(kind))  # native byte order, writable
    else:
        if isinstance(value, bool) or not isinstance(value, int | float | list):
            raise ProtocolError(f"an array must be a number, a list of numbers or an array object (got {_kind(value)})")
        try:
            out = np.array(value)
        except ValueError:
            raise ProtocolError("an array's lists must be rectangular") from None
        if out.dtype.kind not in "iuf":
            raise ProtocolError("an array's lists must hold numbers only")
    return out if dtype is None else out.astype(dtype, copy=False)


def to_json_value(value: Any) -> Any:
    """``value`` (numpy scalars and arrays inside dicts and lists) as plain JSON values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    return value


def _kind(value: Any) -> str:
    return type(value).__name__


def space_to_wire(space: Any, name: str) -> dict[str, Any]:
    """A space in the protocol's form (``{"spec", "arrays"}``, as a server's ``welcome`` sends it):
    the form itself, or a Box or Discrete space (anything with their attributes: no gymnasium
    import). ``name`` (``observation_space`` / ``action_space``) prefixes the bounds' paths."""
    if isinstance(space, dict):
        return space
    if all(hasattr(space, a) for a in ("low", "high", "shape", "dtype")):
        low, high = f"{name}/low", f"{name}/high"
        spec = {"type": "Box", "low": low, "high": high, "dtype": str(np.dtype(space.dtype))}
        return {
            "spec": spec,
            "arrays": {low: encode_array(np.asarray(space.low)), high: encode_array(np.asarray(space.high))},
        }
    if hasattr(space, "n") and hasattr(space, "dtype"):
        start = int(getattr(space, "start", 0))
        return {
            "spec": {"type": "Discrete", "n": int(space.n), "start": start, "dtype": str(np.dtype(space.dtype))},
            "arrays": {},
        }
    raise ProtocolError(
        f"{name}: a Box or Discrete space or the protocol's form is allowed (got {type(space).__name__})"
    )
