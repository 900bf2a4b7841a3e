"""MultiAgentGetters: MultiAgentEpisode's getters, by env step or by each agent's own steps.

``env_steps=True`` (the default) reads indices as env steps of the chunk: 0 is the chunk's first
env step (for observations and infos, the observation the chunk starts from; for actions, rewards
and model outputs, the step taken from there), negative indices count from the end, or into the
lookback with ``neg_index_as_lookback=True``. Each agent answers only where it took part:

- observations and infos: where it got an observation;
- actions and model outputs: where it acted (a hanging action included);
- rewards: where one of its steps ended (the step's reward, hanging rewards summed in).

An int index gives ``{agent: value}`` for the agents that took part there; a list or slice gives
``{agent: [values]}`` without the env steps an agent skipped, or, with ``fill``, every env step
with ``fill`` where it skipped; ``return_list=True`` gives one dict per env step instead.
``env_steps=False`` reads each agent's own steps with the rules of
:mod:`ray_sampler.data.lookback`: ``{agent: SingleAgentEpisode.get_*(indices, ...)}``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray_sampler.data.episode import SingleAgentEpisode

__all__ = ["MultiAgentGetters"]

_SKIP = -1
_MISSING = object()


class MultiAgentGetters:
    """The ``get_*`` methods of MultiAgentEpisode (see the module docstring)."""

    __slots__ = ()
    if TYPE_CHECKING:  # MultiAgentEpisode's own
        agent_episodes: dict[Hashable, SingleAgentEpisode]
        _maps: dict[Hashable, list[int]]
        _map_lookback: int
        _hanging_actions_end: dict[Hashable, Any]
        _hanging_extra_model_outputs_end: dict[Hashable, dict[str, Any]]

        def __len__(self) -> int: ...
        def _iter_agents(self, agent_ids: Any) -> list[Hashable]: ...

    def get_observations(
        self,
        indices: Any = None,
        agent_ids: Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        return self._get("obs", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_infos(
        self,
        indices: Any = None,
        agent_ids: Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        return self._get("infos", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_actions(
        self,
        indices: Any = None,
        agent_ids: Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        return self._get("actions", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_rewards(
        self,
        indices: Any = None,
        agent_ids: Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        return self._get("rewards", indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    def get_extra_model_outputs(
        self,
        key: str,
        indices: Any = None,
        agent_ids: Any = None,
        *,
        env_steps: bool = True,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        return_list: bool = False,
    ) -> Any:
        return self._get(("emo", key), indices, agent_ids, env_steps, neg_index_as_lookback, fill, return_list)

    # ---------------------------------------------------------------- one reader for every field
    def _get(
        self, field: Any, indices: Any, agent_ids: Any, env_steps: bool, nal: bool, fill: Any, return_list: bool
    ) -> Any:
        agents = self._iter_agents(agent_ids)
        if not env_steps:
            if return_list:
                raise ValueError("return_list=True needs env_steps=True")
            return {
                aid: _sa_get(self.agent_episodes[aid], field, indices, nal=nal, fill=fill, own_steps=True)
                for aid in agents
            }
        is_obs = field in ("obs", "infos")
        num = len(self) + (1 if is_obs else 0)
        positions, single = self._positions(indices, num, nal)
        rows = [{aid: self._at(aid, field, p, is_obs) for aid in agents} for p in positions]
        if single:
            return {aid: v for aid, v in rows[0].items() if v is not _MISSING}
        if return_list:
            return [{aid: v for aid, v in row.items() if v is not _MISSING} for row in rows]
        out: dict[Hashable, list[Any]] = {}
        for aid in agents:
            values = [row[aid] for row in rows]
            if fill is not None:
                out[aid] = [fill if v is _MISSING else v for v in values]
            elif any(v is not _MISSING for v in values):
                out[aid] = [v for v in values if v is not _MISSING]
        return out

    def _positions(self, indices: Any, num: int, nal: bool) -> tuple[list[int], bool]:
        """Map positions (lookback first) for chunk-relative env-step ``indices`` over ``num`` items."""
        lb = self._map_lookback

        def one(i: int) -> int:
            pos = lb + i if (i >= 0 or nal) else lb + num + i
            if not 0 <= pos < lb + num:
                raise IndexError(f"env step index {i} is out of range ({num} in the chunk, {lb} in the lookback)")
            return pos

        if indices is None:
            return list(range(lb, lb + num)), False
        if isinstance(indices, slice):
            if nal:
                start = lb + (indices.start or 0)
                stop = lb + (num if indices.stop is None else indices.stop)
                return [one(p - lb) for p in range(start, stop)], False
            return [lb + p for p in range(*indices.indices(num))], False
        if isinstance(indices, (list, tuple)):
            return [one(int(i)) for i in indices], False
        return [one(int(indices))], True

    def _at(self, aid: Hashable, field: Any, pos: int, is_obs: bool) -> Any:
        """What agent ``aid`` has for ``field`` at map position ``pos``, or _MISSING."""
        m, sa = self._maps[aid], self.agent_episodes[aid]
        if field == "rewards":  # the step that ended at the next env step
            j = m[pos + 1] if pos + 1 < len(m) else _SKIP
            if j == _SKIP or j < 1:
                return _MISSING
            return _sa_get(sa, field, j - 1 - sa.t_started, nal=True, fill=None, own_steps=False)
        j = m[pos]
        if j == _SKIP:
            return _MISSING
        local = j - sa.t_started
        if not is_obs and j == sa.t:  # the agent's last observation: its action hangs, if it acted
            if field == "actions":
                return self._hanging_actions_end.get(aid, _MISSING)
            return self._hanging_extra_model_outputs_end.get(aid, {}).get(field[1], _MISSING)
        return _sa_get(sa, field, local, nal=True, fill=None, own_steps=False)


def _sa_get(sa: SingleAgentEpisode, field: Any, indices: Any, *, nal: bool, fill: Any, own_steps: bool) -> Any:
    """One agent's read: chunk-relative ``indices``; a negative one, for env-step reads, into its lookback."""
    nal = nal and (own_steps or (isinstance(indices, int) and indices < 0))
    if field == "obs":
        return sa.get_observations(indices, neg_index_as_lookback=nal, fill=fill)
    if field == "infos":
        return sa.get_infos(indices, neg_index_as_lookback=nal, fill=fill)
    if field == "actions":
        return sa.get_actions(indices, neg_index_as_lookback=nal, fill=fill)
    if field == "rewards":
        return sa.get_rewards(indices, neg_index_as_lookback=nal, fill=fill)
    return sa.get_extra_model_outputs(field[1], indices, neg_index_as_lookback=nal, fill=fill)
