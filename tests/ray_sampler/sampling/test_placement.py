"""RunnerPlacement through the EnvRunnerGroup: runners in placement group bundles, impossible requests
refused before any actor starts, and no CPU left reserved after scaling and stopping."""

from __future__ import annotations

import pytest
import ray
from ray.util.placement_group import placement_group_table

from ray_sampler.errors import ConfigError, InsufficientResourcesError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig, PlacementStrategy
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.placement import runner_demand
from tests.helpers import cpus_back_to, idle_cpus, kill_and_wait

pytestmark = pytest.mark.usefixtures("ray_session")

CONFIG = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=1, rollout_fragment_length=8, seed=0)


def live_placement_groups() -> list[str]:
    return sorted(pg["name"] for pg in placement_group_table().values() if pg["state"] != "REMOVED")


def runner_placement_group(group: EnvRunnerGroup, index: int) -> str:
    """The name of the placement group runner ``index`` runs in (asked of the actor itself)."""

    def name(_: object) -> str:
        current = ray.util.get_current_placement_group()
        return placement_group_table(current)["name"] if current is not None else ""

    return ray.get(group.actor(index).__ray_call__.remote(name), timeout=30)


def test_a_group_the_cluster_can_never_hold_is_refused_before_any_runner_starts() -> None:
    groups_before = live_placement_groups()
    with pytest.raises(
        InsufficientResourcesError,
        match=r"^cannot place the actors: num_env_runners x \(num_cpus_per_env_runner, "
        r"custom_resources_per_env_runner\) = 8 x 1 CPU = 8\.0 CPU, but the cluster has 4\.0 CPU in all",
    ):
        EnvRunnerGroup(CONFIG, EnvRunnerGroupConfig(num_env_runners=8, num_cpus_per_env_runner=1.0))
    assert live_placement_groups() == groups_before
    assert not [a for a in ray.util.list_named_actors() if "env-runner" in a]


def test_a_custom_resource_no_node_has_is_refused_naming_it() -> None:
    with pytest.raises(InsufficientResourcesError, match=r"but the cluster has 0\.0 gpu_sim in all"):
        EnvRunnerGroup(
            CONFIG,
            EnvRunnerGroupConfig(
                num_env_runners=1, num_cpus_per_env_runner=0.5, custom_resources_per_env_runner={"gpu_sim": 1.0}
            ),
        )


def test_each_scale_up_reserves_one_group_and_stopping_returns_every_cpu() -> None:
    before = idle_cpus()
    group = EnvRunnerGroup(CONFIG, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5))
    try:
        first = runner_placement_group(group, 1)
        assert first.startswith(group.name_prefix)
        assert runner_placement_group(group, 2) == first
        group.scale(3)
        added = runner_placement_group(group, 3)
        assert added not in ("", first)
        assert ray.available_resources().get("CPU", 0.0) == before - 1.5
        group.scale(2)  # runner 3 stops: its group has no runner left and goes
        assert cpus_back_to(before - 1.0)
        assert added not in live_placement_groups()
        assert group.sample()
    finally:
        group.stop()
    assert cpus_back_to(before)
    assert not [name for name in live_placement_groups() if name.startswith(group.name_prefix)]


def test_a_replacement_runner_takes_its_predecessors_bundle() -> None:
    group = EnvRunnerGroup(CONFIG, EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5))
    try:
        bundle = runner_placement_group(group, 2)
        kill_and_wait(group.actor(2))
        group.sample()
        assert group.metrics.num_env_runner_restarts == 1
        assert runner_placement_group(group, 2) == bundle
    finally:
        group.stop()


def test_runner_demand_names_the_fields_and_sums_cpus_and_custom_resources() -> None:
    demand = runner_demand(
        EnvRunnerGroupConfig(num_cpus_per_env_runner=0.5, custom_resources_per_env_runner={"env_node": 1.0}), 6
    )
    assert (demand.count, dict(demand.bundle)) == (6, {"CPU": 0.5, "env_node": 1.0})
    assert demand.total("CPU") == 3.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"placement_strategy": "RANDOM"}, r"'placement_strategy' must be one of 'PACK', 'SPREAD', 'STRICT_PACK'"),
        ({"custom_resources_per_env_runner": {"CPU": 1}}, r"keys must be custom resource names, not 'CPU' or 'GPU'"),
        ({"custom_resources_per_env_runner": {"x": -1}}, r"'custom_resources_per_env_runner\['x'\]' must be"),
        ({"custom_resources_per_env_runner": [1]}, r"'custom_resources_per_env_runner' must be a dict"),
    ],
    ids=["strategy", "cpu-key", "negative", "not-a-dict"],
)
def test_bad_placement_fields_are_config_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EnvRunnerGroupConfig(**kwargs)


def test_the_strategy_is_an_enum_member() -> None:
    assert EnvRunnerGroupConfig(placement_strategy="PACK").placement_strategy is PlacementStrategy.PACK
