"""LearnerGroup: a local Learner, or M learner actors trained data-parallel in lockstep.

With ``num_learners=0`` the group wraps one local Learner. With M > 0 it starts M Learner
actors from the same module state; ``update_from_episodes`` shards the episodes across them
(balanced by steps) and, for every gradient step, gathers each learner's gradients on its
minibatch, averages them weighted by minibatch rows (the gradient of the mean loss over all of
them) and sends the one average back (one ``ray.put``): every learner applies the same step,
so all keep identical weights.

``update_from_replay`` does the same for off-policy learners (DQNLearner): each learner pulls
its share of every batch straight from a ReplayActor (the data never passes through the
driver), the gradients are averaged per step, and with prioritized replay each learner sends
its |TD errors| back to the replay.

Any learner class with this interface fits (a torch learner too; gradients only need ``*`` by
a float and ``+``): ``__init__(module, config)`` and ``.config``; ``get_state``/``set_state``;
``compute_gradients(index) -> (loss terms, gradients, rows)`` and ``apply_gradients(grads)``;
for episodes ``set_batch(episodes)``/``plan_epoch(n)`` (as :class:`learner.learner.Learner`),
for a replay ``pull_from_replay``/``push_priorities`` (as :class:`learner.dqn.DQNLearner`).
The loss terms' names are those of ``PPOUpdateMetrics`` / ``DQNUpdateMetrics`` (learner/metrics.py),
which the averaged terms fill.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from enum import Enum
from typing import Any

import numpy as np

from learner.learner import Learner, PPOConfig
from learner.metrics import DQNUpdateMetrics, PPOUpdateMetrics
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.resources import Demand, PlacementStrategy, release, reserve
from ray_sampler.validate import check_bool, check_callable, check_enum, check_int, check_number, check_optional
from replay.shards import plan_draws

__all__ = ["GradientSync", "LearnerGroup", "shard_episodes"]


class GradientSync(str, Enum):
    """How learner actors average their gradients at every step."""

    DRIVER = "driver"
    """The driver gathers the M gradients and sends one mean back (no torch needed)."""
    ALLREDUCE = "allreduce"
    """The learners all-reduce among themselves (torch.distributed, gloo): the driver sends only
    the episode shards (learner/allreduce.py)."""


def shard_episodes(episodes: list[SingleAgentEpisode], num_shards: int) -> list[list[SingleAgentEpisode]]:
    """Episodes dealt to ``num_shards`` shards, each next one to the shard with the fewest steps."""
    check_int("num_shards", num_shards, minimum=1)
    shards: list[list[SingleAgentEpisode]] = [[] for _ in range(num_shards)]
    sizes = [0] * num_shards
    for ep in sorted(episodes, key=len, reverse=True):
        i = int(np.argmin(sizes))
        shards[i].append(ep)
        sizes[i] += len(ep)
    return shards


class LearnerGroup:
    """One local learner, or ``num_learners`` learner actors in lockstep (see the module docstring)."""

    def __init__(
        self,
        make_module: Callable[[], Any],
        config: Any = None,
        *,
        learner_class: type = Learner,
        num_learners: int = 0,
        num_cpus_per_learner: float = 1.0,
        timeout_s: float = 600.0,
        learner_kwargs: dict[str, Any] | None = None,
        gradient_sync: GradientSync | str = GradientSync.DRIVER,
    ) -> None:
        """``learner_kwargs``: more keyword arguments for ``learner_class`` (e.g. ``view_pieces``);
        ``gradient_sync``: how learner actors average their gradients (``GradientSync``)."""
        self.gradient_sync = check_enum("gradient_sync", GradientSync, gradient_sync)
        if self.gradient_sync is GradientSync.ALLREDUCE and importlib.util.find_spec("torch") is None:
            raise ConfigError(
                "'gradient_sync' 'allreduce' needs torch (pip install 'ray-sampler[torch]'); 'driver' works without it"
            )
        self.driver_gradient_bytes = 0
        """Bytes of gradients that passed through the driver so far (gathered, and the mean sent back)."""
        self._shard_rng = np.random.default_rng(getattr(config, "seed", None) or 0)  # each batch's replay shard
        check_callable("make_module", make_module, "a callable that builds a module")
        check_callable("learner_class", learner_class)
        check_int("num_learners", num_learners, minimum=0)
        check_number("num_cpus_per_learner", num_cpus_per_learner, minimum=0)
        check_number("timeout_s", timeout_s, minimum=0, exclusive_minimum=True)
        self.timeout_s = timeout_s
        self.local: Any = None
        self.actors: list[Any] = []
        self._placement_group: Any = None
        kwargs = dict(learner_kwargs or {})
        first = learner_class(make_module(), config, **kwargs)  # every actor starts from this one's state
        self.config: PPOConfig | Any = first.config
        if num_learners == 0:
            self.local = first
            return
        import ray

        if num_cpus_per_learner > 0:  # one placement group, packed: the learners (and the replay) close together
            self._placement_group = reserve(
                Demand("num_learners x num_cpus_per_learner", num_learners, {"CPU": num_cpus_per_learner}),
                strategy=PlacementStrategy.PACK,
                timeout_s=timeout_s,
            )
        remote: Any = ray.remote(learner_class)
        state_ref = ray.put(first.get_state())
        try:
            self.actors = [
                # No task events: a learner gets several calls per gradient step (see ray_sampler.sampling.placement).
                remote.options(
                    num_cpus=num_cpus_per_learner, enable_task_events=False, **self._bundle_options(i)
                ).remote(make_module(), self.config, **kwargs)
                for i in range(num_learners)
            ]
            self._get([a.set_state.remote(state_ref) for a in self.actors])
            if self.gradient_sync is GradientSync.ALLREDUCE:
                self._join_allreduce()
        except BaseException:
            self.stop()  # the learners that started and the placement group: nothing stays reserved
            raise

    def _join_allreduce(self) -> None:
        """Forms the learners' gloo process group (learner/allreduce.py): loopback when all share
        the first learner's node, else that node's address."""
        import ray

        from learner import allreduce

        nodes = set(
            self._get([a.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()) for a in self.actors])
        )
        address = self._get([self.actors[0].__ray_call__.remote(allreduce.rendezvous_address, len(nodes) == 1)])[0]
        n = len(self.actors)
        self._get([a.__ray_call__.remote(allreduce.join_group, address, i, n) for i, a in enumerate(self.actors)])

    def _bundle_options(self, index: int) -> dict[str, Any]:
        if self._placement_group is None:
            return {}
        return {"scheduling_strategy": self._placement_group.scheduling_strategy(index)}

    def colocated_options(self) -> dict[str, Any]:
        """Actor options that put a CPU-free actor (the replay) beside the learners: in the first
        learner's bundle, or on this (the driver's) node with a local learner; Ray may place it
        elsewhere when that node is gone."""
        if self._placement_group is not None:
            return self._bundle_options(0)
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        }

    def _get(self, refs: list[Any]) -> list[Any]:
        import ray

        return ray.get(refs, timeout=self.timeout_s)

    def update_from_episodes(self, episodes: list[SingleAgentEpisode]) -> PPOUpdateMetrics:
        """One PPO update on ``episodes``; returns the metrics (loss terms averaged over learners)."""
        if self.local is not None:
            return self.local.update_from_episodes(episodes)
        import ray

        rows = self._get(
            [a.set_batch.remote(shard) for a, shard in zip(self.actors, shard_episodes(episodes, len(self.actors)))]
        )
        num_minibatches = max(1, -(-sum(rows) // self.config.minibatch_size))
        terms_seen: list[dict[str, float]] = []
        norms = []
        if self.gradient_sync is GradientSync.ALLREDUCE:
            from learner import allreduce

            calls = [
                a.__ray_call__.remote(allreduce.update_epochs, self.config.num_epochs, num_minibatches)
                for a in self.actors
            ]
            per_learner = self._get(calls)
            norms = per_learner[0][1]  # every learner applied the same steps
            last = [t[-1] for t, _ in per_learner if t]
            versions = self._get([a.__ray_call__.remote(lambda learner: learner.weights_version) for a in self.actors])
            return self._ppo_metrics(last, norms, sum(rows), versions[0])
        for _ in range(self.config.num_epochs):
            self._get([a.plan_epoch.remote(num_minibatches) for a in self.actors])
            for j in range(num_minibatches):
                results = self._get([a.compute_gradients.remote(j) for a in self.actors])
                total = sum(n for _, _, n in results)
                if not total:
                    continue
                keys = results[0][1].keys()
                average = {k: sum(g[k] * (n / total) for _, g, n in results) for k in keys}
                self.driver_gradient_bytes += (len(results) + 1) * _nbytes(average)
                norms.append(self._get([a.apply_gradients.remote(ray.put(average)) for a in self.actors])[0])
                terms_seen += [t for t, _, n in results if n]
        versions = self._get([a.__ray_call__.remote(_bump_version) for a in self.actors])
        return self._ppo_metrics(terms_seen[-len(self.actors) :], norms, sum(rows), versions[0])

    def _ppo_metrics(
        self, last_terms: list[dict[str, float]], norms: list[float], batch_size: int, version: int
    ) -> PPOUpdateMetrics:
        """An update's metrics: the loss terms of the learners' last minibatches averaged."""
        keys = last_terms[-1].keys() if last_terms else ()
        terms: dict[str, Any] = {k: float(np.mean([t[k] for t in last_terms])) for k in keys}
        return PPOUpdateMetrics(
            **terms,
            grad_norm_mean=float(np.mean(norms)) if norms else 0.0,
            batch_size=batch_size,
            num_gradient_steps=len(norms),
            weights_version=version,
            num_learners=len(self.actors),
        )

    def update_from_replay(
        self,
        replay: Any,
        num_updates: int,
        batch_size_B: int,
        *,
        n_step: int = 1,
        prioritized: bool = False,
        timeout_s: float | None = None,
    ) -> DQNUpdateMetrics:
        """``num_updates`` gradient steps on batches of ``batch_size_B`` pulled from ``replay`` (a
        ReplayActor, or a list of replay shards: replay.shards), the rows of every batch split
        across the learners; metrics."""
        check_int("num_updates", num_updates, minimum=1)
        check_int("batch_size_B", batch_size_B, minimum=1)
        check_int("n_step", n_step, minimum=1)
        check_bool("prioritized", prioritized)
        check_optional(check_number, "timeout_s", timeout_s, minimum=0, exclusive_minimum=True)
        m = len(self.actors) or 1
        if batch_size_B < m:
            raise ConfigError(f"'batch_size_B' ({batch_size_B}) must be >= the number of learners ({m})")
        sizes = [batch_size_B * (i + 1) // m - batch_size_B * i // m for i in range(m)]
        if isinstance(replay, list | tuple):  # replay shards: each learner's batches drawn from them
            sources: list[Any] = plan_draws(replay, m, num_updates, self._shard_rng)
        else:
            sources = [replay] * m
        self._each(
            "pull_from_replay", [(src, num_updates, b) for src, b in zip(sources, sizes, strict=True)],
            n_step=n_step, timeout_s=timeout_s,
        )  # fmt: skip
        terms_seen: list[dict[str, Any]] = []
        norms = []
        if self.local is None and self.gradient_sync is GradientSync.ALLREDUCE:
            from learner import allreduce

            per_learner = self._get([a.__ray_call__.remote(allreduce.replay_steps, num_updates) for a in self.actors])
            norms = per_learner[0][1]  # every learner applied the same steps
            terms_seen = [t for terms, _ in per_learner for t in terms]
        else:
            for j in range(num_updates):
                results = self._each("compute_gradients", [(j,)] * m)
                if self.local is not None:
                    grads = results[0][1]
                else:
                    import ray

                    mean = {k: sum(g[k] * (n / batch_size_B) for _, g, n in results) for k in results[0][1]}
                    self.driver_gradient_bytes += (len(results) + 1) * _nbytes(mean)
                    grads = ray.put(mean)
                norms.append(self._each("apply_gradients", [(grads,)] * m)[0])
                terms_seen += [t for t, _, _ in results]
        if prioritized:
            self._each("push_priorities", [(src,) for src in sources])
        scalar = [k for k, v in terms_seen[0].items() if np.ndim(v) == 0]
        averaged: dict[str, Any] = {k: float(np.mean([t[k] for t in terms_seen])) for k in scalar}
        return DQNUpdateMetrics(
            **averaged,
            grad_norm_mean=float(np.mean(norms)),
            num_gradient_steps=num_updates,
            batch_size=batch_size_B,
            num_learners=len(self.actors),
        )

    def _each(self, method: str, args: list[tuple[Any, ...]], **kwargs: Any) -> list[Any]:
        """``method(*args[i], **kwargs)`` on learner i (the local one, or actors in parallel)."""
        if self.local is not None:
            return [getattr(self.local, method)(*args[0], **kwargs)]
        return self._get(
            [getattr(a, method).remote(*call, **kwargs) for a, call in zip(self.actors, args, strict=True)]
        )

    def get_weights(self) -> dict[str, np.ndarray]:
        """The module weights (identical on every learner)."""
        if self.local is not None:
            return self.local.module.get_state()
        return self._get([self.actors[0].get_state.remote()])[0]["module"]

    def get_states(self) -> list[dict[str, Any]]:
        """Every learner's full state (for checks and checkpoints)."""
        if self.local is not None:
            return [self.local.get_state()]
        return self._get([a.get_state.remote() for a in self.actors])

    def set_states(self, state: dict[str, Any]) -> None:
        """Puts every learner in ``state`` (one learner's ``get_state()``, e.g. from a checkpoint)."""
        if self.local is not None:
            self.local.set_state(state)
            return
        import ray

        ref = ray.put(state)
        self._get([a.set_state.remote(ref) for a in self.actors])

    def set_connector_states(self, states: dict[str, Any]) -> None:
        """Loads merged env-to-module connector states (e.g. MeanStdFilter moments) into every
        learner's pipeline (``Learner.set_connector_states``)."""
        self._each("set_connector_states", [(states,)] * max(1, len(self.actors)))

    def stop(self) -> None:
        if self.actors:
            import ray

            for a in self.actors:
                ray.kill(a)
            self.actors = []
        if self._placement_group is not None:
            release(self._placement_group)
            self._placement_group = None


def _nbytes(grads: dict[str, Any]) -> int:
    return sum(int(np.asarray(g).nbytes) for g in grads.values())


def _bump_version(learner: Learner) -> int:
    learner.weights_version += 1
    return learner.weights_version
