"""ConnectorPipelineV2: an ordered list of pieces that is itself a piece (so pipelines nest).

>>> from connectors.connector_v2 import ConnectorV2
>>> class AddOne(ConnectorV2):
...     def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kw):
...         return {**batch, "x": batch.get("x", 0) + 1}
>>> class Double(AddOne):
...     def __call__(self, *, rl_module, batch, episodes, explore=None, shared_data=None, **kw):
...         return {**batch, "x": batch["x"] * 2}
>>> pipe = ConnectorPipelineV2([AddOne()])
>>> pipe.append(Double())
>>> pipe.insert_before("Double", AddOne())
>>> pipe(rl_module=None, batch={}, episodes=[])["x"]
4
>>> print(pipe)
ConnectorPipelineV2(
  AddOne
  AddOne
  Double
)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from connectors.connector_v2 import ConnectorV2, piece_name

__all__ = ["ConnectorPipelineV2"]


class ConnectorPipelineV2(ConnectorV2):
    """Runs its pieces in order, each on the batch the previous one returned."""

    def __init__(self, connectors: list[Any] | None = None, *, name: str | None = None) -> None:
        self.connectors: list[Any] = []
        self._name = name
        for piece in connectors or []:
            self.append(piece)

    @property
    def name(self) -> str:
        return self._name or type(self).__name__

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        if shared_data is None:
            shared_data = {}
        for piece in self.connectors:
            batch = piece(
                rl_module=rl_module, batch=batch, episodes=episodes, explore=explore, shared_data=shared_data, **kwargs
            )
            if batch is None:
                raise TypeError(f"connector piece {piece_name(piece)!r} returned None; pieces must return the batch")
        return batch

    # ---------------------------------------------------------------- editing
    def append(self, piece: Any) -> None:
        self.connectors.append(_checked(piece))

    def prepend(self, piece: Any) -> None:
        self.connectors.insert(0, _checked(piece))

    def insert_before(self, target: str | type, piece: Any) -> None:
        """Inserts ``piece`` before the first piece named ``target`` (or of class ``target``)."""
        self.connectors.insert(self._index_of(target), _checked(piece))

    def insert_after(self, target: str | type, piece: Any) -> None:
        """Inserts ``piece`` after the first piece named ``target`` (or of class ``target``)."""
        self.connectors.insert(self._index_of(target) + 1, _checked(piece))

    def remove(self, target: str | type) -> Any:
        """Removes and returns the first piece named ``target`` (or of class ``target``)."""
        return self.connectors.pop(self._index_of(target))

    def _index_of(self, target: str | type) -> int:
        for i, piece in enumerate(self.connectors):
            if (isinstance(target, type) and isinstance(piece, target)) or piece_name(piece) == target:
                return i
        names = [piece_name(p) for p in self.connectors]
        raise ValueError(
            f"no connector piece {getattr(target, '__name__', target)!r} in pipeline {self.name!r} (pieces: {names})"
        )

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.connectors)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.connectors)

    def __getitem__(self, index: int) -> Any:
        return self.connectors[index]

    def __repr__(self) -> str:
        lines = [f"{self.name}("]
        for piece in self.connectors:
            lines += ["  " + line for line in repr(piece).splitlines()]
        return "\n".join([*lines, ")"])

    # ---------------------------------------------------------------- state (by piece name, never position)
    def _keys(self) -> list[str]:
        seen: dict[str, int] = {}
        keys = []
        for piece in self.connectors:
            name = piece_name(piece)
            seen[name] = seen.get(name, 0) + 1
            keys.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
        return keys

    def get_state(self) -> dict[str, Any]:
        return {key: p.get_state() for key, p in zip(self._keys(), self.connectors) if hasattr(p, "get_state")}

    def set_state(self, state: dict[str, Any]) -> None:
        for key, piece in zip(self._keys(), self.connectors):
            if key in state and hasattr(piece, "set_state"):
                piece.set_state(state[key])

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state from copies of this pipeline (e.g. one per runner), merged piece by piece and
        matched by name, never position: each ConnectorV2 piece by its ``merge_states``; other
        callables keep the first."""
        merged = {}
        for key, piece in zip(self._keys(), self.connectors):
            parts = [s[key] for s in states if key in s]
            if parts:
                merged[key] = piece.merge_states(parts) if isinstance(piece, ConnectorV2) else parts[0]
        return merged

    def reset_state(self) -> None:
        """Resets every ConnectorV2 piece (plain functions hold no state)."""
        for piece in self.connectors:
            if isinstance(piece, ConnectorV2):
                piece.reset_state()


def _checked(piece: Any) -> Any:
    if not callable(piece):
        raise TypeError(f"a connector piece must be a ConnectorV2 or a callable (got {piece!r})")
    return piece
