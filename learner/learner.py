"""Learner: a module plus an optimizer; train batches from episodes through the learner pipeline.

``update_from_episodes(episodes)`` runs the learner connector pipeline (columns, then GAE,
after any user pieces) and ``update_from_batch``: ``num_epochs`` passes over the batch in
shuffled minibatches, each a ``compute_gradients`` then ``apply_gradients`` step. The two
halves are public so a LearnerGroup can average gradients between them. The built-in
algorithm is PPO on the numpy MLPModule (Discrete or 1-D Box actions); a learner of another
framework fits the same interface (``compute_gradients``/``apply_gradients``/``get_state``/
``set_state``).
"""

from __future__ import annotations

import dataclasses
import time
from enum import Enum
from typing import Any

import numpy as np

from connectors.common import MeanStdFilter
from connectors.env_to_module.default_pipeline import is_flat_box
from connectors.learner import (
    DEFAULT_MODULE_ID,
    AddColumnsFromEpisodesToTrainBatch,
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    FlattenObservationsLearner,
    GeneralAdvantageEstimation,
    VTraceAdvantages,
)
from connectors.pipeline import ConnectorPipelineV2
from learner.metrics import PPOUpdateMetrics
from learner.optim import Adam
from learner.ppo_loss import ppo_loss_and_grads
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.validate import (
    check_bool,
    check_enum,
    check_int,
    check_number,
    check_optional,
    check_pieces,
    check_probability,
    check_type,
    replace_field,
)

__all__ = ["Learner", "ObservationFilter", "PPOConfig", "batch_steps", "minibatch_plan"]


class ObservationFilter(str, Enum):
    """How observations are normalized before the module sees them (None: they are not)."""

    MEAN_STD = "mean_std"
    """Running mean and std (MeanStdFilter), learned in the runners, merged exactly across them
    every iteration, and applied alike in the learner's pipeline."""


class PolicyLoss(str, Enum):
    """The policy term of the loss."""

    CLIPPED = "clipped"
    """PPO's clipped surrogate on the importance ratio to the sampling policy (with ``vtrace``: APPO's)."""
    PG = "pg"
    """The plain policy gradient ``-mean(logp * advantage)``, one gradient on each batch as sampled:
    with ``vtrace``, IMPALA's (its advantages already carry the clipped ratios); without, A2C's."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """PPO's hyperparameters (defaults that train CartPole-v1 in a few seconds)."""

    lr: float = 2e-3
    """Adam learning rate. 1e-3 took 6k-18k more env steps to a 100-episode mean of 450 on
    CartPole-v1 at seeds 0-4 (bench/RESULTS.md)."""
    gamma: float = 0.99
    """Discount."""
    lambda_: float = 0.95
    """GAE lambda."""
    clip_param: float = 0.2
    """PPO ratio clipping."""
    vf_coeff: float = 0.5
    """Weight of the value loss."""
    vf_clip_param: float | None = None
    """Cap on each step's squared value error (RLlib's ``vf_clip_param``; beyond it no value gradient);
    None: uncapped."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus."""
    num_epochs: int = 8
    """Passes over each train batch."""
    minibatch_size: int = 128
    """Steps per gradient step (over all learners together); 128 makes 8 gradient steps per epoch
    on the default 1,024-step batch (256, the earlier default, made half as many)."""
    grad_clip: float | None = 0.5
    """Global gradient-norm clip; None: none."""
    standardize_advantages: bool = True
    """Advantages scaled to zero mean and unit std per batch."""
    seed: int = 0
    """Seed of the minibatch shuffling."""
    observation_filter: ObservationFilter | str | None = None
    """None, or ``"mean_std"``: observations normalized by running moments, the same in the
    runners and the learners (RLlib's MeanStdFilter connector; the training loop syncs its moments
    every iteration)."""
    num_torch_threads: int = 1
    """Intra-op threads of a torch learner (``torch.set_num_threads`` in its process: the driver's for
    the local learner); the numpy learner ignores it. 1 keeps a small machine's cores for the
    runners: with 2 threads on 2 cores beside the runners, OpenMP's waiting threads made a
    StatelessCartPole update ~20x slower. Raise it for learner actors given more CPUs."""
    max_seq_len: int = 20
    """Stateful modules: the longest sequence a train batch holds (episodes are split into
    sequences of at most this many steps, zero-padded, each from its stored first state)."""
    vtrace: bool = False
    """Advantages and value targets by V-trace (IMPALA) instead of GAE: for data sampled with older
    weights (the asynchronous loop, ``learner.train_async``), corrected by the clipped importance
    ratios; the PPO loss on them is APPO's. On-policy V-trace gives GAE's lambda-1 targets."""
    rho_bar: float = 1.0
    """V-trace's clip on the importance ratio of each step's correction (the paper's rho bar; RLlib's
    ``vtrace_clip_rho_threshold``): the targets tend to the value of a policy between the sampling
    one and the learned one, nearer the learned one the larger it is."""
    c_bar: float = 1.0
    """V-trace's clip on the ratios that carry a later step's correction back (the paper's c bar):
    smaller cuts the traces sooner. The paper requires rho_bar >= c_bar."""
    policy_loss: PolicyLoss | str = PolicyLoss.CLIPPED
    """``"clipped"`` (PPO's surrogate; APPO's with ``vtrace``) or ``"pg"`` (the plain policy gradient:
    IMPALA's with ``vtrace``, A2C's without; ``clip_param`` is then unused)."""

    def __post_init__(self) -> None:
        for name in ("lr", "clip_param"):
            check_number(name, getattr(self, name), minimum=0, exclusive_minimum=True)
        for name in ("gamma", "lambda_"):
            check_probability(name, getattr(self, name))
        for name in ("vf_coeff", "entropy_coeff"):
            check_number(name, getattr(self, name), minimum=0)
        for name in ("num_epochs", "minibatch_size"):
            check_int(name, getattr(self, name), minimum=1)
        check_optional(check_number, "grad_clip", self.grad_clip, minimum=0, exclusive_minimum=True)
        check_optional(check_number, "vf_clip_param", self.vf_clip_param, minimum=0, exclusive_minimum=True)
        check_bool("standardize_advantages", self.standardize_advantages)
        check_int("seed", self.seed, minimum=0)
        check_int("max_seq_len", self.max_seq_len, minimum=1)
        check_int("num_torch_threads", self.num_torch_threads, minimum=1)
        check_bool("vtrace", self.vtrace)
        for name in ("rho_bar", "c_bar"):
            check_number(name, getattr(self, name), minimum=0, exclusive_minimum=True)
        if self.c_bar > self.rho_bar:
            raise ConfigError(f"'c_bar' must be <= 'rho_bar' (V-trace's condition; got {self.c_bar} > {self.rho_bar})")
        replace_field(self, "policy_loss", check_enum("policy_loss", PolicyLoss, self.policy_loss))
        if self.observation_filter is not None:
            replace_field(
                self, "observation_filter", check_enum("observation_filter", ObservationFilter, self.observation_filter)
            )


def minibatch_plan(num_rows: int, num_minibatches: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Row indices of ``num_minibatches`` shuffled, near-equal minibatches covering ``num_rows`` rows."""
    perm = rng.permutation(num_rows)
    return [
        perm[(j * num_rows) // num_minibatches : ((j + 1) * num_rows) // num_minibatches]
        for j in range(num_minibatches)
    ]


_TRAIN_KEYS = (Columns.OBS, Columns.ACTIONS, Columns.ACTION_LOGP, Columns.ADVANTAGES, Columns.VALUE_TARGETS)


def batch_steps(batch: dict[str, Any]) -> int:
    """The env steps a train batch holds: its rows, or with a time dimension its sequences' lengths."""
    if Columns.SEQ_LENS in batch:
        return int(np.sum(batch[Columns.SEQ_LENS]))
    return len(batch[Columns.ADVANTAGES])


def flattening(module: Any) -> list[Any]:
    """The learner piece that flattens observations for a module that asks for flat input (the
    runner's ``FlattenObservations``), where its observation space is not a flat float Box."""
    space = getattr(module, "observation_space", None)
    if not getattr(module, "needs_flat_observations", True) or space is None or is_flat_box(space):
        return []
    return [FlattenObservationsLearner(space)]


class Learner:
    """PPO on the built-in numpy MLPModule (see the module docstring)."""

    trains_stateful_modules = False
    """Whether this learner class trains stateful (recurrent) modules: the numpy PPO has no
    backpropagation through time; TorchPPOLearner does."""

    def __init__(
        self,
        module: Any,
        config: PPOConfig | None = None,
        *,
        user_pieces: tuple[Any, ...] = (),
        view_pieces: tuple[Any, ...] = (),
    ) -> None:
        """``user_pieces`` run first; ``view_pieces`` (the learner twins of the runners' env-to-module
        pieces, ``EnvToModulePiece.learner_piece()``: frame stacking, previous actions) run right
        after the columns are added, so they rebuild the inputs the module acted on."""
        self.module = module
        self.config: PPOConfig = PPOConfig() if config is None else check_type("config", config, PPOConfig)
        user_pieces = check_pieces("user_pieces", user_pieces)
        view_pieces = check_pieces("view_pieces", view_pieces)
        stateful = is_stateful(module)
        if stateful and self.config.vtrace:
            raise ConfigError(f"'vtrace' takes stateless modules for now (got the stateful {type(module).__name__})")
        if stateful and not self.trains_stateful_modules:
            raise ConfigError(
                f"{type(self).__name__} cannot train the stateful module {type(module).__name__}: "
                "use framework 'torch' (TorchPPOLearner)"
            )
        self.optimizer = Adam(lr=self.config.lr, grad_clip=self.config.grad_clip)
        max_seq_len = self.config.max_seq_len
        filtered = self.config.observation_filter is ObservationFilter.MEAN_STD
        sequences = [AddStatesFromEpisodesToBatch(max_seq_len), AddTimeDimToBatchAndZeroPad(max_seq_len)]
        self.pipeline = ConnectorPipelineV2(
            [
                *user_pieces,
                AddColumnsFromEpisodesToTrainBatch(),
                *view_pieces,
                *([MeanStdFilter(module_id=DEFAULT_MODULE_ID, update=False)] if filtered else []),
                *flattening(module),
                self._advantages(),
                *(sequences if stateful else []),
            ],
            name="LearnerPipeline",
        )
        self.rng = np.random.default_rng(self.config.seed)
        self.weights_version = 0
        self._batch: dict[str, np.ndarray] | None = None
        self._plan: list[np.ndarray] = []

    def _advantages(self) -> Any:
        """The pipeline's advantage piece: GAE, or V-trace (``PPOConfig.vtrace``)."""
        c = self.config
        if c.vtrace:
            return VTraceAdvantages(
                gamma=c.gamma, rho_bar=c.rho_bar, c_bar=c.c_bar, standardize_advantages=c.standardize_advantages
            )
        return GeneralAdvantageEstimation(
            gamma=c.gamma, lambda_=c.lambda_, standardize_advantages=c.standardize_advantages, max_seq_len=c.max_seq_len
        )

    # ---------------------------------------------------------------- batches
    def build_batch(self, episodes: list[SingleAgentEpisode]) -> dict[str, np.ndarray]:
        """The train batch of ``episodes`` (the episodes are not changed)."""
        batch = self.pipeline(rl_module=self.module, batch={}, episodes=episodes, shared_data={})
        return batch[DEFAULT_MODULE_ID]

    def set_batch(
        self, episodes: list[SingleAgentEpisode] | None = None, *, batch: dict[str, np.ndarray] | None = None
    ) -> int:
        """Keeps the batch (built from ``episodes``, or given) the next gradient steps use; the env
        steps it holds (``batch_steps``: its rows, or for a stateful module its sequences' steps)."""
        self._batch = batch if batch is not None else self.build_batch(episodes or [])
        return batch_steps(self._batch)

    def plan_epoch(self, num_minibatches: int) -> None:
        """Shuffles the kept batch into ``num_minibatches`` minibatches for the next epoch."""
        if self._batch is None:
            raise ConfigError("plan_epoch: call set_batch first")
        self._plan = minibatch_plan(len(self._batch[Columns.ADVANTAGES]), num_minibatches, self.rng)

    # ---------------------------------------------------------------- gradient steps
    def compute_gradients(self, minibatch_index: int) -> tuple[dict[str, float], dict[str, np.ndarray], int]:
        """Loss terms, gradients and row count of minibatch ``minibatch_index`` of the current plan."""
        if self._batch is None:
            raise ConfigError("compute_gradients: call set_batch first")
        rows = self._plan[minibatch_index]
        minibatch = {k: tree.map_structure(lambda v: v[rows], self._batch[k]) for k in _TRAIN_KEYS}
        if not len(rows):
            return {}, {k: np.zeros_like(v) for k, v in self.module.params.items()}, 0
        terms, grads = ppo_loss_and_grads(
            self.module.params,
            minibatch,
            clip_param=self.config.clip_param,
            vf_coeff=self.config.vf_coeff,
            entropy_coeff=self.config.entropy_coeff,
            vf_clip_param=self.config.vf_clip_param,
            clipped=self.config.policy_loss is PolicyLoss.CLIPPED,
            action_mask_slice=getattr(self.module, "action_mask_slice", None),
        )
        return terms, grads, len(rows)

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> float:
        """One optimizer step; returns the gradients' global norm."""
        return self.optimizer.step(self.module.params, grads)

    def update_from_episodes(self, episodes: list[SingleAgentEpisode]) -> PPOUpdateMetrics:
        """Runs the learner pipeline on ``episodes``, then ``update_from_batch``; metrics (with the
        pipeline's wall time, ``learner_connector_s``)."""
        t0 = time.perf_counter()
        batch = self.build_batch(episodes)
        pipeline_s = time.perf_counter() - t0
        return dataclasses.replace(self.update_from_batch(batch), learner_connector_s=pipeline_s)

    def update_from_batch(self, batch: dict[str, np.ndarray]) -> PPOUpdateMetrics:
        """``num_epochs`` passes of shuffled minibatch steps over ``batch``; metrics. ``minibatch_size``
        counts env steps; a stateful module's minibatches are whole sequences, as many as fit it."""
        num_steps = self.set_batch(batch=batch)
        num_rows = len(batch[Columns.ADVANTAGES])
        num_minibatches = max(1, min(num_rows, -(-num_steps // self.config.minibatch_size)))
        terms: dict[str, Any] = {}
        norms = []
        for _ in range(self.config.num_epochs):
            self.plan_epoch(num_minibatches)
            for j in range(num_minibatches):
                terms, grads, _ = self.compute_gradients(j)
                norms.append(self.apply_gradients(grads))
        self.weights_version += 1
        return PPOUpdateMetrics(
            **terms,
            grad_norm_mean=float(np.mean(norms)),
            batch_size=num_steps,
            num_gradient_steps=len(norms),
            weights_version=self.weights_version,
        )

    def set_connector_states(self, states: dict[str, Any]) -> None:
        """Loads merged env-to-module connector states (by piece name, e.g. the runners' MeanStdFilter
        moments) into the learner pipeline's pieces of the same name."""
        self.pipeline.set_state(states)

    # ---------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        return {
            "module": self.module.get_state(),
            "weights_version": self.weights_version,
            "optimizer": self.optimizer.get_state(),
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.module.set_state(state["module"])
        self.weights_version = state["weights_version"]
        self.optimizer.set_state(state["optimizer"])
        self.rng.bit_generator.state = state["rng"]
