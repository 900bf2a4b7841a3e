"""ConnectorPipelineV2: editing, nesting, repr, state by piece name (get, set, merge, reset)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.connector_v2 import ConnectorV2
from connectors.pipeline import ConnectorPipelineV2


class Tag(ConnectorV2):
    """Appends its tag to batch["trace"]; counts calls in its state."""

    def __init__(self, tag: str) -> None:
        self.tag, self.calls = tag, 0

    @property
    def name(self) -> str:
        return f"Tag[{self.tag}]"

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict,
        episodes: list,
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> dict:
        self.calls += 1
        shared_data.setdefault("seen", []).append(self.tag)
        return {**batch, "trace": batch.get("trace", "") + self.tag}

    def get_state(self) -> dict:
        return {"calls": self.calls}

    def set_state(self, state: dict) -> None:
        self.calls = state["calls"]

    def reset_state(self) -> None:
        self.calls = 0


def run(pipe: ConnectorPipelineV2) -> str:
    return pipe(rl_module=None, batch={}, episodes=[])["trace"]


def test_append_prepend_insert_remove() -> None:
    pipe = ConnectorPipelineV2([Tag("b")])
    pipe.append(Tag("d"))
    pipe.prepend(Tag("a"))
    pipe.insert_before("Tag[d]", Tag("c"))
    pipe.insert_after("Tag[d]", Tag("e"))
    assert run(pipe) == "abcde"
    removed = pipe.remove("Tag[c]")
    assert removed.tag == "c" and run(pipe) == "abde"
    pipe.insert_after(Tag, Tag("x"))  # by class: after the first Tag
    assert run(pipe) == "axbde"


def test_nested_pipelines_run_in_order_and_share_data() -> None:
    inner = ConnectorPipelineV2([Tag("2"), Tag("3")], name="Inner")
    outer = ConnectorPipelineV2([Tag("1"), inner, Tag("4")])
    shared: dict = {}
    out = outer(rl_module=None, batch={}, episodes=[], shared_data=shared)
    assert out["trace"] == "1234" and shared["seen"] == ["1", "2", "3", "4"]
    assert repr(outer) == "ConnectorPipelineV2(\n  Tag[1]\n  Inner(\n    Tag[2]\n    Tag[3]\n  )\n  Tag[4]\n)"


def test_plain_functions_are_pieces() -> None:
    def add_x(*, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        return {**batch, "x": 1}

    pipe = ConnectorPipelineV2([add_x])
    assert pipe(rl_module=None, batch={}, episodes=[]) == {"x": 1}
    assert "add_x" in repr(pipe)


def test_missing_target_and_bad_piece_raise() -> None:
    pipe = ConnectorPipelineV2([Tag("a")])
    with pytest.raises(
        ValueError, match=r"no connector piece 'Nope' in pipeline 'ConnectorPipelineV2' \(pieces: \['Tag\[a\]'\]\)"
    ):
        pipe.remove("Nope")
    with pytest.raises(TypeError, match="must be a ConnectorV2 or a callable"):
        pipe.append(5)


def test_piece_returning_none_raises() -> None:
    pipe = ConnectorPipelineV2([lambda **kw: None])
    with pytest.raises(TypeError, match="returned None"):
        pipe(rl_module=None, batch={}, episodes=[])


def test_state_is_keyed_by_piece_name_not_position() -> None:
    a, b = Tag("a"), Tag("b")
    pipe = ConnectorPipelineV2([a, b])
    run(pipe)
    run(pipe)
    state = pipe.get_state()
    assert state == {"Tag[a]": {"calls": 2}, "Tag[b]": {"calls": 2}}
    reordered = ConnectorPipelineV2([Tag("b"), Tag("new"), Tag("a")])
    reordered.set_state({"Tag[a]": {"calls": 7}, "Tag[b]": {"calls": 9}})
    assert [p.calls for p in reordered] == [9, 0, 7]


def test_merge_keeps_the_first_state_of_pieces_that_do_not_merge() -> None:
    pipe = ConnectorPipelineV2([Tag("a"), lambda **kw: kw["batch"]])
    merged = pipe.merge_states([{"Tag[a]": {"calls": 1}}, {"Tag[a]": {"calls": 2}, "<lambda>": {"x": 1}}])
    assert merged == {"Tag[a]": {"calls": 1}, "<lambda>": {"x": 1}}


def test_reset_state_resets_every_piece_nested_ones_too() -> None:
    inner = ConnectorPipelineV2([Tag("b")], name="Inner")
    pipe = ConnectorPipelineV2([Tag("a"), inner, lambda **kw: kw["batch"]])
    run(pipe)
    pipe.reset_state()
    assert pipe.get_state() == {"Tag[a]": {"calls": 0}, "Inner": {"Tag[b]": {"calls": 0}}}
