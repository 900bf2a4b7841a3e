"""RunnerPlacement: the placement groups that reserve an EnvRunnerGroup's CPUs, one bundle per runner.

Each ``scale()`` that adds k runners reserves one placement group of k bundles with the group's
``placement_strategy`` (``SPREAD`` by default: runners over as many nodes as there are), after
checking that the cluster could ever hold them (``ray_sampler.resources``). A runner keeps its
bundle for its whole life, replacements included: Ray moves the bundles of a lost node to the
surviving ones, and the replacement starts there. A placement group is removed when its last
runner stops, and every one at ``release_all()``, so nothing stays reserved after the group.
"""

from __future__ import annotations

from typing import Any

from ray_sampler.resources import Demand, release, reserve
from ray_sampler.sampling.config import EnvRunnerGroupConfig

__all__ = ["RunnerPlacement", "runner_demand"]


def runner_demand(group_config: EnvRunnerGroupConfig, count: int) -> Demand:
    """What ``count`` runners of ``group_config`` reserve."""
    return Demand(
        "num_env_runners x (num_cpus_per_env_runner, custom_resources_per_env_runner)",
        count,
        {"CPU": group_config.num_cpus_per_env_runner, **group_config.custom_resources_per_env_runner},
    )


class RunnerPlacement:
    """Worker index -> (placement group, bundle index), for the runners of one EnvRunnerGroup."""

    def __init__(self, group_config: EnvRunnerGroupConfig, name_prefix: str) -> None:
        self._config = group_config
        self._name_prefix = name_prefix
        self._bundles: dict[int, tuple[Any, int]] = {}
        self._num_groups = 0

    def reserve(self, indices: list[int]) -> None:
        """Reserves one bundle for each of ``indices`` (raises InsufficientResourcesError if the
        cluster can never hold them, or they are not placed within ``actor_start_timeout_s``)."""
        if not indices:
            return
        self._num_groups += 1
        bundles = reserve(
            runner_demand(self._config, len(indices)),
            strategy=self._config.placement_strategy,
            timeout_s=self._config.actor_start_timeout_s,
            name=f"{self._name_prefix}-runners-{self._num_groups}",
        )
        for k, index in enumerate(indices):
            self._bundles[index] = (bundles, k)

    def options(self, index: int) -> dict[str, Any]:
        """The actor options that start runner ``index`` in its bundle."""
        bundles, k = self._bundles[index]
        return {
            # A runner gets several calls a second for hours: their task events would pile up in the
            # GCS (77% growth in 5 minutes measured); failures still come back as exceptions.
            "enable_task_events": False,
            "num_cpus": self._config.num_cpus_per_env_runner,
            "resources": dict(self._config.custom_resources_per_env_runner),
            "scheduling_strategy": bundles.scheduling_strategy(k),
        }

    def unplaced(self, indices: list[int]) -> list[int]:
        """Those of ``indices`` whose bundle has no live node now: its node is gone and Ray has not
        placed it again (no survivor has room), so a runner started in it waits for resources."""
        import ray
        from ray.util.placement_group import placement_group_table

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        tables: dict[int, Any] = {}
        found = []
        for index in indices:
            bundles, k = self._bundles[index]
            table = tables.setdefault(id(bundles.group), placement_group_table(bundles.group))
            node = (table.get("bundles_to_node_id") or {}).get(bundles.indices[k])
            if table.get("state") != "CREATED" or node not in alive:
                found.append(index)
        return found

    def free(self, index: int) -> None:
        """Runner ``index`` stopped for good: its bundle goes back once its group has no runner left."""
        entry = self._bundles.pop(index, None)
        if entry is not None and not any(g is entry[0] for g, _ in self._bundles.values()):
            release(entry[0])

    def release_all(self) -> None:
        """Removes every placement group still held."""
        groups = {id(g): g for g, _ in self._bundles.values()}
        self._bundles.clear()
        for group in groups.values():
            release(group)
