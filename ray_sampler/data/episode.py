"""SingleAgentEpisode: one agent's trajectory chunk with a lookback buffer, as in RLlib's new API stack.

An episode starts with ``add_env_reset`` and grows with ``add_env_step``; ``len()`` counts
steps (actions), so it holds ``len + 1`` observations. A chunk may carry a *lookback*: the
``len_lookback_buffer`` steps (and observations) right before its first step, readable by
the getters but never counted as its data (not in ``len``, not in ``get_return``). The index
rules of every getter are those of :mod:`ray_sampler.data.lookback`.

>>> ep = SingleAgentEpisode()
>>> ep.add_env_reset(0)
>>> for t in range(3):
...     ep.add_env_step(t + 1, action=t, reward=float(t))
>>> cont = ep.cut(len_lookback_buffer=2)
>>> len(ep), len(cont), cont.t_started, cont.get_observations(-1), cont.get_actions(-1)
(3, 0, 3, 3, 2)
"""

from __future__ import annotations

import uuid
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.lookback import Indices, LookbackBuffer
from ray_sampler.errors import EpisodeError
from ray_sampler.validate import check_int

__all__ = ["SingleAgentEpisode"]


class SingleAgentEpisode:
    """A single-agent trajectory chunk: observations, actions, rewards, infos, model outputs.

    Constructor data (lists of items, or structures of arrays with a leading time axis) is
    episode data unless ``len_lookback_buffer`` says how many of its first steps are
    lookback (``"auto"``: all of them, RLlib's default). ``t_started`` is the global
    timestep of the chunk's first step.
    """

    __slots__ = (
        "_act",
        "_emo",
        "_inf",
        "_is_open",
        "_obs",
        "_rew",
        "action_space",
        "id_",
        "is_terminated",
        "is_truncated",
        "observation_space",
        "t_started",
    )

    def __init__(
        self,
        id_: str | None = None,
        *,
        observations: Any = None,
        observation_space: gym.Space | None = None,
        infos: list[dict] | None = None,
        actions: Any = None,
        action_space: gym.Space | None = None,
        rewards: Any = None,
        terminated: bool = False,
        truncated: bool = False,
        extra_model_outputs: dict[str, Any] | None = None,
        t_started: int = 0,
        len_lookback_buffer: int | str = 0,
    ) -> None:
        obs = LookbackBuffer(_as_data(observations), space=observation_space)
        act = LookbackBuffer(_as_data(actions), space=action_space)
        rew = LookbackBuffer(_as_data(rewards))
        num_obs, num_steps = obs.num_total(), act.num_total()
        if num_steps != max(num_obs - 1, 0):
            raise EpisodeError(
                f"'actions' must hold one item fewer than 'observations' "
                f"(got {num_steps} actions for {num_obs} observations)"
            )
        if rew.num_total() != num_steps:
            raise EpisodeError(f"'rewards' must hold one item per action (got {rew.num_total()} for {num_steps})")
        if infos is None:
            infos = [{} for _ in range(num_obs)]
        elif len(infos) != num_obs:
            raise EpisodeError(f"'infos' must hold one item per observation (got {len(infos)} for {num_obs})")
        emo = {k: LookbackBuffer(_as_data(v)) for k, v in (extra_model_outputs or {}).items()}
        for k, buf in emo.items():
            if buf.num_total() != num_steps:
                raise EpisodeError(
                    f"'extra_model_outputs[{k!r}]' must hold one item per action "
                    f"(got {buf.num_total()} for {num_steps})"
                )
        lookback = num_steps if len_lookback_buffer == "auto" else len_lookback_buffer
        if not isinstance(lookback, int) or isinstance(lookback, bool) or not 0 <= lookback <= num_steps:
            raise EpisodeError(
                f"'len_lookback_buffer' must be 'auto' or an int in [0, {num_steps}] (the number of actions given) "
                f"(got {len_lookback_buffer!r})"
            )
        if not isinstance(t_started, (int, np.integer)) or t_started < 0:
            raise EpisodeError(f"'t_started' must be an int >= 0 (got {t_started!r})")
        if (terminated or truncated) and num_obs == 0:
            raise EpisodeError("'terminated'/'truncated' need observations: an episode without data cannot be done")
        for buf in (obs, act, rew, *emo.values()):
            buf.lookback = lookback
        self._init(
            id_,
            obs,
            act,
            rew,
            LookbackBuffer(list(infos), lookback=lookback),
            emo,
            t_started=int(t_started),
            terminated=terminated,
            truncated=truncated,
            observation_space=observation_space,
            action_space=action_space,
        )
        if any(b.is_numpy for b in (obs, act, rew, *emo.values())):
            self.to_numpy()

    def _init(
        self,
        id_: str | None,
        obs: LookbackBuffer,
        act: LookbackBuffer,
        rew: LookbackBuffer,
        inf: LookbackBuffer,
        emo: dict[str, LookbackBuffer],
        *,
        t_started: int,
        terminated: bool,
        truncated: bool,
        observation_space: gym.Space | None,
        action_space: gym.Space | None,
    ) -> None:
        self.id_ = uuid.uuid4().hex if id_ is None else id_
        self.t_started = t_started
        self.is_terminated = bool(terminated)
        self.is_truncated = bool(truncated)
        self.observation_space = observation_space
        self.action_space = action_space
        self._obs, self._act, self._rew, self._inf, self._emo = obs, act, rew, inf, emo
        self._refresh_open()

    @classmethod
    def from_buffers(
        cls,
        id_: str,
        *,
        observations: LookbackBuffer,
        actions: LookbackBuffer,
        rewards: LookbackBuffer,
        infos: LookbackBuffer,
        extra_model_outputs: dict[str, LookbackBuffer],
        t_started: int = 0,
        terminated: bool = False,
        truncated: bool = False,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
    ) -> SingleAgentEpisode:
        """An episode that takes ``LookbackBuffer`` objects as they are (no copy, no checks): for
        code that builds consistent buffers in bulk (the columnar form, the replay). Every buffer
        must have the same ``lookback``; observations and infos one item more than the others."""
        ep = cls.__new__(cls)
        cls._init(
            ep,
            id_,
            observations,
            actions,
            rewards,
            infos,
            extra_model_outputs,
            t_started=t_started,
            terminated=terminated,
            truncated=truncated,
            observation_space=observation_space,
            action_space=action_space,
        )
        return ep

    def _refresh_open(self) -> None:
        # The fast path of add_env_step: reset done, not done, list storage.
        self._is_open = not self.is_done and not self._obs.is_numpy and self._obs.num_total() > 0

    # ---------------------------------------------------------------- properties
    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    @property
    def is_reset(self) -> bool:
        """Whether the episode holds its first observation (``add_env_reset`` was called)."""
        return self._obs.num_total() > 0

    @property
    def is_numpy(self) -> bool:
        return self._obs.is_numpy

    @property
    def t(self) -> int:
        """Global timestep after the last step: ``t_started + len(self)``."""
        return self.t_started + len(self)

    @property
    def len_lookback_buffer(self) -> int:
        return self._act.lookback

    @property
    def observations(self) -> LookbackBuffer:
        return self._obs

    @property
    def actions(self) -> LookbackBuffer:
        return self._act

    @property
    def rewards(self) -> LookbackBuffer:
        return self._rew

    @property
    def infos(self) -> LookbackBuffer:
        return self._inf

    @property
    def extra_model_outputs(self) -> dict[str, LookbackBuffer]:
        return self._emo

    def __len__(self) -> int:
        return self._act.num_total() - self._act.lookback

    def __repr__(self) -> str:
        return (
            f"SingleAgentEpisode(id_={self.id_!r}, t_started={self.t_started}, len={len(self)}, "
            f"lookback={self.len_lookback_buffer}, terminated={self.is_terminated}, "
            f"truncated={self.is_truncated}, numpy={self.is_numpy})"
        )

    # ---------------------------------------------------------------- growing
    def add_env_reset(self, observation: Any, infos: dict | None = None) -> None:
        """Adds the first observation (and its infos); the episode still has length 0."""
        if self._obs.num_total():
            raise EpisodeError("add_env_reset: the episode already holds observations; start a new episode")
        self._obs.append(observation)
        self._inf.append({} if infos is None else infos)
        self._refresh_open()

    def add_env_step(
        self,
        observation: Any,
        action: Any,
        reward: Any,
        infos: dict | None = None,
        *,
        terminated: bool = False,
        truncated: bool = False,
        extra_model_outputs: dict[str, Any] | None = None,
    ) -> None:
        """Adds one step: the action taken, the reward and observation it led to, and flags."""
        if not self._is_open:
            self._check_can_step()
        emo = self._emo
        if extra_model_outputs:
            if extra_model_outputs.keys() != emo.keys():
                self._add_extra_keys(extra_model_outputs)
        elif emo:
            raise EpisodeError(f"'extra_model_outputs' must hold the keys {sorted(emo)} every step (got none)")
        if self._is_open:
            self._obs.data.append(observation)
            self._act.data.append(action)
            self._rew.data.append(reward)
            self._inf.data.append({} if infos is None else infos)
            if extra_model_outputs:
                for k, v in extra_model_outputs.items():
                    emo[k].data.append(v)
        else:
            for buf, item in ((self._obs, observation), (self._act, action), (self._rew, reward)):
                buf.append(item)
            self._inf.append({} if infos is None else infos)
            for k, v in (extra_model_outputs or {}).items():
                emo[k].append(v)
        if terminated or truncated:
            self.is_terminated = bool(terminated)
            self.is_truncated = bool(truncated)
            self._is_open = False

    def _check_can_step(self) -> None:
        if self.is_done:
            raise EpisodeError(f"add_env_step: episode {self.id_!r} is done (terminated or truncated)")
        if not self._obs.num_total():
            raise EpisodeError("add_env_step: call add_env_reset first")

    def _add_extra_keys(self, outputs: dict[str, Any]) -> None:
        if self._act.num_total() or self._emo:
            raise EpisodeError(
                f"'extra_model_outputs' must hold the same keys every step: had {sorted(self._emo)}, "
                f"got {sorted(outputs)}"
            )
        for k in outputs:
            buf = LookbackBuffer()
            if self.is_numpy:
                buf.to_numpy()
            self._emo[k] = buf

    # ---------------------------------------------------------------- reading
    def get_observations(
        self,
        indices: Indices = None,
        *,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        one_hot_discrete: bool = False,
    ) -> Any:
        """Observations at ``indices`` (``len + 1`` of them; rules in ray_sampler.data.lookback)."""
        return self._obs.get(
            indices, neg_index_as_lookback=neg_index_as_lookback, fill=fill, one_hot_discrete=one_hot_discrete
        )

    def get_actions(
        self,
        indices: Indices = None,
        *,
        neg_index_as_lookback: bool = False,
        fill: Any = None,
        one_hot_discrete: bool = False,
    ) -> Any:
        """Actions at ``indices``; ``one_hot_discrete`` turns Discrete actions into one-hot vectors."""
        return self._act.get(
            indices, neg_index_as_lookback=neg_index_as_lookback, fill=fill, one_hot_discrete=one_hot_discrete
        )

    def get_rewards(self, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None) -> Any:
        """Rewards at ``indices``."""
        return self._rew.get(indices, neg_index_as_lookback=neg_index_as_lookback, fill=fill)

    def get_infos(self, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None) -> Any:
        """Infos at ``indices`` (one per observation; always plain dicts in lists)."""
        return self._inf.get(indices, neg_index_as_lookback=neg_index_as_lookback, fill=fill)

    def get_extra_model_outputs(
        self, key: str, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None
    ) -> Any:
        """The model output ``key`` (e.g. ``"action_logp"``) at ``indices``."""
        if key not in self._emo:
            raise KeyError(f"no extra model output {key!r}; this episode has {sorted(self._emo)}")
        return self._emo[key].get(indices, neg_index_as_lookback=neg_index_as_lookback, fill=fill)

    def get_return(self) -> float:
        """Sum of the rewards of this chunk's steps (lookback excluded)."""
        rewards = self._rew.get()
        return float(np.sum(rewards)) if len(rewards) else 0.0

    # ---------------------------------------------------------------- chunks
    def cut(self, len_lookback_buffer: int = 1) -> SingleAgentEpisode:
        """The continuation chunk: length 0, same ``id_``, ``t_started = self.t``, with the last
        ``len_lookback_buffer`` steps (fewer if the episode has fewer) as its lookback.

        Costs O(len_lookback_buffer); the continuation always uses list storage so it can grow.
        """
        check_int("len_lookback_buffer", len_lookback_buffer, minimum=0, error=EpisodeError)
        if self.is_done:
            raise EpisodeError(f"cut: episode {self.id_!r} is done; only ongoing episodes continue")
        num_obs, num_steps = self._obs.num_total(), self._act.num_total()
        h = min(len_lookback_buffer, num_steps)
        obs_from = max(num_obs - h - 1, 0)
        return self.from_buffers(
            self.id_,
            observations=self._obs.copy_range(obs_from, num_obs, lookback=h, as_list=True),
            actions=self._act.copy_range(num_steps - h, num_steps, lookback=h, as_list=True),
            rewards=self._rew.copy_range(num_steps - h, num_steps, lookback=h, as_list=True),
            infos=self._inf.copy_range(obs_from, num_obs, lookback=h),
            extra_model_outputs={
                k: b.copy_range(num_steps - h, num_steps, lookback=h, as_list=True) for k, b in self._emo.items()
            },
            t_started=self.t,
            terminated=False,
            truncated=False,
            observation_space=self.observation_space,
            action_space=self.action_space,
        )

    def __getitem__(self, item: slice) -> SingleAgentEpisode:
        if not isinstance(item, slice):
            raise TypeError(f"episode[...] takes a slice (got {item!r}); use the getters for items")
        return self.slice(item)

    def slice(self, slice_: slice, *, len_lookback_buffer: int | None = None) -> SingleAgentEpisode:
        """Steps ``slice_`` (clipped as Python clips list slices) as a new episode.

        The new chunk's lookback holds up to ``len_lookback_buffer`` steps before the slice's
        start (default: this episode's own lookback length), taken from this episode's data
        and lookback. ``terminated``/``truncated`` are kept when the slice reaches the end.
        """
        start, stop, step = slice_.indices(len(self))
        if step != 1:
            raise ValueError(f"episode slices take step 1 (got {slice_.step!r})")
        stop = max(stop, start)
        want = self.len_lookback_buffer if len_lookback_buffer is None else len_lookback_buffer
        want = check_int("len_lookback_buffer", want, minimum=0, error=EpisodeError)
        lb = self._act.lookback
        h = min(want, lb + start)
        a, b = lb + start - h, lb + stop
        reaches_end = stop == len(self)
        return self.from_buffers(
            self.id_,
            observations=(
                self._obs.copy_range(a, b + 1, lookback=h) if self.is_reset else LookbackBuffer(space=self._obs.space)
            ),
            actions=self._act.copy_range(a, b, lookback=h),
            rewards=self._rew.copy_range(a, b, lookback=h),
            infos=self._inf.copy_range(a, b + 1, lookback=h) if self.is_reset else LookbackBuffer(),
            extra_model_outputs={k: buf.copy_range(a, b, lookback=h) for k, buf in self._emo.items()},
            t_started=self.t_started + start,
            terminated=self.is_terminated and reaches_end,
            truncated=self.is_truncated and reaches_end,
            observation_space=self.observation_space,
            action_space=self.action_space,
        )

    def concat_episode(self, other: SingleAgentEpisode) -> None:
        """Appends ``other``, the continuation of this chunk, in place.

        Checked: same ``id_``, ``other.t_started == self.t``, this chunk not done, the same
        extra-model-output keys, and ``other``'s first observation equal to this chunk's last.
        """
        if other.id_ != self.id_:
            raise EpisodeError(f"concat_episode: 'id_' differs (this {self.id_!r}, other {other.id_!r})")
        if self.is_done:
            raise EpisodeError(f"concat_episode: episode {self.id_!r} is done; nothing can follow it")
        if other.t_started != self.t:
            raise EpisodeError(
                f"concat_episode: other's 't_started' must equal this chunk's t={self.t} (got {other.t_started})"
            )
        if not other.is_reset or not self.is_reset:
            raise EpisodeError("concat_episode: both chunks need observations (add_env_reset first)")
        if other._emo.keys() != self._emo.keys() and not self._act.num_total():
            self._emo = {k: LookbackBuffer() for k in other._emo}
            if self.is_numpy:
                for buf in self._emo.values():
                    buf.to_numpy()
        if other._emo.keys() != self._emo.keys():
            raise EpisodeError(
                f"concat_episode: 'extra_model_outputs' keys differ ({sorted(self._emo)} vs {sorted(other._emo)})"
            )
        if not _equal_items(self.get_observations(-1), other.get_observations(0)):
            raise EpisodeError(
                "concat_episode: other's first observation differs from this chunk's last; "
                "it is not this chunk's continuation"
            )
        o_lb = other._act.lookback
        self._obs.extend(other._obs.view(o_lb + 1, other._obs.num_total()))
        self._inf.extend(other._inf.view(o_lb + 1, other._inf.num_total()))
        self._act.extend(other._act.view(o_lb, other._act.num_total()))
        self._rew.extend(other._rew.view(o_lb, other._rew.num_total()))
        for k, buf in self._emo.items():
            buf.extend(other._emo[k].view(o_lb, other._emo[k].num_total()))
        self.is_terminated, self.is_truncated = other.is_terminated, other.is_truncated
        self._refresh_open()

    # ---------------------------------------------------------------- forms and state
    def to_numpy(self) -> SingleAgentEpisode:
        """Turns list storage into (nested) arrays with a leading time axis; infos stay lists."""
        for buf in (self._obs, self._act, self._rew, *self._emo.values()):
            buf.to_numpy()
        self._is_open = False
        return self

    def to_list(self) -> SingleAgentEpisode:
        """Turns numpy storage back into lists of items (rows copied), so ``add_env_step`` is cheap again."""
        for buf in (self._obs, self._act, self._rew, *self._emo.values()):
            buf.to_list()
        self._refresh_open()
        return self

    def get_state(self) -> dict[str, Any]:
        """Everything needed to rebuild this episode with ``from_state`` (references, not copies)."""
        return {
            "id_": self.id_,
            "t_started": self.t_started,
            "len_lookback_buffer": self.len_lookback_buffer,
            "terminated": self.is_terminated,
            "truncated": self.is_truncated,
            "observations": self._obs.data,
            "actions": self._act.data,
            "rewards": self._rew.data,
            "infos": self._inf.data,
            "extra_model_outputs": {k: b.data for k, b in self._emo.items()},
            "observation_space": self.observation_space,
            "action_space": self.action_space,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SingleAgentEpisode:
        """Rebuilds an episode from ``get_state()`` output (validated like the constructor)."""
        copy = lambda d: list(d) if isinstance(d, list) else d  # noqa: E731
        return cls(
            state["id_"],
            observations=copy(state["observations"]),
            actions=copy(state["actions"]),
            rewards=copy(state["rewards"]),
            infos=list(state["infos"]),
            extra_model_outputs={k: copy(v) for k, v in state["extra_model_outputs"].items()},
            terminated=state["terminated"],
            truncated=state["truncated"],
            t_started=state["t_started"],
            len_lookback_buffer=state["len_lookback_buffer"],
            observation_space=state["observation_space"],
            action_space=state["action_space"],
        )


def _as_data(x: Any) -> Any:
    """Constructor input -> buffer data: a list stays a list (copied), arrays stay arrays."""
    if x is None:
        return []
    return list(x) if isinstance(x, list) else x


def _equal_items(a: Any, b: Any) -> bool:
    """Whether two (nested) items hold the same values."""
    if tree.is_structure(a) or tree.is_structure(b):
        if tree.spec_of(a) != tree.spec_of(b):
            return False
        return all(_equal_items(x, y) for x, y in zip(tree.flatten(a), tree.flatten(b)))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))
