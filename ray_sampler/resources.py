"""What a job asks of the Ray cluster, checked before its actors start, and placement groups that wait for it.

A component describes its actors as ``Demand`` s (the config fields that size them, how many
actors, what each reserves). ``check_demands`` compares them with the cluster:

- a demand that can never fit (more in total than the cluster has, or one actor larger than
  every node) raises ``InsufficientResourcesError`` at once, naming the fields and what the
  cluster has, unless the cluster autoscales (then it could fit later);
- a demand that fits the cluster but not beside what this process already reserved (its live
  placement groups, which nothing frees while it waits) raises too, naming those reservations:
  runners holding every CPU would otherwise leave a learner group waiting out its whole timeout;
- ``reserve`` creates a placement group for the demand and waits for it up to a deadline,
  logging what is pending every ``log_every_s`` seconds, so a request that has to wait for
  other jobs or for new nodes says so instead of hanging silently.

``never_fits`` is the pure rule (no Ray), for tests and for callers that know the cluster shape:

>>> runners = Demand("num_env_runners x num_cpus_per_env_runner", 8, {"CPU": 1.0})
>>> print(never_fits([runners], {"CPU": 2.0}, [{"CPU": 2.0}]))
num_env_runners x num_cpus_per_env_runner = 8 x 1 CPU = 8.0 CPU, but the cluster has 2.0 CPU in all
>>> never_fits([runners], {"CPU": 16.0}, [{"CPU": 8.0}, {"CPU": 8.0}]) is None
True
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ray_sampler.errors import InsufficientResourcesError
from ray_sampler.validate import check_enum

__all__ = [
    "AUTOSCALING_ENV_VAR",
    "Bundles",
    "Demand",
    "PlacementStrategy",
    "check_demands",
    "cluster_autoscales",
    "lend_bundles",
    "never_fits",
    "release",
    "reserve",
]

AUTOSCALING_ENV_VAR = "RAY_SAMPLER_CLUSTER_AUTOSCALES"
"""``1``/``0`` tells the check whether the cluster can grow, overriding what it detects."""


class PlacementStrategy(str, enum.Enum):
    """Ray's placement group strategies: where the bundles of one group go."""

    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_PACK = "STRICT_PACK"
    STRICT_SPREAD = "STRICT_SPREAD"


_log = logging.getLogger("ray_sampler.resources")


@dataclasses.dataclass(frozen=True)
class Demand:
    """``count`` actors, each reserving ``bundle`` (resource name -> amount), sized by ``fields``."""

    fields: str
    """The config fields that set it, as the user wrote them (``num_env_runners x num_cpus_per_env_runner``)."""
    count: int
    bundle: Mapping[str, float]

    def total(self, resource: str) -> float:
        return self.count * float(self.bundle.get(resource, 0.0))

    def describe(self, resource: str) -> str:
        amount = float(self.bundle.get(resource, 0.0))
        return f"{self.fields} = {self.count} x {amount:g} {resource} = {self.count * amount:.1f} {resource}"


# This process's placement groups made by ``reserve`` and not yet released: placement group id ->
# (the Ray job that made it, its demand). A group of an earlier job (ray.shutdown, then ray.init)
# holds nothing on this cluster: dropped when found.
_held: dict[str, tuple[str, Demand]] = {}


def _job_id() -> str:
    """This driver's Ray job, on this cluster (a job id alone repeats: each new local cluster's
    first job is 01000000; the driver's node id does not)."""
    import ray

    context = ray.get_runtime_context()
    return f"{context.get_node_id()}/{context.get_job_id()}"


def _held_now() -> list[Demand]:
    """The demands this process's current Ray job holds (stale entries of earlier jobs dropped)."""
    job = _job_id()
    for key in [k for k, (j, _) in _held.items() if j != job]:
        del _held[key]
    return [demand for _, demand in _held.values()]


def never_fits(
    demands: Sequence[Demand], totals: Mapping[str, float], nodes: Sequence[Mapping[str, float]]
) -> str | None:
    """Why ``demands`` can never be placed on a cluster of ``nodes`` (each one's resources) whose
    sum is ``totals``, or None when they could be."""
    demands = [d for d in demands if d.count > 0]
    resources = sorted({r for d in demands for r, v in d.bundle.items() if v > 0})
    for resource in resources:
        need = sum(d.total(resource) for d in demands)
        have = float(totals.get(resource, 0.0))
        if need > have + 1e-9:
            parts = " + ".join(d.describe(resource) for d in demands if d.total(resource) > 0)
            total = f" = {need:.1f} {resource}" if sum(d.total(resource) > 0 for d in demands) > 1 else ""
            return f"{parts}{total}, but the cluster has {have:.1f} {resource} in all"
    for d in demands:
        wanted = {r: float(v) for r, v in d.bundle.items() if v > 0}
        if not any(all(float(node.get(r, 0.0)) + 1e-9 >= v for r, v in wanted.items()) for node in nodes):
            largest = max((float(node.get(r, 0.0)) for node in nodes for r in wanted), default=0.0)
            shape = ", ".join(f"{v:g} {r}" for r, v in sorted(wanted.items()))
            return f"{d.fields}: one actor needs {shape}, but no node has that much (the largest has {largest:g})"
    return None


def _cluster_shape() -> tuple[dict[str, float], list[dict[str, float]]]:
    import ray

    nodes = [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
    return {k: float(v) for k, v in ray.cluster_resources().items()}, nodes


def cluster_autoscales() -> bool:
    """Whether the cluster can add nodes: ``RAY_SAMPLER_CLUSTER_AUTOSCALES`` if set, else whether
    Ray's autoscaler runs with a node provider that launches nodes (a cluster started with
    ``ray start`` by hand has only the read-only provider, whose node types are its own nodes)."""
    forced = os.environ.get(AUTOSCALING_ENV_VAR)
    if forced is not None:
        return forced.strip().lower() in ("1", "true", "yes", "on")
    try:
        from ray.autoscaler.v2.utils import is_autoscaler_v2

        if is_autoscaler_v2():
            return True
        from ray.experimental.internal_kv import _internal_kv_get  # noqa: PLC2701 -- no public read of the status

        raw = _internal_kv_get("__autoscaling_status")
    except Exception:
        return False
    if not raw:
        return False
    try:
        report = json.loads(raw).get("autoscaler_report") or {}
    except (ValueError, AttributeError):
        return False
    types = (report.get("node_type_mapping") or {}).items()
    # The read-only provider names each node's type after the node itself (node_<id>).
    return any(node_type != f"node_{node_id}" for node_id, node_type in types)


def check_demands(demands: Sequence[Demand]) -> None:
    """Raises InsufficientResourcesError if ``demands`` can never fit this cluster beside what this
    process already holds (see the module docstring); on an autoscaling cluster it only logs that
    they must wait for new nodes. In a process lent a placement group (``lend_bundles``) there is
    nothing to check: the bundles are reserved already, and ``reserve`` says if they are too few."""
    if _lender is not None:
        return
    totals, nodes = _cluster_shape()
    held = [dataclasses.replace(d, fields=f"{d.fields} (held by this process)") for d in _held_now()]
    reason = never_fits(demands, totals, nodes) or never_fits([*held, *demands], totals, nodes)
    if reason is None:
        return
    if cluster_autoscales():
        _log.info("%s; waiting for the autoscaler to add nodes", reason)
        return
    raise InsufficientResourcesError(
        f"cannot place the actors: {reason} (reduce the fields named, or attach to a larger cluster "
        f"with --address; set {AUTOSCALING_ENV_VAR}=1 if it autoscales)"
    )


@dataclasses.dataclass(frozen=True, eq=False)
class Bundles:
    """Bundles reserved by ``reserve``: placement group ``group``'s bundles ``indices`` (the k-th
    actor of the demand goes in bundle ``indices[k]``)."""

    group: Any
    indices: tuple[int, ...]
    lent: bool = False
    """Bundles of a placement group this process was lent (``lend_bundles``): ``release`` gives
    them back to the lender instead of removing the group."""

    def scheduling_strategy(self, k: int) -> Any:
        """Ray's scheduling strategy that starts an actor in the k-th bundle."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=self.group, placement_group_bundle_index=self.indices[k]
        )


@dataclasses.dataclass
class _Lender:
    group: Any
    free: dict[int, dict[str, float]]  # bundle index -> its resources, not lent out now


_lender: _Lender | None = None


def lend_bundles(group: Any, bundles: Mapping[int, Mapping[str, float]] | None) -> None:
    """From now on ``reserve`` in this process takes its bundles from ``group``'s ``bundles`` (index
    -> its resources) rather than making placement groups: the placement group Ray Tune reserved
    for a trial (ray_sampler.tune). None: back to making them."""
    global _lender
    if bundles is None:
        _lender = None
        return
    _lender = _Lender(group, {i: {r: float(v) for r, v in b.items()} for i, b in bundles.items()})


def _borrow(demand: Demand) -> Bundles:
    """``demand.count`` free lent bundles that hold ``demand.bundle`` each; InsufficientResourcesError if fewer."""
    assert _lender is not None
    wanted = {r: float(v) for r, v in demand.bundle.items() if v > 0}
    fits = [i for i, have in sorted(_lender.free.items()) if {r: v for r, v in have.items() if v > 0} == wanted]
    if len(fits) < demand.count:
        shape = ", ".join(f"{v:g} {r}" for r, v in sorted(wanted.items())) or "no resources"
        raise InsufficientResourcesError(
            f"{demand.fields}: {demand.count} bundles of {shape} wanted, but the trial's placement group has "
            f"{len(fits)} free (its resources are fixed when the trial starts)"
        )
    taken = tuple(fits[: demand.count])
    for i in taken:
        del _lender.free[i]
    return Bundles(_lender.group, taken, lent=True)


def reserve(
    demand: Demand,
    *,
    strategy: PlacementStrategy | str,
    timeout_s: float,
    name: str = "",
    log_every_s: float = 10.0,
) -> Bundles:
    """``demand.count`` ready bundles: a new placement group (``strategy``), or
    InsufficientResourcesError after ``timeout_s`` (the group is removed: nothing stays reserved).
    In a process lent a placement group (``lend_bundles``), its free bundles instead.

    Checks ``demand`` against the cluster first (``check_demands``)."""
    strategy = check_enum("placement_strategy", PlacementStrategy, strategy)
    if _lender is not None:
        return _borrow(demand)
    check_demands([demand])
    from ray.util.placement_group import placement_group

    bundles = [{r: float(v) for r, v in demand.bundle.items() if v > 0} for _ in range(demand.count)]
    group = placement_group(bundles, strategy=strategy.value, name=name)
    deadline = time.monotonic() + timeout_s
    ready = group.ready()
    import ray

    while True:
        remaining = deadline - time.monotonic()
        done, _ = ray.wait([ready], timeout=max(0.0, min(log_every_s, remaining)))
        if done:
            ray.get(ready)
            _held[group.id.hex()] = (_job_id(), demand)
            return Bundles(group, tuple(range(demand.count)))
        available = ray.available_resources()
        pending = ", ".join(f"{v:g} {r}" for r, v in sorted(bundles[0].items()))
        free = ", ".join(f"{float(available.get(r, 0.0)):.1f} {r}" for r in sorted(bundles[0]))
        if time.monotonic() >= deadline:
            release(Bundles(group, ()))
            raise InsufficientResourcesError(
                f"{demand.fields}: {demand.count} bundles of {pending} ({strategy.value}) were not placed within "
                f"{timeout_s:g} s; the cluster has {free} free"
            )
        _log.info(
            "waiting for %s: %d bundles of %s (%s) pending; %s free",
            demand.fields,
            demand.count,
            pending,
            strategy.value,
            free,
        )


def release(bundles: Bundles) -> None:
    """Gives back what ``reserve`` returned: removes its placement group (the resources go back to
    the cluster), or returns lent bundles to the lender."""
    if bundles.lent:
        if _lender is not None and _lender.group.id == bundles.group.id:
            for i in bundles.indices:
                _lender.free[i] = _bundle_resources(bundles.group, i)
        return
    from ray.util.placement_group import remove_placement_group

    _held.pop(bundles.group.id.hex(), None)
    remove_placement_group(bundles.group)


def _bundle_resources(group: Any, index: int) -> dict[str, float]:
    return {r: float(v) for r, v in group.bundle_specs[index].items()}
