"""DQN on numpy: a Q-network module (epsilon-greedy), the double-DQN loss with exact gradients,
and a learner with a target network, fed n-step batches from a replay buffer.

Loss per batch (``n_step`` from the replay: the steps really used, never through a terminal):

    target = rewards + gamma ** n_step * (1 - terminateds) * Q_target(next_obs)[argmax_a Q(next_obs)]
    loss   = mean(weights * huber(Q(obs)[actions] - target))

Truncated episodes bootstrap (only ``terminated`` stops it). ``td_errors`` come back for
prioritized replay's ``update_priorities``.

Where the observations are a Dict carrying an ``action_mask`` (``QModule.action_mask_slice``), the
learner flattens them as the runner does, and the argmax over next actions is over the actions the
next observation's mask allows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from learner.metrics import DQNStepMetrics
from learner.optim import Adam
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.data.spaces import flatten_batch
from ray_sampler.errors import SpaceError
from ray_sampler.handles import call
from ray_sampler.modules.action_masking import legal_actions, mask_logits
from ray_sampler.modules.mlp import backward, forward
from ray_sampler.modules.q_module import QModule
from ray_sampler.validate import check_bool, check_int, check_number, check_optional, check_probability, check_type
from replay.buffer import EpisodeReplayBuffer
from replay.shards import ShardDraw

__all__ = ["DQNConfig", "DQNLearner", "check_dqn_observation_space", "dqn_loss_and_grads", "flat_observations"]


def _huber(x: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss and its derivative."""
    small = np.abs(x) <= delta
    return np.where(small, 0.5 * x * x, delta * (np.abs(x) - 0.5 * delta)), np.where(small, x, delta * np.sign(x))


def dqn_loss_and_grads(
    params: dict[str, np.ndarray],
    target_params: dict[str, np.ndarray],
    batch: dict[str, Any],
    *,
    gamma: float = 0.99,
    huber_delta: float = 1.0,
    double_q: bool = True,
    activation: str = "relu",
    action_mask_slice: slice | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray], np.ndarray]:
    """Loss terms, gradients of the online parameters, and TD errors (see the module docstring);
    ``action_mask_slice``: where the flat observations hold the action mask (None: no masking).

    Computed in the parameters' float dtype (float32 for training, float64 for gradient checks)."""
    dtype = np.result_type(*params.values())
    obs = np.asarray(batch[Columns.OBS], dtype).reshape(len(batch[Columns.OBS]), -1)
    next_obs = np.asarray(batch[Columns.NEXT_OBS], dtype).reshape(len(obs), -1)
    actions = np.asarray(batch[Columns.ACTIONS], np.int64)
    n, rows = len(obs), np.arange(len(obs))
    q_all, cache = forward(params, "q", obs, activation)
    q = q_all[rows, actions]
    q_next_target = forward(target_params, "q", next_obs, activation)[0]
    q_next_choice = forward(params, "q", next_obs, activation)[0] if double_q else q_next_target
    if action_mask_slice is not None:  # the best of the next state's legal actions
        q_next_choice = mask_logits(q_next_choice, legal_actions(next_obs, action_mask_slice))
    best = q_next_choice.argmax(axis=1)
    discount = gamma ** np.asarray(batch.get(Columns.N_STEP, np.ones(n)), np.float64)
    not_done = 1.0 - np.asarray(batch[Columns.TERMINATEDS], np.float64)
    target = np.asarray(batch[Columns.REWARDS], np.float64) + discount * not_done * q_next_target[rows, best]
    td = q - target
    weights = np.asarray(batch.get(Columns.WEIGHTS, np.ones(n)), np.float64)
    loss, d_loss = _huber(td, huber_delta)
    grad_q = np.zeros_like(q_all)
    grad_q[rows, actions] = weights * d_loss / n
    grads = backward(params, "q", cache, grad_q, activation)
    terms = {"loss": float((weights * loss).mean()), "q_mean": float(q.mean()), "td_abs_mean": float(np.abs(td).mean())}
    return terms, {k: g.astype(params[k].dtype, copy=False) for k, g in grads.items()}, td


def check_dqn_observation_space(owner: str, module: Any) -> None:
    """SpaceError naming ``owner`` unless the module's observations are what a DQN loss reads: a Box,
    or a Dict carrying an action mask (flattened by ``flat_observations``)."""
    space = module.observation_space
    if not isinstance(space, gym.spaces.Box) and getattr(module, "action_mask_slice", None) is None:
        raise SpaceError(
            f"{owner} needs a Box observation space, or a Dict with an 'action_mask': its loss reads "
            f"replay observations as arrays (got {space})"
        )


def flat_observations(observation_space: gym.Space, batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with its ``obs`` and ``next_obs`` flattened as the runner flattens them, where the
    observation space is not a Box (a Dict carrying an action mask); the batch itself otherwise."""
    if isinstance(observation_space, gym.spaces.Box):
        return batch
    flat = {k: flatten_batch(observation_space, batch[k]) for k in (Columns.OBS, Columns.NEXT_OBS)}
    return {**batch, **flat}


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
    num_torch_threads: int = 1
    """Intra-op threads of a torch learner (``torch.set_num_threads`` in its process: the driver's for
    the local learner); the numpy learner ignores it. 1 keeps a small machine's cores for the
    runners: with 2 threads on 2 cores beside the runners, OpenMP's waiting threads made a
    StatelessCartPole update ~20x slower. Raise it for learner actors given more CPUs."""

    def __post_init__(self) -> None:
        for name in ("lr", "huber_delta"):
            check_number(name, getattr(self, name), minimum=0, exclusive_minimum=True)
        check_optional(check_number, "grad_clip", self.grad_clip, minimum=0, exclusive_minimum=True)
        check_int("target_update_every", self.target_update_every, minimum=1)
        check_probability("gamma", self.gamma)
        check_bool("double_q", self.double_q)
        check_int("num_torch_threads", self.num_torch_threads, minimum=1)


class DQNLearner:
    """A QModule, its target network and Adam; one gradient step per ``update_from_batch``.

    The step is split for data-parallel groups as in the PPO Learner: ``pull_from_replay`` takes
    the next batches from a ReplayActor (one round trip), ``compute_gradients(j)`` works on batch
    ``j`` and ``apply_gradients`` takes the step (and copies the target network every
    ``target_update_every`` steps); ``push_priorities`` sends |TD errors| back to a prioritized
    replay.
    """

    def __init__(self, module: QModule, config: DQNConfig | None = None) -> None:
        check_dqn_observation_space("DQNLearner", module)
        self.module = module
        self.config: DQNConfig = DQNConfig() if config is None else check_type("config", config, DQNConfig)
        self.target_params = {k: v.copy() for k, v in module.params.items()}
        self.optimizer = Adam(lr=self.config.lr, grad_clip=self.config.grad_clip)
        self.num_updates = 0
        self._batches: Sequence[dict[str, Any]] = []
        self._td: dict[int, np.ndarray] = {}

    # ---------------------------------------------------------------- gradient steps
    def compute_gradients(self, batch_index: int | dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray], int]:
        """Loss terms (and ``td_errors``), gradients and row count of a batch (pulled batch
        ``batch_index``, or given)."""
        batch = self._batches[batch_index] if isinstance(batch_index, int) else batch_index
        if self.module.action_space.start:  # env actions of Discrete(n, start): columns 0..n-1
            batch = {**batch, Columns.ACTIONS: np.asarray(batch[Columns.ACTIONS]) - self.module.action_space.start}
        n = len(tree.first_leaf(batch[Columns.OBS]))
        if not n:
            return {}, {k: np.zeros_like(v) for k, v in self.module.params.items()}, 0
        batch = flat_observations(self.module.observation_space, batch)
        loss_terms, grads, td = dqn_loss_and_grads(
            self.module.params,
            self.target_params,
            batch,
            gamma=self.config.gamma,
            huber_delta=self.config.huber_delta,
            double_q=self.config.double_q,
            activation=self.module.activation,
            action_mask_slice=self.module.action_mask_slice,
        )
        if isinstance(batch_index, int):
            self._td[batch_index] = td
        terms: dict[str, Any] = {**loss_terms, "td_errors": td}
        return terms, grads, n

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> float:
        """One optimizer step (and the target copy when due); returns the gradients' global norm."""
        norm = self.optimizer.step(self.module.params, grads)
        self.num_updates += 1
        if self.num_updates % self.config.target_update_every == 0:
            self.target_params = {k: v.copy() for k, v in self.module.params.items()}
        return norm

    def update_from_batch(self, batch: dict[str, Any]) -> DQNStepMetrics:
        """One step on a replay batch; metrics include ``td_errors`` (for update_priorities)."""
        terms, grads, _ = self.compute_gradients(batch)
        norm = self.apply_gradients(grads)
        return DQNStepMetrics(**terms, grad_norm=norm, num_updates=self.num_updates)

    # ---------------------------------------------------------------- replay
    @property
    def pulled_batches(self) -> Sequence[dict[str, Any]]:
        """The batches the last ``pull_from_replay`` took (their ``keys`` name the replay steps)."""
        return self._batches

    def pull_from_replay(
        self, replay: Any, num_batches: int, batch_size_B: int, *, n_step: int = 1, timeout_s: float | None = None
    ) -> int:
        """Takes ``num_batches`` batches of ``batch_size_B`` from a ReplayActor (one request), a local
        ReplayActor or a buffer, for the next steps; returns the rows pulled."""
        self._td = {}
        if batch_size_B == 0:
            self._batches = [{Columns.OBS: np.zeros((0,))}] * num_batches
            return 0
        kwargs: dict[str, Any] = {"n_step": n_step, "gamma": self.config.gamma}
        if isinstance(replay, ShardDraw):  # replay shards: each batch from the shard the driver drew
            self._batches = replay.pull(batch_size_B, timeout_s=timeout_s, **kwargs)
        elif isinstance(replay, EpisodeReplayBuffer):  # a plain buffer: nothing to wait for
            self._batches = replay.sample_batches(batch_size_B, num_batches, **kwargs)
        else:  # a ReplayActor, local or remote: it may wait for data up to timeout_s
            self._batches = call(replay.sample_batches, batch_size_B, num_batches, timeout_s=timeout_s, **kwargs)
        return batch_size_B * num_batches

    def push_priorities(self, replay: Any) -> int:
        """Sends the |TD errors| of the pulled batches' steps to a prioritized replay; the count sent."""
        if not self._td:
            return 0
        if isinstance(replay, ShardDraw):  # each batch's priorities to the shard it came from
            by_batch = {j: self._batches[j][Columns.KEYS] for j in self._td}
            td_by_batch, self._td = {j: np.abs(t) for j, t in self._td.items()}, {}
            return replay.push(by_batch, td_by_batch)
        keys = np.concatenate([self._batches[j][Columns.KEYS] for j in sorted(self._td)])
        td = np.abs(np.concatenate([self._td[j] for j in sorted(self._td)]))
        self._td = {}
        call(replay.update_priorities, keys, td)
        return len(keys)

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        return {
            "module": self.module.get_state(),
            "target": {k: v.copy() for k, v in self.target_params.items()},
            "num_updates": self.num_updates,
            "optimizer": self.optimizer.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.module.set_state(state["module"])
        self.target_params = {k: np.asarray(v, np.float32).copy() for k, v in state["target"].items()}
        self.num_updates = int(state["num_updates"])
        self.optimizer.set_state(state["optimizer"])
