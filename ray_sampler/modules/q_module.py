"""QModule: a numpy MLP of Q-values per action that explores epsilon-greedily (for DQN)."""

from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules.action_masking import action_mask_slice, legal_actions, mask_logits
from ray_sampler.modules.mlp import ACTIVATIONS, forward, init_layer

__all__ = ["QModule", "check_q_module_args", "checked_epsilon", "epsilon_greedy_logits"]


class QModule:
    """An MLP of Q-values per action; explores epsilon-greedily (``epsilon`` travels with the weights).

    ``forward_exploration`` gives the epsilon-greedy distribution as ``action_dist_inputs``
    (log of ``epsilon / n`` plus ``1 - epsilon`` on the greedy action), so the runner's
    module-to-env pipeline draws from it with its own per-runner seeded generator (runners
    explore independently) and records the behaviour policy's ``action_logp`` (with
    ``random_actions=True`` the uniformly drawn actions are scored under the epsilon-greedy
    distribution instead: not the behaviour policy's; DQN never reads it).

    Where the observation space is a Dict with an ``action_mask`` over the actions (PettingZoo's
    board games), the input is still the whole flattened dict, mask included; ``q_values`` gives
    the forbidden actions ``MASKED_LOGIT``, so the greedy action is legal, epsilon is spread over
    the legal actions only and the forbidden ones get the logit ``MASKED_LOGIT`` (never drawn).
    The DQN loss takes its max over the next state's legal actions the same way.
    """

    action_mask_slice: slice | None = None
    """Where the action mask lies in the flat input (None: the observations carry none); set per
    instance from the spaces (``action_masking.action_mask_slice``)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        hidden_sizes: tuple[int, ...] = (64, 64),
        seed: int | None = 0,
        epsilon: float = 1.0,
        activation: str = "relu",
    ) -> None:
        discrete = check_q_module_args("QModule", action_space, activation)
        self.activation = activation
        self.observation_space, self.action_space = observation_space, discrete
        rng = np.random.default_rng(seed)
        sizes = (gym.spaces.flatdim(observation_space), *hidden_sizes, int(discrete.n))
        self._depth = len(sizes) - 1
        self.action_mask_slice = action_mask_slice(observation_space, discrete)
        self.params: dict[str, np.ndarray] = {}
        for layer, (a, b) in enumerate(itertools.pairwise(sizes)):
            gain = 1.0 if layer == len(sizes) - 2 else float(np.sqrt(2))
            self.params[f"q.{layer}.w"], self.params[f"q.{layer}.b"] = init_layer(rng, a, b, gain)
        self.epsilon = checked_epsilon(epsilon)

    def q_values(self, obs: Any) -> np.ndarray:
        """Q-values per action [N, n] of flat observations (``MASKED_LOGIT`` for masked actions)."""
        return self._q_and_legal(obs)[0]

    def _q_and_legal(self, obs: Any) -> tuple[np.ndarray, np.ndarray | None]:
        x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        q = forward(self.params, "q", x, self.activation, depth=self._depth)[0]
        if self.action_mask_slice is None:
            return q, None
        legal = legal_actions(x, self.action_mask_slice)
        return mask_logits(q, legal), legal

    def _greedy_and_dist(self, batch: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        q, legal = self._q_and_legal(batch[Columns.OBS])
        greedy = q.argmax(axis=1)
        return greedy, epsilon_greedy_logits(greedy, int(self.action_space.n), self.epsilon, legal)

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Greedy actions, with the epsilon-greedy distribution they are scored under (so explore
        and inference steps record the same model outputs)."""
        greedy, dist = self._greedy_and_dist(batch)
        return {Columns.ACTIONS: greedy + self.action_space.start, Columns.ACTION_DIST_INPUTS: dist}

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The epsilon-greedy distribution, for the runner's action sampling to draw from."""
        return {Columns.ACTION_DIST_INPUTS: self._greedy_and_dist(batch)[1]}

    def get_state(self) -> dict[str, Any]:
        return {**{k: v.copy() for k, v in self.params.items()}, "epsilon": np.float64(self.epsilon)}

    def set_state(self, state: dict[str, Any]) -> None:
        weights = {k: v for k, v in state.items() if k != "epsilon"}
        if weights.keys() != self.params.keys():
            raise ValueError(f"QModule.set_state: keys differ (got {sorted(weights)})")
        self.params = {k: np.asarray(v, np.float32).copy() for k, v in weights.items()}
        if "epsilon" in state:
            self.epsilon = checked_epsilon(state["epsilon"])


def check_q_module_args(owner: str, action_space: gym.Space, activation: str) -> gym.spaces.Discrete:
    """A Q-network module's arguments: a Discrete action space (returned) and a known activation."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise SpaceError(f"{owner} needs a Discrete action space (got {action_space})")
    if activation not in ACTIVATIONS:
        raise ConfigError(f"'activation' must be one of {ACTIVATIONS} (got {activation!r})")
    return action_space


def checked_epsilon(epsilon: Any) -> float:
    """``epsilon`` as a float in [0, 1]; ConfigError otherwise."""
    value = float(epsilon)
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"'epsilon' must be in [0, 1] (got {epsilon!r})")
    return value


def epsilon_greedy_logits(greedy: np.ndarray, num_actions: int, epsilon: float, legal: np.ndarray | None) -> np.ndarray:
    """The log-probabilities (float32 [N, n]) of acting epsilon-greedily around ``greedy[N]``: epsilon
    spread evenly over the actions (over the ``legal[N, n]`` ones where given, the others getting
    ``MASKED_LOGIT``), plus ``1 - epsilon`` on the greedy action."""
    rows = np.arange(len(greedy))
    if legal is None:
        probs = np.full((len(greedy), num_actions), epsilon / num_actions)
    else:
        probs = legal * (epsilon / np.maximum(legal.sum(axis=1, keepdims=True), 1))
    probs[rows, greedy] += 1.0 - epsilon
    # A zero probability becomes the smallest float32 (logits stay finite; it is never drawn).
    logits = np.log(np.maximum(probs, np.finfo(np.float32).tiny)).astype(np.float32)
    return logits if legal is None else mask_logits(logits, legal | (probs > 0))
