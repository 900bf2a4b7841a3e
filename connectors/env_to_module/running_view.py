"""RunningEpisodesView and EnvToModulePiece: the recent past of every running episode, for env-to-module pieces.

An env-to-module piece that reads history (stacked frames, previous actions and rewards) reads
it through one batched view, ``RunningEpisodesView``: row ``i`` is sub-env ``i``'s running
episode, its last ``lookback_steps`` steps (and ``lookback_steps + 1`` observations, the current
one last), taken from the episode and its lookback. Positions before the episode's start are
filled (the rule is in ``connectors.history``).

Where the view comes from (``EnvToModulePiece.running``):

- the per-step engine hands the pieces the running SingleAgentEpisodes; the view is built from
  them (``RunningEpisodesView.from_episodes``), once per pipeline call;
- the vectorized engine builds no episode objects: it hands over ``episodes=[]`` and the view in
  ``shared_data["running_view"]``, built from each sub-env's cursor (its lookback) and the
  steps of the call so far (``ray_sampler.sampling.recent_steps``).

The contract of a piece that runs on the vectorized engine: subclass ``EnvToModulePiece``, set
``lookback_steps`` (how many steps before the current one it reads; the runner keeps at least
that many in every continuation chunk's lookback), and read history only through
``self.running(episodes, shared_data)`` and the batch, never from ``episodes`` directly.

>>> from ray_sampler.data.episode import SingleAgentEpisode
>>> ep = SingleAgentEpisode(observations=[np.array([t]) for t in range(4)], actions=[0, 1, 0], rewards=[1.0, 2.0, 3.0])
>>> view = RunningEpisodesView.from_episodes([ep.cut(len_lookback_buffer=2)], lookback_steps=3)
>>> view.get_observations(4)[0, :, 0].tolist(), view.get_rewards(3).tolist()
([0, 1, 2, 3], [[0.0, 2.0, 3.0]])
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from connectors.connector_v2 import ConnectorV2
from connectors.history import fill_dtype, fill_value
from ray_sampler.data import tree

__all__ = ["RUNNING_VIEW_KEY", "EnvToModulePiece", "RunningEpisodesView", "empty_items"]

RUNNING_VIEW_KEY = "running_view"
"""Where the vectorized engine puts the view in ``shared_data``."""


@dataclasses.dataclass(frozen=True)
class RunningEpisodesView:
    """The last ``L`` steps of every running episode, batched (row ``i``: sub-env ``i``), right-aligned:
    column ``-1`` is the newest. Columns before ``num_observations`` / ``num_steps`` hold no data."""

    observations: Any
    """[N, L + 1, ...] per leaf; ``[:, -1]`` is the observation the module acts on."""
    actions: Any
    """[N, L, ...] per leaf; ``[:, -1]`` is the action that led to the current observation."""
    rewards: np.ndarray
    """[N, L]."""
    num_observations: np.ndarray
    """[N]: how many of the ``L + 1`` observation columns hold the episode's (at least 1)."""
    num_steps: np.ndarray
    """[N]: how many of the ``L`` step columns hold the episode's."""
    position: np.ndarray | None = None
    """Ring layout (the vectorized engine's, so a step writes one column instead of shifting all):
    row ``i``'s newest observation is in column ``position[i] % (L + 1)``, its newest step in
    ``position[i] % L``, older ones before them, wrapping around. None: right-aligned."""

    @property
    def lookback_steps(self) -> int:
        """``L``: the steps before the current one this view holds."""
        return int(self.rewards.shape[1])

    def get_observations(self, num: int, *, fill: Any = 0) -> Any:
        """[N, num, ...]: the last ``num`` observations (the current one last), ``fill`` before the episode."""
        return _last(self.observations, self.num_observations, num, fill, self.position)

    def get_actions(self, num: int, *, fill: Any = 0) -> Any:
        """[N, num, ...]: the last ``num`` actions (newest last), ``fill`` before the episode."""
        return _last(self.actions, self.num_steps, num, fill, self.position)

    def get_rewards(self, num: int, *, fill: Any = 0) -> np.ndarray:
        """[N, num]: the last ``num`` rewards (newest last), ``fill`` before the episode."""
        out: np.ndarray = _last(self.rewards, self.num_steps, num, fill, self.position)
        return out

    @classmethod
    def from_episodes(
        cls, episodes: list[Any], *, lookback_steps: int, action_space: gym.Space | None = None
    ) -> RunningEpisodesView:
        """The view of running SingleAgentEpisodes (data and lookback; list or numpy form)."""
        h = lookback_steps
        obs_items = [ep.get_observations(slice(-(h + 1), None)) for ep in episodes]
        act_items = [ep.get_actions(slice(-h, None)) if h else [] for ep in episodes]
        rew_items = [ep.get_rewards(slice(-h, None)) if h else [] for ep in episodes]
        num_obs = np.array([_len(o) for o in obs_items], np.int64)
        num_steps = np.array([_len(a) for a in act_items], np.int64)
        n = len(episodes)
        first_obs = tree.stack([ep.get_observations(-1) for ep in episodes])
        observations = tree.map_structure(lambda a: np.zeros((n, h + 1, *a.shape[1:]), a.dtype), first_obs)
        space = action_space if action_space is not None else (episodes[0].action_space if episodes else None)
        actions = _action_buffer(episodes, act_items, space, n, h)
        rewards = np.zeros((n, h), np.float64)
        for i in range(n):
            if num_obs[i]:
                _put(observations, i, _stacked(obs_items[i]), int(num_obs[i]))
            if num_steps[i]:
                _put(actions, i, _stacked(act_items[i]), int(num_steps[i]))
                rewards[i, h - num_steps[i] :] = np.asarray(rew_items[i], np.float64)
        return cls(observations, actions, rewards, num_obs, num_steps)


def empty_items(space: gym.Space | None, n: int, h: int, like: Any = None) -> Any:
    """An [n, h, ...] buffer of zeros for items of ``space`` (or shaped like the batched ``like``)."""
    if like is not None:
        return tree.map_structure(lambda a: np.zeros((n, h, *np.shape(a)[1:]), np.asarray(a).dtype), like)
    if space is None:
        return np.zeros((n, h), np.float64)
    if isinstance(space, gym.spaces.Dict):
        return {k: empty_items(s, n, h) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(empty_items(s, n, h) for s in space.spaces)
    return np.zeros((n, h, *(space.shape or ())), space.dtype)


def _action_buffer(episodes: list[Any], items: list[Any], space: gym.Space | None, n: int, h: int) -> Any:
    """Zeros for [n, h] actions: shaped by the action space, else by the first stored action."""
    if space is None:
        for ep, acts in zip(episodes, items):
            if _len(acts):
                return empty_items(None, n, h, like=tree.stack([ep.get_actions(-1)]))
    return empty_items(space, n, h)


def _stacked(items: Any) -> Any:
    """Getter output (a list in list form, arrays in numpy form) as arrays with a leading axis."""
    return tree.stack(items) if isinstance(items, list) else items


def _len(items: Any) -> int:
    return len(items) if isinstance(items, list) else len(tree.first_leaf(items))


def _put(buffer: Any, row: int, items: Any, num: int) -> None:
    """Writes ``num`` stacked items right-aligned into row ``row`` of ``buffer``."""
    width = len(tree.first_leaf(buffer)[row])
    tree.map_structure(lambda b, x: b[row].__setitem__(slice(width - num, width), x), buffer, items)


def _last(buffer: Any, counts: np.ndarray, num: int, fill: Any, position: np.ndarray | None) -> Any:
    """The last ``num`` items of each row of ``buffer`` ([N, W, ...] per leaf, right-aligned or a ring
    at ``position``), oldest first, ``fill`` where a row has no data (always a copy: the buffer moves on)."""
    missing = np.arange(num)[None, :] < (num - counts)[:, None]

    def leaf(b: np.ndarray) -> np.ndarray:
        width = b.shape[1]
        if num > width:
            raise ValueError(f"the view holds {width} items per episode; {num} were asked for")
        if position is None:
            out = b[:, width - num :].astype(fill_dtype(b.dtype, fill))
        else:
            cols = (position[:, None] - num + 1 + np.arange(num)[None, :]) % width
            out = b[np.arange(len(b))[:, None], cols].astype(fill_dtype(b.dtype, fill), copy=False)
        if missing.any():
            out[missing] = fill_value(b.dtype, fill)
        return out

    return tree.map_structure(leaf, buffer)


class EnvToModulePiece(ConnectorV2):
    """Base of env-to-module pieces that run on both engines (see the module docstring for the contract).

    ``lookback_steps`` steps before the current one are what the piece may read; a piece that
    reads only the batch keeps 0. ``learner_piece()`` returns the learner piece that builds the
    same inputs for each step of a train batch (None: the piece has none).
    """

    lookback_steps: int = 0
    """Steps before the current one the piece reads (the runner's lookback horizon is kept >= this)."""

    def running(self, episodes: list[Any], shared_data: dict[str, Any] | None) -> RunningEpisodesView:
        """The running episodes' view: the engine's (``shared_data["running_view"]``), else one built
        from ``episodes`` and cached in ``shared_data`` for the other pieces of this call."""
        shared = shared_data if shared_data is not None else {}
        view = shared.get(RUNNING_VIEW_KEY)
        if view is None or view.lookback_steps < self.lookback_steps:
            view = RunningEpisodesView.from_episodes(episodes, lookback_steps=self.lookback_steps)
            shared[RUNNING_VIEW_KEY] = view
        return view

    def learner_piece(self) -> Any:
        """The learner piece that builds this piece's inputs in train batches (None: none)."""
        return None

    def recompute_output_observation_space(self, observation_space: gym.Space) -> gym.Space:
        """The observation space of ``batch["obs"]`` after this piece (unchanged by default)."""
        return observation_space
