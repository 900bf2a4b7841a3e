"""EpisodeFields: SingleAgentEpisode's fields, their properties, getters and setters.

Every getter and setter applies the index rules of :mod:`ray_sampler.data.lookback` to one
field's buffer (observations and infos hold ``len + 1`` items, the others ``len``). The setters
take RLlib's keyword-only signature (``new_data``, ``at_indices``, ``neg_index_as_lookback``)
and overwrite items in place, the lookback included; they never change the episode's length.

>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> ep = SingleAgentEpisode(observations=[0, 1, 2, 3], actions=[0, 1, 2], rewards=[0.0, 1.0, 2.0],
...                         len_lookback_buffer=1)
>>> ep.set_rewards(new_data=[5.0, 6.0])
>>> ep.set_rewards(new_data=-1.0, at_indices=-1, neg_index_as_lookback=True)
>>> ep.get_rewards(slice(-1, None), neg_index_as_lookback=True)
[-1.0, 5.0, 6.0]
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ray_sampler.data.lookback import Indices, LookbackBuffer
from ray_sampler.errors import EpisodeError

__all__ = ["EpisodeFields"]


class EpisodeFields:
    """An episode's fields and read and overwrite access to them (SingleAgentEpisode's base;
    its constructor sets the fields)."""

    __slots__ = (
        "_act",
        "_custom_data",
        "_emo",
        "_inf",
        "_is_open",
        "_last_step_time",
        "_obs",
        "_rew",
        "_start_time",
        "action_space",
        "id_",
        "is_terminated",
        "is_truncated",
        "observation_space",
        "t_started",
    )
    id_: str
    t_started: int
    """Global timestep of the chunk's first step."""
    is_terminated: bool
    is_truncated: bool
    observation_space: gym.Space | None
    action_space: gym.Space | None
    _obs: LookbackBuffer
    _act: LookbackBuffer
    _rew: LookbackBuffer
    _inf: LookbackBuffer
    _emo: dict[str, LookbackBuffer]
    _custom_data: dict[str, Any]
    _is_open: bool
    _start_time: float | None
    _last_step_time: float | None

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

    @property
    def custom_data(self) -> dict[str, Any]:
        """The user's own values for this episode: deep-copied by ``cut`` and ``slice``, merged by
        ``concat_episode`` (the later chunk's keys win), kept by ``get_state``/``from_state`` and
        by the columnar transfer form; not stored by the replay buffer or the Arrow form."""
        return self._custom_data

    def __len__(self) -> int:
        return self._act.num_total() - self._act.lookback

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
        return self._emo_buffer(key).get(indices, neg_index_as_lookback=neg_index_as_lookback, fill=fill)

    def _emo_buffer(self, key: str) -> LookbackBuffer:
        if key not in self._emo:
            raise KeyError(f"no extra model output {key!r}; this episode has {sorted(self._emo)}")
        return self._emo[key]

    # ---------------------------------------------------------------- overwriting
    def set_observations(
        self, *, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrites the observations at ``at_indices`` (None: all but the lookback) with ``new_data``."""
        self._obs.set(new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_actions(self, *, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False) -> None:
        """Overwrites the actions at ``at_indices`` with ``new_data``."""
        self._act.set(new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_rewards(self, *, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False) -> None:
        """Overwrites the rewards at ``at_indices`` with ``new_data``."""
        self._rew.set(new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)

    def set_extra_model_outputs(
        self, *, key: str, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrites the model output ``key`` at ``at_indices`` (the key must exist: a new key would
        leave the earlier steps without a value)."""
        if key not in self._emo:
            raise EpisodeError(
                f"set_extra_model_outputs: no extra model output {key!r}; this episode has {sorted(self._emo)}"
            )
        self._emo[key].set(new_data, at_indices=at_indices, neg_index_as_lookback=neg_index_as_lookback)
