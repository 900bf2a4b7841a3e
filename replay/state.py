"""ReplayState: one record of a replay buffer's state, for ``get_state``/``set_state`` and the
``ray_sampler.replay`` JSON metadata of a saved Parquet file (every field but ``episodes``), and its
plain-data form (``state_to_plain``: dicts, ints and bytes, nothing pickled) that a multi-agent
buffer's ``get_state`` nests.

>>> state = ReplayState(capacity_env_steps=100, first_order=3)
>>> ReplayState.from_metadata(state.to_metadata()) == state
True
>>> ReplayState.from_metadata({"capacity_env_steps": 0})
Traceback (most recent call last):
...
ray_sampler.errors.DataFormatError: 'capacity_env_steps' must be an int >= 1 (got 0)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.errors import DataFormatError, first_line
from ray_sampler.validate import check_dict, check_int, check_optional

__all__ = ["ReplayState", "state_from_plain", "state_to_plain"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayState:
    """Contents, capacities, counters and sampling RNG state of a replay buffer."""

    capacity_env_steps: int
    """Env steps kept (lookback never counts)."""
    capacity_bytes: int | None = None
    """Optional bound on the stored steps' bytes."""
    num_evicted_episodes: int = 0
    """Episodes evicted so far."""
    num_evicted_env_steps: int = 0
    """Env steps evicted so far."""
    num_env_steps_sampled: int = 0
    """Items sampled so far (``get_sampled_timesteps``; 0 in files written before it was kept)."""
    first_order: int = 0
    """Insertion counter of the oldest stored episode (sampling keys stay stable across a restore)."""
    num_env_steps_received: int = 0
    """Env steps a replay actor had acknowledged up to this state (0 for a bare buffer): a replay
    restored from a checkpoint lacks the steps acknowledged after it."""
    rng_state: dict[str, Any] | None = None
    """The sampling RNG's ``bit_generator.state``; None: leave the RNG as it is."""
    episodes: ColumnarEpisodes | None = None
    """The stored episodes, one chunk each, in eviction order (None: none, or kept elsewhere, as in
    a Parquet file's row groups)."""

    def to_metadata(self) -> dict[str, Any]:
        """Every field but ``episodes``, JSON-ready."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "episodes"}

    @classmethod
    def from_metadata(cls, meta: Any) -> ReplayState:
        """The state ``to_metadata`` wrote (missing counters: 0); raises DataFormatError if malformed."""
        meta = check_dict("ray_sampler.replay", meta, error=DataFormatError)
        if "capacity_env_steps" not in meta:
            raise DataFormatError("'capacity_env_steps' is missing")

        def counter(name: str) -> int:
            return check_int(name, meta.get(name, 0), minimum=0, error=DataFormatError)

        return cls(
            capacity_env_steps=check_int(
                "capacity_env_steps", meta["capacity_env_steps"], minimum=1, error=DataFormatError
            ),
            capacity_bytes=check_optional(
                check_int, "capacity_bytes", meta.get("capacity_bytes"), minimum=1, error=DataFormatError
            ),
            num_evicted_episodes=counter("num_evicted_episodes"),
            num_evicted_env_steps=counter("num_evicted_env_steps"),
            num_env_steps_sampled=counter("num_env_steps_sampled"),
            first_order=counter("first_order"),
            num_env_steps_received=counter("num_env_steps_received"),
            rng_state=check_optional(check_dict, "rng_state", meta.get("rng_state"), error=DataFormatError),
        )


def _table_bytes(col: ColumnarEpisodes) -> bytes:
    import pyarrow as pa  # here, not at import: a training driver never loads it for replay (about 25 MiB)

    from ray_sampler.data.arrow_format import columnar_to_arrow

    sink = pa.BufferOutputStream()
    table = columnar_to_arrow(col)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def state_to_plain(state: ReplayState) -> dict[str, Any]:
    """``state`` as plain data: its metadata dict, and its episodes (if any) as the bytes of an Arrow
    IPC stream of the documented episode table (:mod:`ray_sampler.data.arrow_format`; no pickle, no
    spaces: any Arrow tool reads it)."""
    return {**state.to_metadata(), "episodes": None if state.episodes is None else _table_bytes(state.episodes)}


def state_from_plain(plain: Any) -> ReplayState:
    """The ReplayState ``state_to_plain`` gave; DataFormatError if malformed."""
    import pyarrow as pa

    from ray_sampler.data.arrow_format import arrow_to_columnar

    plain = check_dict("state", plain, error=DataFormatError)
    episodes = plain.get("episodes")
    if episodes is not None and not isinstance(episodes, bytes):
        got = type(episodes).__name__
        raise DataFormatError(f"'episodes' must be bytes of an Arrow IPC stream or None (got {got})")
    state = ReplayState.from_metadata({k: v for k, v in plain.items() if k != "episodes"})
    if episodes is None:
        return state
    try:
        table = pa.ipc.open_stream(episodes).read_all()
    except pa.ArrowInvalid as e:
        raise DataFormatError(f"'episodes' is not an Arrow IPC stream: {first_line(e)}") from e
    return dataclasses.replace(state, episodes=arrow_to_columnar(table))
