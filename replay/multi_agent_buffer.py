"""MultiAgentEpisodeReplayBuffer: multi-agent chunks stored per module, capacity in env steps, sampled per module.

Each module's agents' chunks go into a single-agent ``EpisodeReplayBuffer`` of the module's own
(an agent's chunks join by their id, ``"<episode id>/<agent>"``, as single-agent chunks do), so
every single-agent rule holds per agent: observations stored once, n-step transitions on the
agent's own steps that stop at its terminal and report the steps they used. Beside them, one
record per multi-agent episode: its env-step span and flags, its agents with their modules, and
at which env step each of the agent's stored observations came.

- ``add`` takes what a multi-agent runner ships (a MultiAgentColumnar, or MultiAgentEpisodes).
  It is all or nothing: every chunk must continue its stored episode (same id, no gap; a chunk
  sent again is skipped and counted) and every agent's chunk its stored agent chunk, checked in
  every module's storage before any is changed.
- Capacity counts **env steps** (lookback excluded): past it, whole multi-agent episodes go,
  oldest first, with every agent's data in every module (the newest episode always stays).
- ``sample(batch_size_B, n_step, gamma, replay_mode=...)`` returns ``{module_id: batch}``:
  ``"independent"``: ``batch_size_B`` transitions per module, each drawn uniformly from its own
  agents' steps; ``"synchronized"``: ``batch_size_B`` env steps drawn uniformly from the stored
  ones, and every agent that acted at a drawn env step (its step complete in the buffer) gives
  its transition there, so counts differ per module; ``env_step_index`` says which draw each row
  belongs to, so the agents of one env step can be put together.

>>> from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
>>> ep = MultiAgentEpisode("e")
>>> ep.add_env_reset(observations={"a": 0, "b": 0})
>>> for t in range(1, 4):
...     ep.add_env_step({"a": t, "b": t}, {"a": 0, "b": 1}, {"a": 1.0, "b": 2.0},
...                     terminateds={"__all__": t == 3}, truncateds={"__all__": False})
>>> buf = MultiAgentEpisodeReplayBuffer(capacity_env_steps=100, seed=0)
>>> buf.add([ep]), buf.get_num_timesteps(), buf.get_num_agent_timesteps(), buf.get_module_ids()
(3, 3, 6, ['default_policy'])
>>> batch = buf.sample(50, n_step=3, gamma=1.0)["default_policy"]  # both agents on one module
>>> sorted(set(zip(batch["obs"].tolist(), batch["rewards"].tolist())))
[(0, 3.0), (0, 6.0), (1, 2.0), (1, 4.0), (2, 1.0), (2, 2.0)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar, columnar_to_multi_agent_episodes
from ray_sampler.data.multi_agent_episode import SKIP_ENV_TS, MultiAgentEpisode
from ray_sampler.errors import ReplayError
from ray_sampler.validate import check_bool, check_choice, check_int, check_optional, check_probability
from replay.buffer import EpisodeReplayBuffer
from replay.compat import draw_n_step, n_step_range, resolve_alias
from replay.n_step import n_step_transitions

__all__ = ["MultiAgentEpisodeReplayBuffer", "MultiAgentRecord"]


@dataclasses.dataclass
class MultiAgentRecord:
    """What the buffer keeps of one stored multi-agent episode, beside its agents' chunks."""

    env_t_started: int
    """Env step of its first stored observation."""
    env_t: int
    """Env step of its last stored observation."""
    terminated: bool = False
    truncated: bool = False
    modules: dict[Hashable, str] = dataclasses.field(default_factory=dict)
    """Each agent's module."""
    obs_env_steps: dict[Hashable, list[int]] = dataclasses.field(default_factory=dict)
    """Per agent, the env step of each of its stored observations, from its first."""
    obs_t_started: dict[Hashable, int] = dataclasses.field(default_factory=dict)
    """Per agent, the observation index (its own time) of its first stored observation."""
    restored_open: bool = False
    """Restored from a checkpoint while running: its next chunk may come after a gap."""

    @property
    def is_done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def num_env_steps(self) -> int:
        return self.env_t - self.env_t_started


class MultiAgentEpisodeReplayBuffer:
    """Multi-agent chunks per module, capacity in env steps (see the module docstring)."""

    def __init__(
        self,
        capacity: int | None = None,
        *,
        capacity_env_steps: int | None = None,
        batch_size_B: int = 16,
        seed: int | None = None,
    ) -> None:
        capacity_env_steps = resolve_alias(
            "capacity_env_steps", capacity_env_steps, "capacity", capacity, default=10**6
        )
        self.capacity_env_steps = check_int("capacity_env_steps", capacity_env_steps, minimum=1, error=ReplayError)
        self.batch_size_B = check_int("batch_size_B", batch_size_B, minimum=1, error=ReplayError)
        self.rng = np.random.default_rng(check_optional(check_int, "seed", seed, minimum=0, error=ReplayError))
        self.modules: dict[str, EpisodeReplayBuffer] = {}
        """Each module's single-agent buffer (read it through its read API)."""
        self.records: dict[str, MultiAgentRecord] = {}
        """The stored multi-agent episodes by id, oldest first (eviction order)."""
        self._num_env_steps = 0
        self.num_env_steps_added = 0
        self.num_agent_steps_added = 0
        self.num_episodes_evicted = 0
        self.num_env_steps_evicted = 0
        self.num_duplicate_chunks_skipped = 0
        self.num_env_steps_sampled = 0

    # ---------------------------------------------------------------- counters (RLlib's names)
    def get_num_timesteps(self) -> int:
        """Env steps stored."""
        return self._num_env_steps

    def get_num_agent_timesteps(self) -> int:
        """Agent steps stored, every module together."""
        return sum(b.get_num_timesteps() for b in self.modules.values())

    def get_num_episodes(self) -> int:
        return len(self.records)

    def get_module_ids(self) -> list[str]:
        return sorted(self.modules)

    def __len__(self) -> int:
        return self._num_env_steps

    def _module(self, mid: str) -> EpisodeReplayBuffer:
        if mid not in self.modules:
            seed = int(self.rng.integers(2**31))
            self.modules[mid] = EpisodeReplayBuffer(capacity_env_steps=self.capacity_env_steps, seed=seed)
        return self.modules[mid]

    def _make_room(self, mid: str, num_agent_steps: int) -> None:
        """A module's buffer never evicts on its own (this buffer evicts whole multi-agent episodes by
        env steps): its capacity, in agent steps, grows to hold what comes."""
        buf = self.modules[mid]
        need = buf.get_num_timesteps() + num_agent_steps
        if need > buf.storage.capacity_env_steps:
            buf.set_capacity(max(need, 2 * buf.storage.capacity_env_steps))

    # ---------------------------------------------------------------- adding
    def add(self, data: MultiAgentColumnar | MultiAgentEpisode | Sequence[MultiAgentEpisode] | None) -> int:
        """Stores the chunks (all or none, see the module docstring); returns how many of their env
        steps are still stored after eviction."""
        if data is None:
            return 0
        if isinstance(data, MultiAgentColumnar):
            episodes = columnar_to_multi_agent_episodes(data)
        elif isinstance(data, MultiAgentEpisode):
            episodes = [data]
        else:
            episodes = list(data)
            for i, ep in enumerate(episodes):
                if not isinstance(ep, MultiAgentEpisode):
                    raise ReplayError(f"'data[{i}]' must be a MultiAgentEpisode (got {type(ep).__name__})")
        taken, restarts = self._plan(episodes)
        for id_ in restarts:  # restored while running, and the next chunk comes after a gap
            self._evict_record(id_)
        per_module: dict[str, list[Any]] = {}
        for ep in taken:
            for aid, sa in ep.agent_episodes.items():
                per_module.setdefault(ep.module_for(aid), []).append(sa)
        cols = {mid: episodes_to_columnar(sas) for mid, sas in per_module.items()}
        for mid, col in cols.items():  # every module checks its chunks before any stores them
            self._module(mid).storage.check_add(col)
        for mid, col in cols.items():
            self._make_room(mid, col.num_env_steps)
            self.modules[mid].add(col)
            self.num_agent_steps_added += col.num_env_steps
        for ep in taken:
            self._record(ep)
            self._num_env_steps += len(ep)
            self.num_env_steps_added += len(ep)
        self._evict()
        return sum(len(ep) for ep in taken if ep.id_ in self.records)

    def _plan(self, episodes: list[MultiAgentEpisode]) -> tuple[list[MultiAgentEpisode], list[str]]:
        """The chunks to store: each continues its stored episode (or starts one); sent-again ones
        are left out and counted; a gap, or a chunk after a done episode, raises. Also the restored
        episodes whose next chunk comes after a gap: their stored part is evicted (counted), and the
        chunk starts them again."""
        taken: list[MultiAgentEpisode] = []
        restarts: list[str] = []
        ends = {id_: (r.env_t, r.is_done, r.restored_open) for id_, r in self.records.items()}
        for ep in episodes:
            ep.validate()
            known = ends.get(ep.id_)
            if known is not None:
                env_t, done, restored_open = known
                if ep.env_t <= env_t and not restored_open:  # sent again (a runner retried)
                    self.num_duplicate_chunks_skipped += 1
                    continue
                if done:
                    raise ReplayError(f"chunk of episode {ep.id_!r} follows its end (env step {env_t}): it is done")
                if ep.env_t_started != env_t:
                    if not restored_open:
                        raise ReplayError(
                            f"chunk of episode {ep.id_!r} starts at env step {ep.env_t_started}; the stored "
                            f"episode ends at {env_t}: a gap or an overlap"
                        )
                    restarts.append(ep.id_)
            ends[ep.id_] = (ep.env_t, ep.is_done, False)
            taken.append(ep)
        return taken, restarts

    def _record(self, ep: MultiAgentEpisode) -> None:
        rec = self.records.get(ep.id_)
        if rec is None:
            rec = self.records[ep.id_] = MultiAgentRecord(ep.env_t_started, ep.env_t_started)
        lb = ep.len_lookback_buffer
        for aid, m in ep.env_t_to_agent_t.items():
            rec.modules[aid] = ep.module_for(aid)
            steps = rec.obs_env_steps.setdefault(aid, [])
            for k, j in enumerate(m[lb:].tolist()):
                env_step = ep.env_t_started + k
                if j == SKIP_ENV_TS or (steps and env_step <= steps[-1]):
                    continue
                if not steps:
                    rec.obs_t_started[aid] = j
                steps.append(env_step)
        rec.env_t, rec.terminated, rec.truncated, rec.restored_open = ep.env_t, ep.is_terminated, ep.is_truncated, False

    def _evict(self) -> None:
        while len(self.records) > 1 and self._num_env_steps > self.capacity_env_steps:
            self._evict_record(next(iter(self.records)))

    def _evict_record(self, id_: str) -> None:
        rec = self.records.pop(id_)
        by_module: dict[str, list[str]] = {}
        for aid, mid in rec.modules.items():
            by_module.setdefault(mid, []).append(f"{id_}/{aid}")
        for mid, ids in by_module.items():
            self.modules[mid].storage.evict_episodes(ids)
        self._num_env_steps -= rec.num_env_steps
        self.num_episodes_evicted += 1
        self.num_env_steps_evicted += rec.num_env_steps

    def recount_env_steps(self) -> None:
        """Sets the stored env steps from the records (after a restore put them back)."""
        self._num_env_steps = sum(r.num_env_steps for r in self.records.values())

    # ---------------------------------------------------------------- sampling
    def sample(
        self,
        batch_size_B: int | None = None,
        *,
        n_step: int | tuple[int, int] = 1,
        gamma: float = 0.99,
        replay_mode: str = "independent",
        modules_to_sample: Sequence[str] | None = None,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """``{module_id: batch}`` of n-step transitions (the single-agent buffer's batch columns; see
        the module docstring for the two modes)."""
        batch_size_B = check_int("batch_size_B", batch_size_B or self.batch_size_B, minimum=1, error=ReplayError)
        check_choice("replay_mode", replay_mode, ("independent", "synchronized"), error=ReplayError)
        check_probability("gamma", gamma, error=ReplayError)
        check_bool("include_infos", include_infos, error=ReplayError)
        check_bool("include_extra_model_outputs", include_extra_model_outputs, error=ReplayError)
        n = n_step_range(n_step)
        mids = list(self.modules) if modules_to_sample is None else list(modules_to_sample)
        unknown = sorted(set(mids) - set(self.modules))
        if unknown:
            raise ReplayError(
                f"'modules_to_sample' names modules with no data {unknown} (stored: {sorted(self.modules)})"
            )
        if not self._num_env_steps:
            raise ReplayError("sample: the buffer holds no env steps yet")
        self.num_env_steps_sampled += batch_size_B
        if replay_mode == "independent":
            return {
                mid: self.modules[mid].sample(  # a flat batch (no sample_episodes)
                    batch_size_B, n_step=n, gamma=gamma, include_infos=include_infos,
                    include_extra_model_outputs=include_extra_model_outputs,
                )
                for mid in mids
                if self.modules[mid].get_num_timesteps()
            }  # fmt: skip
        return self._sample_synchronized(batch_size_B, n, gamma, set(mids), include_infos, include_extra_model_outputs)

    def sample_batches(
        self,
        batch_size_B: int,
        num_batches: int,
        *,
        module_id: str,
        n_step: int | tuple[int, int] = 1,
        gamma: float = 0.99,
    ) -> Any:
        """``num_batches`` batches of ``batch_size_B`` n-step transitions of module ``module_id``'s
        agents (independent mode: each agent on its own steps), as the single-agent buffer's
        ``sample_batches`` gives them: what a DQN learner of that module pulls."""
        if module_id not in self.modules or not self.modules[module_id].get_num_timesteps():
            raise ReplayError(f"sample_batches: module {module_id!r} has no data (stored: {sorted(self.modules)})")
        self.num_env_steps_sampled += batch_size_B * num_batches
        return self.modules[module_id].sample_batches(batch_size_B, num_batches, n_step=n_step, gamma=gamma)

    def _sample_synchronized(
        self, batch_size_B: int, n: Any, gamma: float, mids: set[str], include_infos: bool, include_emo: bool
    ) -> dict[str, dict[str, Any]]:
        ids = list(self.records)
        sizes = np.array([self.records[i].num_env_steps for i in ids], np.int64)
        ends = np.cumsum(sizes)
        draws = self.rng.integers(int(ends[-1]), size=batch_size_B)
        which = np.searchsorted(ends, draws, side="right")
        picks: dict[str, list[tuple[int, str, int]]] = {}  # module -> (draw, agent chunk id, agent t)
        for d, (k, pos) in enumerate(zip(which.tolist(), draws.tolist())):
            rec = self.records[ids[k]]
            env_step = rec.env_t_started + pos - int(ends[k] - sizes[k])
            for aid, steps in rec.obs_env_steps.items():
                mid = rec.modules[aid]
                if mid not in mids:
                    continue
                j = _index_of(steps, env_step)
                if j is None:
                    continue  # the agent got no observation at that env step
                sa_id, t = f"{ids[k]}/{aid}", rec.obs_t_started[aid] + j
                stored = self.modules[mid].storage.episodes.get(sa_id)
                if stored is None or not stored.t_started <= t < stored.t:
                    continue  # its step from there is not complete (its action hangs) or not stored
                picks.setdefault(mid, []).append((d, sa_id, t))
        out = {}
        for mid, rows in picks.items():
            storage = self.modules[mid].storage
            segs, offs = _locate(storage, [(sa_id, t) for _, sa_id, t in rows])
            batch = n_step_transitions(
                storage, segs, offs, n_step=draw_n_step(n, len(rows), self.rng), gamma=gamma,
                include_extra_model_outputs=include_emo, include_infos=include_infos,
            )  # fmt: skip
            batch["env_step_index"] = np.array([d for d, _, _ in rows], np.int64)
            out[mid] = batch
        return out


def _index_of(steps: list[int], env_step: int) -> int | None:
    i = int(np.searchsorted(steps, env_step))
    return i if i < len(steps) and steps[i] == env_step else None


def _locate(storage: Any, keys: list[tuple[str, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(segment, offset) of each stored agent step ``(agent chunk id, agent t)``."""
    view = storage.segment_view()
    segs, offs = [], []
    for sa_id, t in keys:
        for seg in storage.segments_of(sa_id):
            start = int(view.t_started[seg])
            if start <= t < start + int(view.num_steps[seg]):
                segs.append(seg)
                offs.append(t - start)
                break
        else:
            raise ReplayError(f"step {t} of {sa_id!r} is not stored")  # an internal invariant broke
    return np.array(segs, np.int64), np.array(offs, np.int64)
