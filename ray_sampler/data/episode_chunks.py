"""EpisodeChunks: how SingleAgentEpisode chunks are cut, sliced and joined.

``cut`` starts the continuation of an ongoing chunk (what a runner ships, then keeps
recording into), ``slice`` copies steps out as a new chunk, ``concat_episode`` joins a
continuation back on. Each keeps the lookback rules of :mod:`ray_sampler.data.lookback` and
says what happens to ``custom_data`` and the recording clock (``get_duration_s``).

>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> ep = SingleAgentEpisode(observations=[0, 1, 2], actions=[0, 1], rewards=[1.0, 1.0])
>>> ep.custom_data["seen"] = 1
>>> cont = ep.cut()
>>> cont.add_env_step(3, 2, 1.0, terminated=True)
>>> ep.concat_episode(cont)
>>> len(ep), ep.is_terminated, ep[1:].get_observations(), ep.custom_data
(3, True, [1, 2, 3], {'seen': 1})
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from ray_sampler.data import tree
from ray_sampler.data.episode_fields import EpisodeFields
from ray_sampler.data.lookback import LookbackBuffer
from ray_sampler.errors import EpisodeError
from ray_sampler.validate import check_int

if TYPE_CHECKING:
    from ray_sampler.data.episode import SingleAgentEpisode

__all__ = ["EpisodeChunks"]


class EpisodeChunks(EpisodeFields):
    """cut, slice and concat_episode (SingleAgentEpisode's base)."""

    __slots__ = ()
    if TYPE_CHECKING:  # SingleAgentEpisode's own
        from_buffers: Any

        def _refresh_open(self) -> None: ...

    def cut(self, len_lookback_buffer: int = 1) -> SingleAgentEpisode:
        """The continuation chunk: length 0, same ``id_``, ``t_started = self.t``, with the last
        ``len_lookback_buffer`` steps (fewer if the episode has fewer) as its lookback.

        Costs O(len_lookback_buffer); the continuation always uses list storage so it can grow.
        It gets a deep copy of ``custom_data``; this chunk's duration ends here, the
        continuation's starts here.
        """
        check_int("len_lookback_buffer", len_lookback_buffer, minimum=0, error=EpisodeError)
        if self.is_done:
            raise EpisodeError(f"cut: episode {self.id_!r} is done; only ongoing episodes continue")
        num_obs, num_steps = self._obs.num_total(), self._act.num_total()
        h = min(len_lookback_buffer, num_steps)
        obs_from = max(num_obs - h - 1, 0)
        cont = self.from_buffers(
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
            custom_data=copy.deepcopy(self._custom_data) if self._custom_data else None,
        )
        # The continuation is an episode like self: its clock is a field of this same base class.
        self._last_step_time = cont._start_time = time.perf_counter()  # noqa: SLF001
        return cont

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
            custom_data=copy.deepcopy(self._custom_data) if self._custom_data else None,
        )

    def concat_episode(self, other: SingleAgentEpisode) -> None:
        """Appends ``other``, the continuation of this chunk, in place.

        Checked: same ``id_``, ``other.t_started == self.t``, this chunk not done, the same
        extra-model-output keys, and ``other``'s first observation equal to this chunk's last.
        ``custom_data`` is merged, ``other``'s keys winning (as RLlib's).
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
        o_emo = other.extra_model_outputs
        if o_emo.keys() != self._emo.keys() and not self._act.num_total():
            self._emo = {k: LookbackBuffer() for k in o_emo}
            if self.is_numpy:
                for buf in self._emo.values():
                    buf.to_numpy()
        if o_emo.keys() != self._emo.keys():
            raise EpisodeError(
                f"concat_episode: 'extra_model_outputs' keys differ ({sorted(self._emo)} vs {sorted(o_emo)})"
            )
        if not tree.equal(self.get_observations(-1), other.get_observations(0)):
            raise EpisodeError(
                "concat_episode: other's first observation differs from this chunk's last; "
                "it is not this chunk's continuation"
            )
        o_lb = other.len_lookback_buffer
        for mine, theirs, first in (
            (self._obs, other.observations, o_lb + 1),
            (self._inf, other.infos, o_lb + 1),
            (self._act, other.actions, o_lb),
            (self._rew, other.rewards, o_lb),
            *((buf, o_emo[k], o_lb) for k, buf in self._emo.items()),
        ):
            mine.extend(theirs.view(first, theirs.num_total()))
        self.is_terminated, self.is_truncated = other.is_terminated, other.is_truncated
        self._custom_data.update(other.custom_data)
        # `other` is an episode like self: its clock is a field of this same base class.
        if other._last_step_time is not None:  # noqa: SLF001
            self._last_step_time = other._last_step_time  # noqa: SLF001
        self._refresh_open()
