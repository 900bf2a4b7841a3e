"""Replay shards: K replay actors that act as one replay, for adds or samples one actor cannot keep up with.

- **Each runner's chunks go to one shard**, ``(worker_index - 1) % K`` (chosen by the runner
  group, ray_sampler.sampling.env_runner_group), so every continuation chunk of an episode reaches
  the shard that holds its start.
- **Each shard is a whole ReplayActor** of ``shard_config``: 1/K of the capacity and of the warm-up
  (``min_size_to_sample``), its own checkpoint file and seed. Shard k's checkpoint, restore, restart
  and loss are its own; the others go on.
- **Sampling** (``plan_draws``, ``ShardDraw``): each learner's pull (its batches for the next
  gradient steps, one call) goes whole to one shard, drawn with probability ``mass_k / sum(mass)``.
  The mass is a shard's stored env steps for uniform replay, and its priority sum for prioritized
  replay. Inside the shard a step is drawn with ``p_i / mass_k``, so ``P(i) = p_i / sum(p)`` over
  all shards, as in one buffer (Ape-X's scheme). One shard per pull, not per batch: a Ray call
  costs about 1 ms whatever it carries, so a pull split over every shard would cost each shard as
  many calls as one replay actor takes, and the shards would not share the load
  (bench/replay_shards.py measured that: 0.85x the CPU per env step with 2 shards, not 0.5x).
- **Importance weights** are a shard's ``(p_i / min_k) ** -beta``, rescaled by
  ``(min_k / min) ** -beta`` to the smallest priority of all shards. They equal one buffer's
  weights for the masses read when the draw was made.
- **Priorities go back to the shard each batch came from** (``ShardDraw.push``).

The masses are read once per draw (``sampling_mass``, one small call per shard). Steps added
between that read and the sampling call change the shares slightly until the next draw.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError, ReplayError
from ray_sampler.handles import submit
from ray_sampler.validate import check_int
from replay.actor import ReplayConfig

__all__ = ["ShardDraw", "check_num_replay_shards", "draw_shards", "plan_draws", "shard_config", "shard_path"]


def shard_path(path: str, shard: int, num_shards: int) -> str:
    """Shard ``shard``'s checkpoint file: ``path`` itself for one shard, else ``stem.shard-{k}.suffix``."""
    if num_shards == 1:
        return path
    stem, suffix = os.path.splitext(path)
    return f"{stem}.shard-{shard}{suffix}"


def shard_config(config: ReplayConfig, shard: int, num_shards: int) -> ReplayConfig:
    """The ReplayConfig of shard ``shard`` of ``num_shards``: ``config`` describes the whole replay,
    so each shard holds ``ceil(capacity / K)`` env steps, warms up at ``ceil(min_size_to_sample / K)``,
    checkpoints to its own file (``shard_path``) every ``checkpoint_every_env_steps / K`` and draws
    with seed ``seed + shard``."""
    check_int("num_replay_shards", num_shards, minimum=1)
    if num_shards == 1:
        return config
    every, path = config.checkpoint_every_env_steps, config.checkpoint_path
    return dataclasses.replace(
        config,
        capacity_env_steps=math.ceil(config.capacity_env_steps / num_shards),
        capacity_bytes=None if config.capacity_bytes is None else math.ceil(config.capacity_bytes / num_shards),
        min_size_to_sample=math.ceil(config.min_size_to_sample / num_shards),
        checkpoint_path=None if path is None else shard_path(path, shard, num_shards),
        checkpoint_every_env_steps=None if every is None else math.ceil(every / num_shards),
        seed=None if config.seed is None else config.seed + shard,
    )


@dataclasses.dataclass(frozen=True)
class ShardDraw:
    """Which shard each of a learner's next batches comes from, and how to rescale its weights.

    What a learner's ``pull_from_replay`` takes in place of one replay (see the module docstring)."""

    shards: tuple[Any, ...]
    """The shards' ReplayActor handles (or local ReplayActors)."""
    assignment: tuple[int, ...]
    """The shard of each batch, in the order the learner uses them."""
    weight_scale: tuple[float, ...] = ()
    """Per shard, the factor on its importance weights (prioritized replay; empty: none)."""

    def pull(self, batch_size_B: int, *, timeout_s: float | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        """The batches, in ``assignment`` order: one ``sample_batches`` call per shard drawn, all
        sent before any answer is awaited."""
        import ray

        order = np.asarray(self.assignment, dtype=np.int64)
        counts = np.bincount(order, minlength=len(self.shards))
        pending = {
            k: submit(self.shards[k].sample_batches, batch_size_B, int(n), timeout_s=timeout_s, **kwargs)
            for k, n in enumerate(counts)
            if n
        }
        batches: list[dict[str, Any]] = [{} for _ in order]
        for k, answer in pending.items():
            shard_batches = ray.get(answer) if isinstance(answer, ray.ObjectRef) else answer
            for j, batch in zip(np.flatnonzero(order == k), shard_batches, strict=True):
                if self.weight_scale and Columns.WEIGHTS in batch:
                    batch = {**batch, Columns.WEIGHTS: batch[Columns.WEIGHTS] * self.weight_scale[k]}
                batches[j] = batch
        return batches

    def push(self, keys: dict[int, np.ndarray], priorities: dict[int, np.ndarray]) -> int:
        """Sends the priorities of batch j's ``keys[j]`` to batch j's shard; the count sent."""
        import ray

        refs, sent = [], 0
        for k in range(len(self.shards)):
            js = [j for j in sorted(keys) if self.assignment[j] == k]
            if not js:
                continue
            shard_keys = np.concatenate([keys[j] for j in js])
            shard_priorities = np.concatenate([priorities[j] for j in js])
            refs.append(submit(self.shards[k].update_priorities, shard_keys, shard_priorities))
            sent += len(shard_keys)
        ray.get([r for r in refs if isinstance(r, ray.ObjectRef)])
        return sent


def draw_shards(
    masses: Sequence[tuple[float, float]],
    num_batches: int,
    rng: np.random.Generator,
    *,
    beta: float | None = None,
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The shard of each of ``num_batches`` batches, drawn in proportion to the shards' masses, and
    (``beta`` given: prioritized replay) each shard's weight factor ``(min_k / min) ** -beta``.

    ``masses``: per shard, ``(mass, smallest priority)`` as ``ReplayActor.sampling_mass`` gives it
    (mass 0: the shard cannot be sampled yet). ReplayError if no shard can be sampled."""
    mass = np.array([m for m, _ in masses], dtype=np.float64)
    if not len(mass) or mass.sum() <= 0:
        raise ReplayError(f"no replay shard can be sampled yet (masses {mass.tolist()})")
    assignment = tuple(int(k) for k in rng.choice(len(mass), size=num_batches, p=mass / mass.sum()))
    if beta is None:
        return assignment, ()
    lowest = [low for m, low in masses if m > 0]
    floor = min(lowest)
    scale = tuple(float((low / floor) ** -beta) if m > 0 and low > 0 else 1.0 for m, low in masses)
    return assignment, scale


def plan_draws(shards: Sequence[Any], num_learners: int, num_batches: int, rng: np.random.Generator) -> list[ShardDraw]:
    """Each of ``num_learners`` learners' ShardDraw for its next ``num_batches`` batches: the shards'
    masses read once (one ``sampling_mass`` call per shard, sent together), then one shard drawn
    for each learner's whole pull (as Ape-X's learners ask one replay shard at a time): a shard
    serves 1/K of the calls, and each step is still drawn with probability ``p_i / sum(p)``."""
    import ray

    answers = [submit(s.sampling_mass) for s in shards]
    masses = [ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in answers]
    beta = masses[0][2]
    out = []
    for _ in range(num_learners):
        (shard,), scale = draw_shards([(m, low) for m, low, _ in masses], 1, rng, beta=beta)
        out.append(ShardDraw(tuple(shards), (shard,) * num_batches, scale))
    return out


def check_num_replay_shards(num_shards: Any, num_env_runners: int) -> None:
    """ConfigError unless 1 <= ``num_shards`` <= ``num_env_runners`` (with more shards than runners,
    some would never receive a chunk)."""
    check_int("num_replay_shards", num_shards, minimum=1)
    if num_shards > 1 and num_shards > num_env_runners:
        raise ConfigError(
            f"'num_replay_shards' ({num_shards}) must be <= 'num_env_runners' "
            f"({num_env_runners}): each runner sends its chunks to one shard, so a shard without a runner stays empty"
        )
