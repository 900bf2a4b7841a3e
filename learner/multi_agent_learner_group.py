"""MultiAgentLearnerGroup: a LearnerGroup per trained module of a MultiRLModule.

``update_from_episodes`` takes MultiAgentEpisode chunks, regroups them by module
(``AgentToModuleMapping``: the chunks of every agent mapped to a module), and runs each trained
module's own LearnerGroup on its chunks: its learner pipeline (GAE per agent on the agent's own
time, bootstrapping at a time limit and at a cut, advantages standardized per module), its
optimizer, its learners (local, or ``num_learners`` actors per module). Modules that do not train
keep the weights they were given. The group has the LearnerGroup interface the training loop
uses (``get_weights``, ``get_states``/``set_states``, ``stop``), with weights and states by module
id, and ``add_module``/``remove_module`` between updates.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from connectors.learner import AgentToModuleMapping
from learner.learner import Learner
from learner.learner_group import LearnerGroup
from learner.metrics import DQNUpdateMetrics, PPOUpdateMetrics
from ray_sampler.errors import ConfigError
from ray_sampler.modules import MultiRLModule
from ray_sampler.resources import Demand, check_demands
from ray_sampler.validate import check_int, check_number
from replay.multi_agent_actor import ModuleReplay

__all__ = ["MultiAgentLearnerGroup", "metrics_by_module"]

_AVERAGED = ("policy_loss", "vf_loss", "entropy", "mean_kl_approx", "clip_fraction", "total_loss", "grad_norm_mean")


def _check_all_learners_fit(modules: MultiRLModule, num_learners: int, num_cpus_per_learner: float) -> None:
    """InsufficientResourcesError before any learner actor starts if every trained module's learners
    together can never fit the cluster (each module's group checks only its own, and the first
    modules' learners would have started before a later one is refused)."""
    check_int("num_learners", num_learners, minimum=0)
    check_number("num_cpus_per_learner", num_cpus_per_learner, minimum=0)
    num_trained = sum(1 for mid in modules if modules.is_trainable(mid))
    if num_learners and num_cpus_per_learner and num_trained:
        fields = "trained modules x num_learners x num_cpus_per_learner"
        check_demands([Demand(fields, num_trained * num_learners, {"CPU": float(num_cpus_per_learner)})])


class MultiAgentLearnerGroup:
    """A LearnerGroup per trained module (see the module docstring)."""

    def __init__(
        self,
        modules: MultiRLModule,
        config: Any = None,
        *,
        learner_class: type = Learner,
        num_learners: int = 0,
        num_cpus_per_learner: float = 1.0,
        learner_kwargs: dict[str, Any] | None = None,
        gradient_sync: str = "driver",
    ) -> None:
        """``gradient_sync`` as LearnerGroup's (each module's learner actors form a group of their own)."""
        if not isinstance(modules, MultiRLModule):
            raise ConfigError(f"'modules' must be a MultiRLModule (got {type(modules).__name__})")
        self.config = config
        self._options: dict[str, Any] = {
            "learner_class": learner_class,
            "num_learners": num_learners,
            "num_cpus_per_learner": num_cpus_per_learner,
            "learner_kwargs": learner_kwargs,
            "gradient_sync": gradient_sync,
        }
        self.groups: dict[str, LearnerGroup] = {}
        self.frozen: dict[str, dict[str, Any]] = {}
        """Weights of the modules that do not learn, by module id."""
        self.mapping = AgentToModuleMapping()
        _check_all_learners_fit(modules, num_learners, num_cpus_per_learner)
        try:
            for mid, module in modules.items():
                self.add_module(mid, module, trainable=modules.is_trainable(mid))
        except BaseException:
            self.stop()
            raise

    @property
    def module_ids(self) -> tuple[str, ...]:
        return (*self.groups, *self.frozen)

    @property
    def trained_module_ids(self) -> tuple[str, ...]:
        return tuple(self.groups)

    def add_module(self, module_id: str, module: Any, *, trainable: bool = True) -> None:
        """Adds ``module`` (its current weights) under ``module_id``: a LearnerGroup of its own if
        ``trainable``, else kept as weights the runners act with."""
        if module_id in self.groups or module_id in self.frozen:
            raise ConfigError(f"add_module: module id {module_id!r} is taken (modules: {list(self.module_ids)})")
        if not trainable:
            self.frozen[module_id] = module.get_state()
            return
        self.groups[module_id] = LearnerGroup(lambda: copy.deepcopy(module), self.config, **self._options)

    def add_frozen(self, module_id: str, weights: dict[str, Any]) -> None:
        """Adds a module that does not learn, by its weights (self-play's copy of a trained module)."""
        if module_id in self.groups or module_id in self.frozen:
            raise ConfigError(f"add_frozen: module id {module_id!r} is taken (modules: {list(self.module_ids)})")
        self.frozen[module_id] = dict(weights)

    def remove_module(self, module_id: str) -> None:
        """Removes module ``module_id`` (its learner actors stop)."""
        if module_id in self.frozen:
            del self.frozen[module_id]
        elif module_id in self.groups:
            self.groups.pop(module_id).stop()
        else:
            raise ConfigError(f"remove_module: no module {module_id!r} (modules: {list(self.module_ids)})")

    def split(self, episodes: list[Any]) -> dict[str, list[Any]]:
        """Each module's agent chunks (``AgentToModuleMapping``)."""
        return self.mapping(rl_module=None, batch={}, episodes=episodes, shared_data={})

    def update_from_episodes(self, episodes: list[Any]) -> PPOUpdateMetrics:
        """One update of every trained module on its agents' chunks of ``episodes`` (MultiAgentEpisodes);
        the metrics: loss terms averaged over the modules weighted by their batch sizes, sizes and
        steps summed (``learner_connector_s``: the regrouping and every module's pipeline), each
        module's own in ``module_metrics``. A module with no chunk is not updated."""
        t0 = time.perf_counter()
        by_module = self.split(episodes)
        split_s = time.perf_counter() - t0
        metrics = {mid: g.update_from_episodes(by_module[mid]) for mid, g in self.groups.items() if by_module.get(mid)}
        if not metrics:
            return PPOUpdateMetrics(grad_norm_mean=float("nan"), batch_size=0, num_gradient_steps=0)
        sizes = np.array([m.batch_size for m in metrics.values()], dtype=np.float64)
        weights = sizes / sizes.sum() if sizes.sum() else np.full(len(sizes), 1 / len(sizes))
        averaged: dict[str, Any] = {k: float(np.dot(weights, [m[k] for m in metrics.values()])) for k in _AVERAGED}
        versions = [m.weights_version for m in metrics.values() if m.weights_version is not None]
        return PPOUpdateMetrics(
            **averaged,
            batch_size=int(sizes.sum()),
            num_gradient_steps=sum(m.num_gradient_steps for m in metrics.values()),
            weights_version=max(versions) if versions else None,
            num_learners=sum(m.num_learners for m in metrics.values()),
            learner_connector_s=split_s + float(sum(m.learner_connector_s for m in metrics.values())),
            module_metrics=metrics,
        )

    def update_from_replay(
        self,
        replay: Any,
        num_updates: int,
        batch_size_B: int,
        *,
        module_ids: tuple[str, ...] | None = None,
        **kwargs: Any,
    ) -> DQNUpdateMetrics:
        """``num_updates`` DQN steps of each trained module of ``module_ids`` (None: all), each on
        batches of its own agents' transitions pulled from a MultiAgentReplayActor (``ModuleReplay``);
        the metrics: loss terms averaged over the modules, steps summed, each module's own in
        ``module_metrics``."""
        ids = self.trained_module_ids if module_ids is None else module_ids
        metrics = {
            mid: self.groups[mid].update_from_replay(ModuleReplay(replay, mid), num_updates, batch_size_B, **kwargs)
            for mid in ids
        }
        if not metrics:
            return DQNUpdateMetrics(
                grad_norm_mean=float("nan"), num_gradient_steps=0, batch_size=batch_size_B, num_learners=0
            )
        terms: dict[str, Any] = {
            k: float(np.mean([m[k] for m in metrics.values()]))
            for k in ("loss", "q_mean", "td_abs_mean", "grad_norm_mean")
        }
        return DQNUpdateMetrics(
            **terms,
            num_gradient_steps=sum(m.num_gradient_steps for m in metrics.values()),
            batch_size=batch_size_B,
            num_learners=sum(m.num_learners for m in metrics.values()),
            module_metrics=metrics,
        )

    def get_weights(self, module_ids: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
        """``{module_id: weights}`` of ``module_ids`` (None: every module, frozen ones included)."""
        ids = self.module_ids if module_ids is None else module_ids
        return {mid: self.groups[mid].get_weights() if mid in self.groups else self.frozen[mid] for mid in ids}

    def get_states(self) -> list[dict[str, Any]]:
        """One state (as a list of one, like LearnerGroup's): every trained module's learner state and
        every frozen module's weights, by module id."""
        return [
            {
                "modules": {mid: g.get_states()[0] for mid, g in self.groups.items()},
                "frozen": dict(self.frozen),
            }
        ]

    def set_states(self, state: Mapping[str, Any]) -> None:
        """Loads ``get_states()[0]`` (from a checkpoint); ValueError if its modules are not this group's."""
        trained, frozen = dict(state.get("modules", {})), dict(state.get("frozen", {}))
        if set(trained) != set(self.groups) or set(frozen) != set(self.frozen):
            raise ValueError(
                f"modules trained {sorted(trained)} and frozen {sorted(frozen)}; this run trains "
                f"{sorted(self.groups)} and freezes {sorted(self.frozen)}"
            )
        for mid, group in self.groups.items():
            group.set_states(trained[mid])
        self.frozen = frozen

    def set_connector_states(self, states: dict[str, Any]) -> None:
        """Loads each trained module's merged env-to-module connector states (``{module_id: states}``,
        as a multi-agent EnvRunnerGroup merges them: e.g. its MeanStdFilter's moments) into that
        module's learners."""
        for mid, group in self.groups.items():
            if mid in states:
                group.set_connector_states(states[mid])

    def stop(self) -> None:
        for group in self.groups.values():
            group.stop()


def metrics_by_module(metrics: PPOUpdateMetrics) -> dict[str, dict[str, float]]:
    """Each module's loss terms of one update (empty for a single-agent update)."""
    return {mid: {k: float(m[k]) for k in _AVERAGED} for mid, m in getattr(metrics, "module_metrics", {}).items()}
