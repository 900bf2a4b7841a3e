"""MultiAgentGetters: MultiAgentEpisode's getters, by env step or by each agent's own steps.

``env_steps=True`` (the default) reads indices as env steps of the chunk with the index rules of
:mod:`ray_sampler.data.lookback` applied to the env-step clock: 0 is the chunk's first env step,
negative indices count from the end and run on into the lookback (or count back from env step 0
with ``neg_index_as_lookback=True``), an int or list index outside lookback + chunk raises
``IndexError`` and a slice is clipped, unless ``fill`` is given. As in RLlib, each agent answers
only where it took part:

- observations and infos: at the env steps where it got an observation;
- actions, rewards and model outputs: at the env step where it acted, the reward being the sum
  that step earned; at its latest observation, the hanging action and the rewards so far.

An int index gives ``{agent: value}`` for the agents that took part there; a list or slice gives
``{agent: [values]}`` without the env steps an agent skipped (agents with none left out), an
array (or a structure of arrays) for a numpy'd agent.
``fill`` pads every env step where an agent has nothing, and every position outside lookback +
chunk, with an item shaped like the agent's (observations and actions) or ``fill`` itself.
``return_list=True`` gives one dict per env step instead. ``env_steps=False`` reads each agent's
own steps: ``{agent: SingleAgentEpisode.get_*(indices, ...)}``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from ray_sampler.data import tree

if TYPE_CHECKING:
    from ray_sampler.data.episode import SingleAgentEpisode

__all__ = ["MultiAgentGetters"]

_SKIP = -1
_MISSING = object()
_FAR = 1 << 40  # an index past any episode: the getters answer it with the fill item


class MultiAgentGetters:
    """The ``get_*`` methods of MultiAgentEpisode (see the module docstring)."""

    __slots__ = ()
    if TYPE_CHECKING:  # MultiAgentEpisode's own
        agent_episodes: dict[Hashable, SingleAgentEpisode]
        _maps: dict[Hashable, list[int]]
        _map_lookback: int
        _hanging_actions_end: dict[Hashable, Any]
        _hanging_extra_model_outputs_end: dict[Hashable, dict[str, Any]]
        _hanging_rewards_end: dict[Hashable, float]

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
        positions, single = self._positions(indices, len(self) + (1 if is_obs else 0), nal, fill)
        rows = [{aid: self._at(aid, field, p, is_obs) for aid in agents} for p in positions]
        if fill is not None:
            fillers = {aid: _fill_value(self.agent_episodes[aid], field, fill) for aid in agents}
            rows = [{aid: fillers[aid] if v is _MISSING else v for aid, v in row.items()} for row in rows]
        if single:
            return {aid: v for aid, v in rows[0].items() if v is not _MISSING}
        if return_list:
            return [{aid: v for aid, v in row.items() if v is not _MISSING} for row in rows]
        out: dict[Hashable, Any] = {}
        for aid in agents:
            values = [row[aid] for row in rows if row[aid] is not _MISSING]
            if values:  # numpy'd agents answer with arrays, as their own getters do (infos stay lists)
                out[aid] = tree.stack(values) if field != "infos" and self.agent_episodes[aid].is_numpy else values
        return out

    def _positions(self, indices: Any, num: int, nal: bool, fill: Any) -> tuple[list[int], bool]:
        """Map positions (lookback first) for env-step ``indices`` over ``num`` items, by the index
        rules of :mod:`ray_sampler.data.lookback` (a position outside is kept only with ``fill``)."""
        lb = self._map_lookback
        total = lb + num

        def pos(i: Any) -> int:
            i = int(i)
            return lb + i if i >= 0 or nal else total + i

        def checked(i: Any) -> int:
            p = pos(i)
            if fill is None and not 0 <= p < total:
                raise IndexError(
                    f"env step index {i} reaches outside the {lb} lookback and {num} chunk entries; pass fill= to pad"
                )
            return p

        if indices is None:
            return list(range(lb, total)), False
        if isinstance(indices, slice):
            step = 1 if indices.step is None else int(indices.step)
            if step < 1:
                raise ValueError(f"slice step must be an int >= 1 (got {indices.step!r})")
            start = lb if indices.start is None else pos(indices.start)
            stop = total if indices.stop is None else pos(indices.stop)
            if fill is None:  # clipped as a Python slice is
                start, stop = min(max(start, 0), total), min(max(stop, 0), total)
            return list(range(start, max(stop, start), step)), False
        if isinstance(indices, (list, tuple, np.ndarray)):
            return [checked(i) for i in indices], False
        return [checked(indices)], True

    def _at(self, aid: Hashable, field: Any, pos: int, is_obs: bool) -> Any:
        """What agent ``aid`` has for ``field`` at map position ``pos``, or _MISSING. Actions, rewards
        and model outputs sit at the env step where the agent acted (RLlib's rule); at its latest
        observation that is the hanging action and the rewards gathered for it so far."""
        m, sa = self._maps[aid], self.agent_episodes[aid]
        if not 0 <= pos < len(m) or m[pos] == _SKIP:
            return _MISSING
        j = m[pos]
        if not is_obs and j == sa.t:  # the agent's latest observation: its action hangs, if it acted
            if field == "actions":
                return self._hanging_actions_end.get(aid, _MISSING)
            if field == "rewards":
                return self._hanging_rewards_end.get(aid, _MISSING)
            return self._hanging_extra_model_outputs_end.get(aid, {}).get(field[1], _MISSING)
        return _sa_get(sa, field, j - sa.t_started, nal=True, fill=None, own_steps=False)


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


def _fill_value(sa: SingleAgentEpisode, field: Any, fill: Any) -> Any:
    """``fill`` shaped like the agent's items of ``field`` (as RLlib pads skipped env steps)."""
    if field in ("obs", "actions"):
        return _sa_get(sa, field, _FAR, nal=False, fill=fill, own_steps=True)
    return fill
