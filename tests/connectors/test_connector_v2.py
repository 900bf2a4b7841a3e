"""ConnectorV2: the base class's defaults (name, state hooks) and piece_name."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.connector_v2 import ConnectorV2, piece_name


class Stateless(ConnectorV2):
    def __call__(self, *, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        return batch


def test_a_piece_is_known_by_its_class_name() -> None:
    assert Stateless().name == "Stateless" and repr(Stateless()) == "Stateless"


def test_piece_name_of_functions_and_pieces() -> None:
    def add_x(**kwargs: Any) -> dict:
        return {}

    assert piece_name(add_x) == "add_x" and piece_name(Stateless()) == "Stateless"


def test_call_must_be_implemented() -> None:
    with pytest.raises(NotImplementedError, match="ConnectorV2 must implement __call__"):
        ConnectorV2()(rl_module=None, batch={}, episodes=[])


def test_a_stateless_piece_has_an_empty_state() -> None:
    piece = Stateless()
    piece.set_state({"anything": 1})
    assert piece.get_state() == {}


def test_default_merge_keeps_the_first_state() -> None:
    assert Stateless().merge_states([{"a": 1}, {"a": 2}]) == {"a": 1}


def test_default_merge_of_no_states_is_the_piece_own_state() -> None:
    assert Stateless().merge_states([]) == {}


def test_default_reset_changes_nothing() -> None:
    piece = Stateless()
    piece.reset_state()
    assert piece.get_state() == {}
