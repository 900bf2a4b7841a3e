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

import time
import uuid
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.episode_chunks import EpisodeChunks
from ray_sampler.data.lookback import LookbackBuffer
from ray_sampler.errors import EpisodeError

__all__ = ["SingleAgentEpisode"]


class SingleAgentEpisode(EpisodeChunks):
    """A single-agent trajectory chunk: observations, actions, rewards, infos, model outputs.

    Constructor data (lists of items, or structures of arrays with a leading time axis) is
    episode data unless ``len_lookback_buffer`` says how many of its first steps are
    lookback (``"auto"``: all of them, RLlib's default; more than the steps given: all of
    them, as RLlib clips). ``t_started`` is the global timestep of the chunk's first step;
    None takes it from the data, which then starts at the episode's reset: the lookback
    steps come before the chunk, so ``t_started = len_lookback_buffer``.

    ``custom_data`` is a dict for the user's own per-episode values (see ``cut``,
    ``concat_episode``, ``slice`` and ``get_state``; the columnar transfer form carries it).
    """

    __slots__ = ()

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
        t_started: int | None = None,
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
        if not isinstance(lookback, (int, np.integer)) or isinstance(lookback, bool) or lookback < 0:
            raise EpisodeError(f"'len_lookback_buffer' must be 'auto' or an int >= 0 (got {len_lookback_buffer!r})")
        lookback = min(int(lookback), num_steps)  # as RLlib: at most the steps given
        if t_started is None:
            t_started = lookback
        if not isinstance(t_started, (int, np.integer)) or isinstance(t_started, bool) or t_started < 0:
            raise EpisodeError(f"'t_started' must be None or an int >= 0 (got {t_started!r})")
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
        self._custom_data: dict[str, Any] = {}
        self._start_time: float | None = None
        self._last_step_time: float | None = None
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
        custom_data: dict[str, Any] | None = None,
    ) -> SingleAgentEpisode:
        """An episode that takes ``LookbackBuffer`` objects (and ``custom_data``) as they are (no
        copy, no checks): for code that builds consistent buffers in bulk (the columnar form, the
        replay). Every buffer must have the same ``lookback``; observations and infos one item
        more than the others."""
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
        if custom_data:
            ep._custom_data = custom_data  # noqa: SLF001  # cls's own field, on the instance cls built
        return ep

    def _refresh_open(self) -> None:
        # The fast path of add_env_step: reset done, not done, list storage.
        self._is_open = not self.is_done and not self._obs.is_numpy and self._obs.num_total() > 0

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
        self._start_time = time.perf_counter()
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
            self._last_step_time = time.perf_counter()

    def add_env_steps(
        self,
        observations: list[Any],
        actions: list[Any],
        rewards: list[Any],
        infos: list[dict | None],
        extra_model_outputs: list[dict[str, Any] | None],
        *,
        terminated: bool = False,
        truncated: bool = False,
    ) -> None:
        """Several steps at once, as ``add_env_step`` once per step would add them (one item per
        step in each list; the flags are the last step's). The steps between the first and the last
        are appended in bulk where the episode is open and their model outputs' keys are the
        episode's; otherwise step by step."""
        n = len(actions)
        if not n:
            return
        last = n - 1
        self.add_env_step(
            observations[0], actions[0], rewards[0], infos[0], extra_model_outputs=extra_model_outputs[0],
            terminated=terminated and not last, truncated=truncated and not last,
        )  # fmt: skip
        if not last:
            return
        emo, rows = self._emo, extra_model_outputs[1:last]
        if self._is_open and all((row or {}).keys() == emo.keys() for row in rows):
            self._obs.data.extend(observations[1:last])
            self._act.data.extend(actions[1:last])
            self._rew.data.extend(rewards[1:last])
            self._inf.data.extend([{} if info is None else info for info in infos[1:last]])
            for key, buf in emo.items():
                buf.data.extend([row[key] for row in rows])  # type: ignore[index]  # the keys agree (above)
        else:
            for k in range(1, last):
                self.add_env_step(
                    observations[k], actions[k], rewards[k], infos[k], extra_model_outputs=extra_model_outputs[k]
                )
        self.add_env_step(
            observations[last], actions[last], rewards[last], infos[last],
            extra_model_outputs=extra_model_outputs[last], terminated=terminated, truncated=truncated,
        )  # fmt: skip

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

    # ---------------------------------------------------------------- reading (getters and setters: EpisodeFields)
    def get_return(self) -> float:
        """Sum of the rewards of this chunk's steps (lookback excluded)."""
        rewards = self._rew.get()
        return float(np.sum(rewards)) if len(rewards) else 0.0

    def get_duration_s(self) -> float:
        """Seconds this chunk was recorded over, by ``time.perf_counter`` in the recording process:
        from ``add_env_reset`` (or the ``cut`` that began it) to the step that ended it (or the
        ``cut`` that ended it; a chunk still growing: to now). 0.0 for a chunk that was not recorded
        step by step (built from data, by the vectorized engine, the columnar form or the replay)."""
        if self._start_time is None:
            return 0.0
        end = time.perf_counter() if self._last_step_time is None else self._last_step_time
        return end - self._start_time

    def validate(self) -> None:
        """Raises EpisodeError if the fields' lengths or lookbacks do not fit together: one
        observation and info per step plus one (or none at all), one action, reward and model
        output per step, the same lookback everywhere, and flags only on a reset episode."""
        num_obs, num_steps, lookback = self._obs.num_total(), self._act.num_total(), self._act.lookback
        fields = {"observations": self._obs, "infos": self._inf, "rewards": self._rew}
        fields.update({f"extra_model_outputs[{k!r}]": b for k, b in self._emo.items()})
        for name, buf in fields.items():
            want = num_obs if name in ("observations", "infos") else num_steps
            if buf.num_total() != want or buf.lookback != lookback:
                raise EpisodeError(
                    f"validate: '{name}' holds {buf.num_total()} items with lookback {buf.lookback}; "
                    f"expected {want} with lookback {lookback} (episode {self.id_!r})"
                )
        if num_obs != (num_steps + 1 if num_obs else 0):
            raise EpisodeError(
                f"validate: {num_obs} observations for {num_steps} actions; expected {num_steps + 1} "
                f"(episode {self.id_!r})"
            )
        if self.is_done and not num_obs:
            raise EpisodeError(f"validate: episode {self.id_!r} is done but holds no observation")

    # ---------------------------------------------------------------- forms and state
    def to_numpy(self) -> SingleAgentEpisode:
        """Turns list storage into (nested) arrays with a leading time axis; infos stay lists.
        EpisodeError (nothing changed) if a field's items do not share one shape."""
        named = {"observations": self._obs, "actions": self._act, "rewards": self._rew}
        named.update({f"extra_model_outputs[{k!r}]": b for k, b in self._emo.items()})
        converted: list[LookbackBuffer] = []
        for name, buf in named.items():
            try:
                buf.to_numpy()
            except (ValueError, TypeError) as e:  # numpy's "inhomogeneous shape": say which item
                for done in converted:  # nothing changed, whatever the error
                    done.to_list()
                found = tree.first_mismatch(buf.data) if isinstance(buf.data, list) else None
                if found is None:
                    raise
                raise EpisodeError(
                    f"to_numpy: {name} item {found[0]} (the lookback's {buf.lookback} items counted first) has "
                    f"{found[1]}; every item of a field must have its space's shape"
                ) from e
            converted.append(buf)
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
            "custom_data": self._custom_data,
            "start_time": self._start_time,
            "last_step_time": self._last_step_time,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SingleAgentEpisode:
        """Rebuilds an episode from ``get_state()`` output (validated like the constructor; a state
        without ``custom_data`` or the times, from before they existed, gets none)."""
        fresh = lambda d: list(d) if isinstance(d, list) else d  # noqa: E731
        ep = cls(
            state["id_"],
            observations=fresh(state["observations"]),
            actions=fresh(state["actions"]),
            rewards=fresh(state["rewards"]),
            infos=list(state["infos"]),
            extra_model_outputs={k: fresh(v) for k, v in state["extra_model_outputs"].items()},
            terminated=state["terminated"],
            truncated=state["truncated"],
            t_started=state["t_started"],
            len_lookback_buffer=state["len_lookback_buffer"],
            observation_space=state["observation_space"],
            action_space=state["action_space"],
        )
        ep._custom_data = dict(state.get("custom_data") or {})
        ep._start_time, ep._last_step_time = state.get("start_time"), state.get("last_step_time")
        return ep


def _as_data(x: Any) -> Any:
    """Constructor input -> buffer data: a list stays a list (copied), arrays stay arrays."""
    if x is None:
        return []
    return list(x) if isinstance(x, list) else x
