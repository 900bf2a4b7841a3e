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
- ``sample(num_items or batch_size_B=, n_step=, gamma=, replay_mode=, modules_to_sample=)``
  (RLlib's keywords) returns ``{module_id: batch}``:
  ``"independent"``: ``batch_size_B`` transitions per module, each drawn uniformly from its own
  agents' steps; ``"synchronized"``: ``batch_size_B`` env steps drawn uniformly from the stored
  ones, and every agent that acted at a drawn env step (its step complete in the buffer) gives
  its transition there, so counts differ per module; ``env_step_index`` says which draw each row
  belongs to, so the agents of one env step can be put together.
- RLlib's constructor names (``capacity``, ``batch_size_B``, ``batch_length_T``, which must be 1)
  and counters: ``get_num_timesteps`` / ``get_added_timesteps`` / ``get_sampled_timesteps`` /
  ``get_num_episodes`` / ``get_num_episodes_evicted`` count env steps (episodes), or with a
  ``module_id`` that module's agent steps (agent episodes); ``get_num_agent_timesteps`` and
  ``get_added_agent_timesteps`` count agent steps. ``get_state()`` is plain data (nothing
  pickled) and ``set_state(get_state())`` gives back a buffer that samples the same.

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

from collections.abc import Sequence
from typing import Any

import numpy as np

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.multi_agent_columnar import MultiAgentColumnar, columnar_to_multi_agent_episodes
from ray_sampler.data.multi_agent_episode import SKIP_ENV_TS, MultiAgentEpisode
from ray_sampler.errors import ConfigError, DataFormatError, ReplayError
from ray_sampler.validate import check_bool, check_choice, check_int, check_optional, check_probability
from replay.buffer import EpisodeReplayBuffer
from replay.compat import draw_n_step, n_step_range, resolve_alias
from replay.multi_agent_record import MultiAgentRecord
from replay.n_step import n_step_transitions
from replay.state import state_from_plain, state_to_plain

__all__ = ["COUNTERS", "STATE_FORMAT", "MultiAgentEpisodeReplayBuffer", "MultiAgentRecord"]

STATE_FORMAT = "ray-sampler-multi-agent-replay-state/1"
"""The ``format`` of ``get_state()``'s dict."""
COUNTERS = (
    "num_env_steps_added",
    "num_agent_steps_added",
    "num_episodes_evicted",
    "num_env_steps_evicted",
    "num_duplicate_chunks_skipped",
    "num_env_steps_sampled",
)
"""The buffer's lifetime counters, kept by ``get_state`` and a saved checkpoint."""


class MultiAgentEpisodeReplayBuffer:
    """Multi-agent chunks per module, capacity in env steps (see the module docstring)."""

    def __init__(
        self,
        capacity: int | None = None,
        *,
        capacity_env_steps: int | None = None,
        batch_size_B: int = 16,
        batch_length_T: int = 1,
        seed: int | None = None,
    ) -> None:
        """``capacity`` is RLlib's name of ``capacity_env_steps``. ``batch_length_T`` is RLlib's too and
        must be 1: this buffer samples single (n-step) transitions, as RLlib's does."""
        capacity_env_steps = resolve_alias(
            "capacity_env_steps", capacity_env_steps, "capacity", capacity, default=10**6, error=ConfigError
        )
        self.capacity_env_steps = check_int("capacity_env_steps", capacity_env_steps, minimum=1, error=ConfigError)
        self.batch_size_B = check_int("batch_size_B", batch_size_B, minimum=1, error=ConfigError)
        """Default of ``sample``'s ``batch_size_B``."""
        self.batch_length_T = _check_length_1(batch_length_T, ConfigError)
        self.rng = np.random.default_rng(check_optional(check_int, "seed", seed, minimum=0, error=ConfigError))
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
        self.num_module_steps_sampled: dict[str, int] = {}
        """Per module, the agent transitions sampled for it."""

    # ---------------------------------------------------------------- counters (RLlib's names)
    # With a ``module_id``, a counter counts that module's agent steps (RLlib's rule; 0 for a module
    # the buffer has not seen); without, env steps, or multi-agent episodes.
    def get_num_timesteps(self, module_id: str | None = None) -> int:
        """Env steps stored (lookback excluded), or module ``module_id``'s agent steps."""
        if module_id is not None:
            return self.modules[module_id].get_num_timesteps() if module_id in self.modules else 0
        return self._num_env_steps

    def get_added_timesteps(self, module_id: str | None = None) -> int:
        """Env steps added over the buffer's lifetime (re-sent chunks skipped), or module
        ``module_id``'s agent steps."""
        if module_id is not None:
            return self.modules[module_id].get_added_timesteps() if module_id in self.modules else 0
        return self.num_env_steps_added

    def get_sampled_timesteps(self, module_id: str | None = None) -> int:
        """Items sampled: ``batch_size_B`` per call (env steps drawn, in either mode, as RLlib), or
        the transitions returned for module ``module_id``."""
        if module_id is not None:
            return self.num_module_steps_sampled.get(module_id, 0)
        return self.num_env_steps_sampled

    def get_num_agent_timesteps(self) -> int:
        """Agent steps stored, every module together."""
        return sum(b.get_num_timesteps() for b in self.modules.values())

    def get_added_agent_timesteps(self) -> int:
        """Agent steps added over the buffer's lifetime, every module together."""
        return self.num_agent_steps_added

    def get_num_episodes_evicted(self, module_id: str | None = None) -> int:
        """Multi-agent episodes evicted, or module ``module_id``'s agent episodes."""
        if module_id is not None:
            return self.modules[module_id].get_num_episodes_evicted() if module_id in self.modules else 0
        return self.num_episodes_evicted

    def get_num_episodes(self, module_id: str | None = None) -> int:
        """Multi-agent episodes stored, or module ``module_id``'s agent episodes (each agent's chunks
        joined: one per agent and episode that has a stored step)."""
        if module_id is not None:
            return self.modules[module_id].get_num_episodes() if module_id in self.modules else 0
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

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """Everything ``set_state`` needs to rebuild this buffer, as plain data (dicts, lists, str,
        int, bool, bytes; nothing pickled, no spaces): settings, counters, both RNG states, each
        module's single-agent state (its episodes as an Arrow IPC stream, see
        :func:`replay.state.state_to_plain`) and one record per stored multi-agent episode."""
        return {
            "format": STATE_FORMAT,
            "capacity_env_steps": self.capacity_env_steps,
            "batch_size_B": self.batch_size_B,
            "num_env_steps": self._num_env_steps,
            "counters": {name: getattr(self, name) for name in COUNTERS},
            "num_module_steps_sampled": dict(self.num_module_steps_sampled),
            "rng_state": dict(self.rng.bit_generator.state),
            "modules": {mid: state_to_plain(buf.get_state()) for mid, buf in self.modules.items()},
            "records": [rec.to_plain(id_) for id_, rec in self.records.items()],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Replaces everything with ``get_state()`` output: the buffer then samples what the saved
        one would have. Malformed state raises DataFormatError, leaving the buffer as it was."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise DataFormatError(f"set_state takes a dict of format {STATE_FORMAT!r} from get_state (got {got!r})")
        try:
            modules = {mid: state_from_plain(plain) for mid, plain in state["modules"].items()}
            records = {r["id"]: MultiAgentRecord.from_plain(r) for r in state["records"]}
            counters = {name: int(state["counters"][name]) for name in COUNTERS}
            sampled = {str(mid): int(n) for mid, n in state["num_module_steps_sampled"].items()}
            settings = (int(state["capacity_env_steps"]), int(state["batch_size_B"]), int(state["num_env_steps"]))
            rng = np.random.default_rng()
            rng.bit_generator.state = state["rng_state"]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataFormatError(f"set_state: malformed state ({type(e).__name__}: {e})") from e
        self.capacity_env_steps, self.batch_size_B, self._num_env_steps = settings
        self.modules = {}
        for mid, module_state in modules.items():
            self.modules[mid] = EpisodeReplayBuffer(capacity_env_steps=module_state.capacity_env_steps)
            self.modules[mid].set_state(module_state)
        self.records = records
        for name, value in counters.items():
            setattr(self, name, value)
        self.num_module_steps_sampled = sampled
        self.rng = rng

    # ---------------------------------------------------------------- sampling
    def sample(
        self,
        num_items: int | None = None,
        *,
        batch_size_B: int | None = None,
        batch_length_T: int | None = None,
        n_step: int | tuple[int, int] | None = 1,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        replay_mode: str = "independent",
        modules_to_sample: Sequence[str] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """``{module_id: batch}`` of n-step transitions (the single-agent buffer's batch columns; see
        the module docstring for the two modes). RLlib's keywords: ``num_items`` or ``batch_size_B``
        (default: the buffer's), ``batch_length_T`` None or 1 (single transitions), ``n_step`` an int
        or an inclusive ``(low, high)`` range drawn per transition."""
        batch_size_B = resolve_alias("batch_size_B", batch_size_B, "num_items", num_items, default=self.batch_size_B)
        batch_size_B = check_int("batch_size_B", batch_size_B, minimum=1, error=ReplayError)
        if batch_length_T is not None:
            _check_length_1(batch_length_T, ReplayError)
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
            out = {
                mid: self.modules[mid].sample(  # a flat batch (no sample_episodes)
                    batch_size_B, n_step=n, gamma=gamma, include_infos=include_infos,
                    include_extra_model_outputs=include_extra_model_outputs,
                )
                for mid in mids
                if self.modules[mid].get_num_timesteps()
            }  # fmt: skip
        else:
            out = self._sample_synchronized(
                batch_size_B, n, gamma, set(mids), include_infos, include_extra_model_outputs
            )
        for mid, batch in out.items():
            self._count_sampled(mid, len(batch["rewards"]))
        return out

    def _count_sampled(self, module_id: str, num_transitions: int) -> None:
        self.num_module_steps_sampled[module_id] = self.num_module_steps_sampled.get(module_id, 0) + num_transitions

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
        batches = self.modules[module_id].sample_batches(batch_size_B, num_batches, n_step=n_step, gamma=gamma)
        self.num_env_steps_sampled += batch_size_B * num_batches
        self._count_sampled(module_id, batch_size_B * num_batches)
        return batches

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


def _check_length_1(batch_length_T: Any, error: type[Exception]) -> int:
    """RLlib's ``batch_length_T``, which its multi-agent buffer takes but never uses: only 1 here."""
    if isinstance(batch_length_T, bool) or batch_length_T != 1:
        raise error(
            "'batch_length_T' must be 1: the multi-agent buffer samples single (n-step) transitions, as RLlib's "
            f"(got {batch_length_T!r})"
        )
    return 1


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
