"""Building a MultiAgentEpisode from per-env-step data, and slicing one (``episode[a:b]``).

Both replay the data through ``add_env_reset`` / ``add_env_step`` and ``cut``, so a chunk built
from data, or sliced, follows exactly the rules of a recorded one. As RLlib reads such data:

- ``observations`` holds one dict per env step (lookback first), ``actions``, ``rewards`` and
  ``extra_model_outputs`` one fewer; an agent acts on every observation it gets.
- An agent that gets an observation and no action while later env steps follow is done there:
  truncated if ``truncateds`` says so, else terminated. One whose only observation that is never
  took part and is left out.
- ``terminateds`` / ``truncateds`` are the flags after the last step (a bool is ``"__all__"``'s).
- ``len_lookback_buffer`` env steps are lookback (``"auto"``: all of them), ``env_t_started`` is
  the env step the chunk starts at (after its lookback), ``agent_t_started[agent]`` the agent's
  own timestep there (default: the agent's steps in the lookback, so none is negative).

>>> from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
>>> obs = [{"a": 0, "b": 0}, {"b": 1}, {"a": 2, "b": 2}, {"b": 3}]
>>> ep = MultiAgentEpisode(observations=obs, actions=obs[:-1], rewards=[{"a": 1.0, "b": 1.0}] * 3)
>>> len(ep), ep.agent_steps(), ep.get_actions(), ep.get_hanging_action("a")
(3, 4, {'a': [0, 2], 'b': [0, 1, 2]}, 2)
>>> part = ep[1:]
>>> part.get_observations(), part.agent_t_started, part.get_hanging_action("a")
({'b': [1, 2, 3], 'a': [2]}, {'b': 1, 'a': 1}, 2)
>>> auto = MultiAgentEpisode(observations=obs, actions=obs[:-1], rewards=[{}] * 3, len_lookback_buffer="auto")
>>> len(auto), auto.len_lookback_buffer, auto.get_observations(-1, neg_index_as_lookback=True)
(0, 3, {'a': 2, 'b': 2})
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from ray_sampler.errors import EpisodeError
from ray_sampler.validate import check_int

if TYPE_CHECKING:
    from ray_sampler.data.multi_agent_episode import MultiAgentEpisode

__all__ = ["MultiAgentSlicing", "record_data"]

_ALL = "__all__"
_SKIP = -1


class MultiAgentSlicing:
    """``slice``, ``episode[a:b]``, ``get_terminateds`` and ``get_truncateds`` of MultiAgentEpisode."""

    __slots__ = ()

    def __getitem__(self, item: slice) -> MultiAgentEpisode:
        if not isinstance(item, slice):
            raise TypeError(f"episode[...] takes a slice (got {item!r}); use the getters for items")
        return self.slice(item)

    def slice(self, slice_: slice, *, len_lookback_buffer: int | None = None) -> MultiAgentEpisode:
        """The env steps ``slice_`` (clipped as Python clips list slices) as a new chunk.

        Its lookback holds up to ``len_lookback_buffer`` env steps before the slice's start
        (default: this chunk's own lookback length). As in RLlib, an agent's data before that
        lookback is not part of the slice: a step whose action was taken earlier is dropped and
        the agent starts at its next observation; an action whose next observation comes after
        the slice's end hangs, with the reward it earned. Agents done inside the slice keep their
        flags, the episode's flags are kept when the slice reaches the end, and each agent keeps
        its own timesteps.
        """
        ep: MultiAgentEpisode = self  # type: ignore[assignment]
        start, stop, step = slice_.indices(len(ep))
        if step != 1:
            raise ValueError(f"episode slices take step 1 (got {slice_.step!r})")
        stop = max(stop, start)
        want = ep.len_lookback_buffer if len_lookback_buffer is None else len_lookback_buffer
        want = check_int("len_lookback_buffer", want, minimum=0, error=EpisodeError)
        h = min(want, ep.len_lookback_buffer + start)
        first, last = ep.len_lookback_buffer + start - h, ep.len_lookback_buffer + stop
        rows = [_row(ep, p) for p in range(first, last + 1)]
        done = {  # agents whose last observation, where they ended, is inside the slice
            aid: sa
            for aid, sa in ep.agent_episodes.items()
            if sa.is_done and max(i for i, j in enumerate(ep._maps[aid]) if j != _SKIP) <= last  # noqa: SLF001
        }
        reaches_end = stop == len(ep)
        out = type(ep)(
            ep.id_,
            observations=[r[0] for r in rows],
            infos=[r[1] for r in rows],
            actions=[r[2] for r in rows[:-1]],
            rewards=[r[3] for r in rows[:-1]],
            extra_model_outputs=[r[4] for r in rows[:-1]],
            terminateds={_ALL: ep.is_terminated and reaches_end, **{a: sa.is_terminated for a, sa in done.items()}},
            truncateds={_ALL: ep.is_truncated and reaches_end, **{a: sa.is_truncated for a, sa in done.items()}},
            env_t_started=ep.env_t_started + start,
            len_lookback_buffer=h,
            observation_space=ep.observation_space,
            action_space=ep.action_space,
            agent_module_ids=ep.agent_to_module_mapping,
            agent_to_module_mapping_fn=ep.agent_to_module_mapping_fn,
        )
        maps = ep.env_t_to_agent_t
        for aid, m in out.env_t_to_agent_t.items():  # each agent keeps its own timesteps
            p = next(i for i, j in enumerate(m) if j != _SKIP)
            _shift_agent(out, aid, int(maps[aid][first + p]) - int(m[p]))
        out.custom_data.update(ep.custom_data)
        return out.to_numpy() if ep.is_numpy else out

    def get_terminateds(self) -> dict[Hashable, bool]:
        """Every agent's ``is_terminated``, and the episode's under ``"__all__"``."""
        ep: MultiAgentEpisode = self  # type: ignore[assignment]
        return {**{aid: sa.is_terminated for aid, sa in ep.agent_episodes.items()}, _ALL: ep.is_terminated}

    def get_truncateds(self) -> dict[Hashable, bool]:
        """Every agent's ``is_truncated``, and the episode's under ``"__all__"``."""
        ep: MultiAgentEpisode = self  # type: ignore[assignment]
        return {**{aid: sa.is_truncated for aid, sa in ep.agent_episodes.items()}, _ALL: ep.is_truncated}


def _row(ep: MultiAgentEpisode, pos: int) -> tuple[dict, dict, dict, dict, dict]:
    """Observations, infos, actions, rewards and model outputs at map position ``pos``: a step's
    whole reward is given right after its action."""
    obs, infos, actions, rewards, emos = {}, {}, {}, {}, {}
    for aid, m in ep._maps.items():  # noqa: SLF001
        j = m[pos]
        if j == _SKIP:
            continue
        sa = ep.agent_episodes[aid]
        local = j - sa.t_started
        obs[aid] = sa.get_observations(local, neg_index_as_lookback=True)
        infos[aid] = sa.get_infos(local, neg_index_as_lookback=True)
        if j < sa.t:
            actions[aid] = sa.get_actions(local, neg_index_as_lookback=True)
            rewards[aid] = sa.get_rewards(local, neg_index_as_lookback=True)
            emos[aid] = {
                k: sa.get_extra_model_outputs(k, local, neg_index_as_lookback=True) for k in sa.extra_model_outputs
            }
        elif aid in ep._hanging_actions_end:  # noqa: SLF001
            actions[aid] = ep._hanging_actions_end[aid]  # noqa: SLF001
            rewards[aid] = ep._hanging_rewards_end[aid]  # noqa: SLF001
            emos[aid] = dict(ep._hanging_extra_model_outputs_end.get(aid, {}))  # noqa: SLF001
    return obs, infos, actions, rewards, emos


def record_data(
    ep: MultiAgentEpisode,
    observations: list[dict],
    *,
    infos: list[dict] | None,
    actions: list[dict] | None,
    rewards: list[dict] | None,
    terminateds: dict | bool,
    truncateds: dict | bool,
    extra_model_outputs: list[dict] | None,
    len_lookback_buffer: int | str,
    env_t_started: int,
    agent_t_started: dict | None,
) -> None:
    """Fills the empty ``ep`` from per-env-step data (see the module docstring for the rules)."""
    actions, rewards = list(actions or []), list(rewards or [])
    num_steps = len(observations) - 1
    if len(actions) != num_steps or len(rewards) != num_steps:
        raise EpisodeError(
            f"'actions' and 'rewards' must hold one dict per env step, one fewer than 'observations' "
            f"(got {len(actions)} and {len(rewards)} for {len(observations)} observations)"
        )
    if infos is not None and len(infos) != len(observations):
        raise EpisodeError(f"'infos' must hold one dict per observation (got {len(infos)} for {len(observations)})")
    if extra_model_outputs is not None and len(extra_model_outputs) != num_steps:
        raise EpisodeError(
            f"'extra_model_outputs' must hold one dict per env step (got {len(extra_model_outputs)} for {num_steps})"
        )
    lookback = num_steps if len_lookback_buffer == "auto" else len_lookback_buffer
    if isinstance(lookback, str):
        raise EpisodeError(f"'len_lookback_buffer' must be 'auto' or an int >= 0 (got {len_lookback_buffer!r})")
    lookback = min(check_int("len_lookback_buffer", lookback, minimum=0, error=EpisodeError), num_steps)
    obs = [dict(o) for o in observations]
    inf = [dict(i) for i in infos] if infos is not None else [{} for _ in obs]
    ends = _ends(obs, actions, num_steps)
    final_term, final_trunc = _flags(terminateds), _flags(truncateds)
    ep.add_env_reset(observations=obs[0], infos=inf[0])
    for i in range(num_steps):
        if i == lookback:
            _become(ep, ep.cut(len_lookback_buffer=lookback))
        term: dict[Hashable, bool] = {_ALL: False}
        trunc: dict[Hashable, bool] = {_ALL: False}
        if i == num_steps - 1:
            term = {a: f for a, f in final_term.items() if a not in ep._done_agents}  # noqa: SLF001
            trunc = {a: f for a, f in final_trunc.items() if a not in ep._done_agents}  # noqa: SLF001
        for aid in ends.get(i + 1, ()):
            if final_trunc.get(aid):
                trunc[aid] = True
            else:
                term[aid] = True
        ep.add_env_step(
            obs[i + 1], actions[i], rewards[i], inf[i + 1], terminateds=term, truncateds=trunc,
            extra_model_outputs=extra_model_outputs[i] if extra_model_outputs else None,
        )  # fmt: skip
    if lookback == num_steps and num_steps:
        if ep.is_done:
            raise EpisodeError("a done episode cannot be all lookback: give 'len_lookback_buffer' < the env steps")
        _become(ep, ep.cut(len_lookback_buffer=lookback))
    shift = check_int("env_t_started", env_t_started, minimum=0, error=EpisodeError) - ep.env_t_started
    ep.env_t_started += shift
    ep.env_t += shift
    for aid, want in (agent_t_started or {}).items():
        sa = ep.agent_episodes.get(aid)
        if sa is None:
            continue
        want = check_int(f"agent_t_started[{aid!r}]", want, minimum=0, error=EpisodeError)
        if want < sa.len_lookback_buffer:
            raise EpisodeError(
                f"'agent_t_started[{aid!r}]' must be at least the agent's {sa.len_lookback_buffer} lookback steps "
                f"(got {want}): agent timesteps are never negative"
            )
        _shift_agent(ep, aid, want - sa.t_started)


def _ends(obs: list[dict], actions: list[dict], num_steps: int) -> dict[int, list[Hashable]]:
    """Per env step, the agents whose observation there is their last (no action follows while
    env steps do); an agent's only observation of that kind is dropped from ``obs``."""
    ends: dict[int, list[Hashable]] = {}
    started: set[Hashable] = set()
    for k in range(num_steps):
        for aid in list(obs[k]):
            if aid in actions[k]:
                started.add(aid)
            elif aid in started:
                ends.setdefault(k, []).append(aid)
                started.discard(aid)
            else:
                del obs[k][aid]
    return ends


def _flags(flags: dict | bool) -> dict[Hashable, bool]:
    out: dict[Hashable, bool] = {_ALL: False}
    if isinstance(flags, dict):
        out.update({a: bool(f) for a, f in flags.items()})
    else:
        out[_ALL] = bool(flags)
    return out


def _become(ep: MultiAgentEpisode, other: MultiAgentEpisode) -> None:
    for name in type(ep).__slots__:
        setattr(ep, name, getattr(other, name))


def _shift_agent(ep: MultiAgentEpisode, aid: Hashable, delta: int) -> None:
    """Moves agent ``aid``'s own clock by ``delta`` (its chunk's ``t_started`` and its map)."""
    if delta:
        ep.agent_episodes[aid].t_started += delta
        m = ep._maps[aid]  # noqa: SLF001
        m[:] = [j if j == _SKIP else j + delta for j in m]
