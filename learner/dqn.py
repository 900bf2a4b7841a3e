"""DQN on numpy: a Q-network module (epsilon-greedy), the double-DQN loss with exact gradients,
and a learner with a target network, fed n-step batches from a replay buffer.

Loss per batch (``n_step`` from the replay: the steps really used, never through a terminal):

    target = rewards + gamma ** n_step * (1 - terminateds) * Q_target(next_obs)[argmax_a Q(next_obs)]
    loss   = mean(weights * huber(Q(obs)[actions] - target))

Truncated episodes bootstrap (only ``terminated`` stops it). ``td_errors`` come back for
prioritized replay's ``update_priorities``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from learner.mlp_grad import backward, forward
from learner.optim import Adam
from ray_sampler.columns import Columns
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.module import _init_layer

__all__ = ["DQNConfig", "DQNLearner", "QModule", "dqn_loss_and_grads"]


class QModule:
    """An MLP of Q-values per action; explores epsilon-greedily (``epsilon`` travels with the weights)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, hidden_sizes: tuple[int, ...] = (64, 64),
                 seed: int | None = 0, epsilon: float = 1.0) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise SpaceError(f"QModule needs a Discrete action space (got {action_space})")
        self.observation_space, self.action_space = observation_space, action_space
        rng = np.random.default_rng(seed)
        sizes = (gym.spaces.flatdim(observation_space), *hidden_sizes, int(action_space.n))
        self.params: dict[str, np.ndarray] = {}
        for layer, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            gain = 1.0 if layer == len(sizes) - 2 else float(np.sqrt(2))
            self.params[f"q.{layer}.w"], self.params[f"q.{layer}.b"] = _init_layer(rng, a, b, gain)
        self.epsilon = float(epsilon)
        self._rng = np.random.default_rng(None if seed is None else seed + 1)

    def q_values(self, obs: Any) -> np.ndarray:
        x = np.asarray(obs, np.float32).reshape(len(obs), -1)
        return forward(self.params, "q", x)[0]

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        q = self.q_values(batch[Columns.OBS])
        return {Columns.ACTIONS: q.argmax(axis=1) + self.action_space.start}

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        actions = self.forward_inference(batch)[Columns.ACTIONS]
        explore = self._rng.random(len(actions)) < self.epsilon
        random = self._rng.integers(0, self.action_space.n, len(actions)) + self.action_space.start
        return {Columns.ACTIONS: np.where(explore, random, actions)}

    def get_state(self) -> dict[str, Any]:
        return {**{k: v.copy() for k, v in self.params.items()}, "epsilon": np.float64(self.epsilon)}

    def set_state(self, state: dict[str, Any]) -> None:
        weights = {k: v for k, v in state.items() if k != "epsilon"}
        if weights.keys() != self.params.keys():
            raise ValueError(f"QModule.set_state: keys differ (got {sorted(weights)})")
        self.params = {k: np.asarray(v, np.float32).copy() for k, v in weights.items()}
        if "epsilon" in state:
            self.epsilon = float(state["epsilon"])


def _huber(x: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss and its derivative."""
    small = np.abs(x) <= delta
    return np.where(small, 0.5 * x * x, delta * (np.abs(x) - 0.5 * delta)), np.where(small, x, delta * np.sign(x))


def dqn_loss_and_grads(params: dict[str, np.ndarray], target_params: dict[str, np.ndarray], batch: dict[str, Any], *,
                       gamma: float = 0.99, huber_delta: float = 1.0, double_q: bool = True,
                       ) -> tuple[dict[str, float], dict[str, np.ndarray], np.ndarray]:
    """Loss terms, gradients of the online parameters, and TD errors (see the module docstring)."""
    obs = np.asarray(batch["obs"], np.float64).reshape(len(batch["obs"]), -1)
    next_obs = np.asarray(batch["next_obs"], np.float64).reshape(len(obs), -1)
    actions = np.asarray(batch["actions"], np.int64)
    n = len(obs)
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    t64 = {k: v.astype(np.float64) for k, v in target_params.items()}
    q_all, cache = forward(p64, "q", obs)
    q = q_all[np.arange(n), actions]
    q_next_target = forward(t64, "q", next_obs)[0]
    best = (forward(p64, "q", next_obs)[0] if double_q else q_next_target).argmax(axis=1)
    discount = gamma ** np.asarray(batch.get("n_step", np.ones(n)), np.float64)
    not_done = 1.0 - np.asarray(batch["terminateds"], np.float64)
    target = np.asarray(batch["rewards"], np.float64) + discount * not_done * q_next_target[np.arange(n), best]
    td = q - target
    weights = np.asarray(batch.get("weights", np.ones(n)), np.float64)
    loss, d_loss = _huber(td, huber_delta)
    grad_q = np.zeros_like(q_all)
    grad_q[np.arange(n), actions] = weights * d_loss / n
    grads = backward(p64, "q", cache, grad_q)
    terms = {"loss": float((weights * loss).mean()), "q_mean": float(q.mean()), "td_abs_mean": float(np.abs(td).mean())}
    return terms, {k: g.astype(params[k].dtype) for k, g in grads.items()}, td


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNConfig:
    """DQN's hyperparameters."""

    lr: float = 5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount (per step; n-step targets use gamma ** n)."""
    double_q: bool = True
    """Choose the next action with the online network, value it with the target network."""
    target_update_every: int = 500
    """Gradient steps between target network copies."""
    huber_delta: float = 1.0
    """Huber loss threshold."""
    grad_clip: float | None = 10.0
    """Global gradient-norm clip."""

    def __post_init__(self) -> None:
        if not isinstance(self.target_update_every, int) or self.target_update_every < 1:
            raise ConfigError(f"'target_update_every' must be an int >= 1 (got {self.target_update_every!r})")
        if not 0 <= self.gamma <= 1:
            raise ConfigError(f"'gamma' must be in [0, 1] (got {self.gamma!r})")


class DQNLearner:
    """A QModule, its target network and Adam; one gradient step per ``update_from_batch``."""

    def __init__(self, module: QModule, config: DQNConfig | None = None) -> None:
        self.module = module
        self.config = config or DQNConfig()
        self.target_params = {k: v.copy() for k, v in module.params.items()}
        self.optimizer = Adam(lr=self.config.lr, grad_clip=self.config.grad_clip)
        self.num_updates = 0

    def update_from_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """One step on a replay batch; metrics include ``td_errors`` (for update_priorities)."""
        terms, grads, td = dqn_loss_and_grads(self.module.params, self.target_params, batch, gamma=self.config.gamma,
                                              huber_delta=self.config.huber_delta, double_q=self.config.double_q)
        norm = self.optimizer.step(self.module.params, grads)
        self.num_updates += 1
        if self.num_updates % self.config.target_update_every == 0:
            self.target_params = {k: v.copy() for k, v in self.module.params.items()}
        return {**terms, "grad_norm": norm, "td_errors": td, "num_updates": self.num_updates}
