"""ConnectorV2: one piece of a connector pipeline, a callable that transforms a batch.

The contract (RLlib's): ``piece(*, rl_module, batch, episodes, explore=None, shared_data=None,
**kwargs) -> batch``. ``episodes`` are the episodes the batch is about (for an EnvRunner: one
ongoing episode per sub-env, in sub-env order); a piece that needs history reads it from their
lookback, never from a hidden copy of its own. ``shared_data`` is a dict the pieces of one
pipeline call share. Plain functions with this signature work as pieces too; a piece that keeps
state subclasses ConnectorV2, whose state hooks a pipeline calls.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConnectorV2", "piece_name"]


class ConnectorV2:
    """Base class of connector pieces; subclasses implement ``__call__``."""

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
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")

    @property
    def name(self) -> str:
        return type(self).__name__

    def get_state(self) -> dict[str, Any]:
        """State to sync or checkpoint (empty for stateless pieces)."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Loads ``get_state()`` output."""

    def merge_states(self, states: list[dict[str, Any]]) -> dict[str, Any]:
        """One state from the states of copies of this piece (e.g. one per runner).

        The default suits a piece whose state needs no merging: the first state given (its own
        state when given none). A piece with statistics to combine (MeanStdFilter) overrides it.
        """
        return states[0] if states else self.get_state()

    def reset_state(self) -> None:
        """Forgets what the piece learned; the default, for a stateless piece, resets nothing."""

    def __repr__(self) -> str:
        return self.name


def piece_name(piece: Any) -> str:
    """The name a pipeline knows a piece by: ``piece.name``, else the function/class name."""
    name = getattr(piece, "name", None)
    if isinstance(name, str):
        return name
    return getattr(piece, "__name__", type(piece).__name__)
