"""The protocol's framing and array form, as both ends use them."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from ray_sampler.client.protocol import (
    HEADER,
    ProtocolError,
    decode_array,
    encode_array,
    frame,
    parse,
    read_message,
    to_json_value,
)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "uint8", "bool"])
def test_an_array_comes_back_exactly(dtype: str) -> None:
    a = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    back = decode_array(encode_array(a))
    assert back.dtype == a.dtype and back.shape == (3, 4) and np.array_equal(back, a)


def test_the_bytes_are_little_endian_whatever_the_arrays_order() -> None:
    big = np.array([1, 2], dtype=">i4")
    assert encode_array(big)["$array"]["data"] == encode_array(np.array([1, 2], dtype="<i4"))["$array"]["data"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"$array": {"dtype": "float32", "shape": [3], "data": "AAAA"}}, "base64 of its shape's bytes"),
        ({"$array": {"dtype": "complex64", "shape": [1], "data": ""}}, "dtype must be one of"),
        ({"$array": {"dtype": "float32"}}, r'must be \{"\$array"'),
        ([[1, 2], [3]], "rectangular"),
        (["a", "b"], "numbers only"),
        ("text", "must be a number, a list of numbers"),
        (True, "must be a number, a list of numbers"),
    ],
    ids=["short-data", "dtype", "fields", "ragged", "strings", "string", "bool"],
)
def test_a_malformed_array_is_one_protocol_error(value: object, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        decode_array(value)


def test_a_message_is_its_length_then_json() -> None:
    data = frame({"type": "action", "action": 1})
    (size,) = HEADER.unpack(data[:4])
    assert size == len(data) - 4 and parse(data[4:]) == {"type": "action", "action": 1}


@pytest.mark.parametrize(
    ("body", "error"),
    [(b"\xff", "UTF-8 JSON"), (b"[1]", 'string "type"'), (b'{"type": 3}', 'string "type"'), (b"{", "UTF-8 JSON")],
)
def test_a_body_that_is_no_message_is_refused(body: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        parse(body)


def test_reading_refuses_a_message_over_the_limit_and_sees_a_close() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(frame({"type": "ok"}) + HEADER.pack(1000))
        assert read_message(b) == {"type": "ok"}
        with pytest.raises(ProtocolError, match="1000 bytes is over the limit of 10"):
            read_message(b, max_bytes=10)
        a.close()
        with pytest.raises(ConnectionError):
            read_message(b)


def test_nan_is_never_written() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        frame({"type": "get_action", "observation": [float("nan")]})


def test_numpy_values_become_plain_json() -> None:
    value = {"a": np.float32(0.5), "b": np.arange(2), "c": [np.int64(3)], 4: (1, 2)}
    assert to_json_value(value) == {"a": 0.5, "b": [0, 1], "c": [3], "4": [1, 2]}


@pytest.mark.parametrize("space", ["box", "discrete"])
def test_a_clients_space_is_the_servers_form(space: str) -> None:
    import gymnasium as gym

    from ray_sampler.client.protocol import space_to_wire
    from ray_sampler.sampling.external_values import same_space, space_message

    s = gym.spaces.Box(-1.0, 2.0, (3,), np.float32) if space == "box" else gym.spaces.Discrete(4, start=2)
    assert same_space(space_message(s, "observation_space"), space_to_wire(s, "observation_space"))
    other = gym.spaces.Box(-1.0, 3.0, (3,), np.float32) if space == "box" else gym.spaces.Discrete(5, start=2)
    assert not same_space(space_message(s, "observation_space"), space_to_wire(other, "observation_space"))
    with pytest.raises(ProtocolError, match="a Box or Discrete space"):
        space_to_wire(gym.spaces.Text(5), "observation_space")
