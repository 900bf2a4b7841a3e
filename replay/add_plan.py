"""plan_add: how each chunk of an add stands against the stored episodes, checked before anything changes.

A chunk whose episode is not stored (new, or evicted) begins a stored episode. A chunk that
continues a stored episode is checked: same ``id_``, ``t_started`` equal to the episode's ``t``,
its first observation equal to the stored last one (NaN-safe), the episode not done; the storage
then drops its lookback, since the stored steps already hold it. Chunks of one episode within one
add are checked against each other the same way, in order.

A storage restored from a checkpoint (``EpisodeStorage.mark_restored``) lets the episodes it held
that were not done go on after a gap: a replay actor restored from its last checkpoint lacks the
chunks acknowledged since, so the runners' next chunks start later than the stored episodes end.
Such a chunk starts a new stored episode under its id; the restored part stays, renamed
``<id>#<its end t>`` (two separate pieces, no transition across the gap). Any gap in a storage
not restored is refused.

A chunk whose steps the episode stores already is a re-send (the replay actor stored it, then died
before its ack reached the runner, and was restored from a checkpoint holding it): when its range
lies within the stored one and its first and last observations equal the stored ones there, it is
skipped (``num_duplicate_steps_skipped``) and adds nothing. Any other overlap (a chunk starting
before the stored end) is refused as a duplicate.

>>> from ray_sampler.data.columnar import episodes_to_columnar
>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> from replay.storage import EpisodeStorage
>>> storage = EpisodeStorage(capacity_env_steps=5)
>>> chunk = episodes_to_columnar([SingleAgentEpisode("a", observations=[0, 1, 2], actions=[0, 0], rewards=[1.0, 2.0])])
>>> storage.add(chunk), storage.add(chunk), storage.num_duplicate_steps_skipped
(2, 0, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.errors import ReplayError
from replay.columns import StoredColumns
from replay.records import EpisodeRows, StoredEpisode
from replay.rows import equal_rows
from replay.segments import SegmentTable

__all__ = ["AddPlan", "plan_add"]


class AddPlan(NamedTuple):
    """What an add stores (see the module docstring)."""

    chunks: list[tuple[int, bool]]
    """(chunk, continues a stored episode) for every chunk to store, in order."""
    renames: dict[str, str]
    """Restored episodes to rename (old id -> new id) because a chunk goes on after a gap."""
    num_duplicate_steps: int
    """Steps of the re-sent chunks skipped."""


def plan_add(
    col: ColumnarEpisodes,
    *,
    episodes: Mapping[str, StoredEpisode],
    restored_open: AbstractSet[str],
    columns: StoredColumns,
    segments: SegmentTable,
    episode_rows: Callable[[str], EpisodeRows],
) -> AddPlan:
    """The plan for storing ``col`` in a storage holding ``episodes`` (``restored_open``: those that
    may go on after a gap; ``episode_rows``: the storage's rows of a stored episode); raises before
    any change."""
    columns.check_keys(col)
    obs_off = col.obs_offsets
    pending: dict[str, tuple[int, bool, Any]] = {}  # id -> (t, is_done, last obs) after earlier chunks
    plan = []
    renames: dict[str, str] = {}
    num_duplicate_steps = 0
    for i, id_ in enumerate(col.ids):
        if not col.lens[i]:
            continue
        stored = episodes.get(id_)
        t: int | None
        if id_ not in pending and stored is not None and _is_resent(col, i, stored, columns, episode_rows):
            num_duplicate_steps += int(col.lens[i])
            continue
        if id_ in pending:
            t, done, last_obs = pending[id_]
        elif stored is not None and id_ in restored_open and int(col.t_started[i]) > stored.t:
            renames[id_] = _piece_id(id_, stored.t, episodes)  # a gap after a restore: a new piece
            t, done, last_obs = None, False, None
        elif stored is not None:
            t, done = stored.t, stored.is_done
            seg = stored.last_segment
            last_obs = columns.gather_observations(np.array([segments.obs_start[seg] + segments.num_steps[seg]]))
        else:
            t, done, last_obs = None, False, None
        first_rows, last_rows = slice(obs_off[i], obs_off[i] + 1), slice(obs_off[i + 1] - 1, obs_off[i + 1])
        first_obs = tree.map_structure(lambda a, rows=first_rows: a[rows], col.data.observations)
        if t is not None:
            where = f"chunk {i} (id_ {id_!r})"
            if done:
                raise ReplayError(f"{where} continues an episode that is already done; nothing was added")
            if int(col.t_started[i]) != t:
                raise ReplayError(
                    f"{where} starts at t={int(col.t_started[i])} but the stored episode is at "
                    f"t={t} (a gap or a duplicate); nothing was added"
                )
            if not equal_rows(first_obs, last_obs):
                raise ReplayError(
                    f"{where} does not start with the stored episode's last observation; nothing was added"
                )
        last = tree.map_structure(lambda a, rows=last_rows: a[rows], col.data.observations)
        pending[id_] = (int(col.t_started[i]) + int(col.lens[i]), bool(col.terminated[i] or col.truncated[i]), last)
        plan.append((i, t is not None))
    if plan:
        with_lookback = any(not cont and col.lookback_lens[i] for i, cont in plan)
        columns.check_rows(col, with_lookback=with_lookback)
    return AddPlan(plan, renames, num_duplicate_steps)


def _is_resent(
    col: ColumnarEpisodes,
    i: int,
    stored: StoredEpisode,
    columns: StoredColumns,
    episode_rows: Callable[[str], EpisodeRows],
) -> bool:
    """Whether chunk ``i`` is a re-send of steps ``stored`` holds already (its ack was lost): its
    range lies within the stored one, its first and last observations equal the stored ones at
    those timesteps, and if it ends its episode, the stored episode ends there the same way."""
    t0, t1 = int(col.t_started[i]), int(col.t_started[i]) + int(col.lens[i])
    if not stored.t_started <= t0 < t1 <= stored.t:
        return False
    if (bool(col.terminated[i]), bool(col.truncated[i])) != (
        (stored.terminated, stored.truncated) if t1 == stored.t else (False, False)
    ):
        return False
    rows = episode_rows(stored.id_).observations[[t0 - stored.t_started, t1 - stored.t_started]]
    first_last = np.array([col.obs_offsets[i], col.obs_offsets[i + 1] - 1])
    sent = tree.map_structure(lambda a: a[first_last], col.data.observations)
    return equal_rows(columns.gather_observations(rows), sent)


def _piece_id(id_: str, t: int, episodes: Mapping[str, StoredEpisode]) -> str:
    new, k = f"{id_}#{t}", 1
    while new in episodes:
        new, k = f"{id_}#{t}.{k}", k + 1
    return new
