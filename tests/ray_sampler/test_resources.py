"""The cluster-resource check and the placement groups behind every actor the library starts."""

from __future__ import annotations

import logging

import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group

from ray_sampler.errors import ConfigError, InsufficientResourcesError
from ray_sampler.resources import (
    AUTOSCALING_ENV_VAR,
    Demand,
    PlacementStrategy,
    check_demands,
    cluster_autoscales,
    lend_bundles,
    never_fits,
    release,
    reserve,
)
from tests.helpers import cpus_back_to, idle_cpus

RUNNERS = Demand("num_env_runners x num_cpus_per_env_runner", 8, {"CPU": 1.0})
LEARNERS = Demand("num_learners x num_cpus_per_learner", 2, {"CPU": 1.5})


class TestNeverFits:
    def test_more_than_the_cluster_has_in_all_names_every_field_and_the_total(self) -> None:
        assert never_fits([RUNNERS, LEARNERS], {"CPU": 10.0}, [{"CPU": 10.0}]) == (
            "num_env_runners x num_cpus_per_env_runner = 8 x 1 CPU = 8.0 CPU + "
            "num_learners x num_cpus_per_learner = 2 x 1.5 CPU = 3.0 CPU = 11.0 CPU, "
            "but the cluster has 10.0 CPU in all"
        )

    def test_an_actor_larger_than_every_node_never_fits(self) -> None:
        big = Demand("num_learners x num_cpus_per_learner", 1, {"CPU": 3.0})
        assert never_fits([big], {"CPU": 4.0}, [{"CPU": 2.0}, {"CPU": 2.0}]) == (
            "num_learners x num_cpus_per_learner: one actor needs 3 CPU, but no node has that much (the largest has 2)"
        )

    def test_a_custom_resource_the_cluster_lacks_never_fits(self) -> None:
        demand = Demand("custom_resources_per_env_runner", 2, {"CPU": 1.0, "env_node": 1.0})
        assert never_fits([demand], {"CPU": 8.0}, [{"CPU": 8.0}]) == (
            "custom_resources_per_env_runner = 2 x 1 env_node = 2.0 env_node, but the cluster has 0.0 env_node in all"
        )

    @pytest.mark.parametrize(
        ("totals", "nodes"),
        [({"CPU": 11.0}, [{"CPU": 11.0}]), ({"CPU": 12.0}, [{"CPU": 4.0}, {"CPU": 4.0}, {"CPU": 4.0}])],
        ids=["one-node", "spread-over-nodes"],
    )
    def test_what_the_cluster_holds_fits(self, totals: dict[str, float], nodes: list[dict[str, float]]) -> None:
        assert never_fits([RUNNERS, LEARNERS], totals, nodes) is None

    def test_zero_actors_and_zero_amounts_ask_for_nothing(self) -> None:
        nothing = [Demand("num_learners x num_cpus_per_learner", 0, {"CPU": 64.0}), Demand("replay", 1, {"CPU": 0.0})]
        assert never_fits(nothing, {"CPU": 1.0}, [{"CPU": 1.0}]) is None


@pytest.mark.usefixtures("ray_session")
class TestOnTheCluster:
    """The session's Ray has 4 CPUs on one node."""

    def test_a_request_that_can_never_fit_raises_at_once(self) -> None:
        with pytest.raises(InsufficientResourcesError, match=r"= 8\.0 CPU, but the cluster has 4\.0 CPU in all"):
            check_demands([RUNNERS])

    def test_an_autoscaling_cluster_lets_it_wait(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(AUTOSCALING_ENV_VAR, "1")
        assert cluster_autoscales()
        check_demands([RUNNERS])  # no error: new nodes may come

    def test_a_cluster_started_by_hand_does_not_autoscale(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(AUTOSCALING_ENV_VAR, raising=False)
        assert not cluster_autoscales()

    def test_reserve_gives_a_ready_group_and_release_returns_its_cpus(self) -> None:
        before = idle_cpus()
        group = reserve(Demand("n x c", 2, {"CPU": 1.0}), strategy="SPREAD", timeout_s=30)
        assert ray.available_resources().get("CPU", 0.0) == before - 2
        release(group)
        assert cpus_back_to(before)

    def test_a_demand_that_fits_only_later_times_out_and_keeps_nothing(self) -> None:
        before = idle_cpus()
        holder = placement_group([{"CPU": before - 1}])
        ray.get(holder.ready(), timeout=30)
        try:
            with pytest.raises(InsufficientResourcesError, match=r"n x c: 1 bundles of 2 CPU \(PACK\) were not placed"):
                reserve(Demand("n x c", 1, {"CPU": 2.0}), strategy=PlacementStrategy.PACK, timeout_s=0.5)
        finally:
            remove_placement_group(holder)
        assert cpus_back_to(before)

    def test_a_waiting_demand_logs_what_is_pending(self, caplog: pytest.LogCaptureFixture) -> None:
        before = idle_cpus()
        holder = placement_group([{"CPU": before - 1}])
        ray.get(holder.ready(), timeout=30)
        caplog.set_level(logging.INFO, logger="ray_sampler.resources")
        try:
            with pytest.raises(InsufficientResourcesError):
                reserve(Demand("n x c", 1, {"CPU": 2.0}), strategy="PACK", timeout_s=1.0, log_every_s=0.2)
        finally:
            remove_placement_group(holder)
        lines = [r.getMessage() for r in caplog.records if r.name == "ray_sampler.resources"]
        assert len(lines) >= 3
        assert set(lines) == {"waiting for n x c: 1 bundles of 2 CPU (PACK) pending; 1.0 CPU free"}

    def test_an_unknown_strategy_names_the_field(self) -> None:
        with pytest.raises(ConfigError, match=r"'placement_strategy' must be one of 'PACK', 'SPREAD'"):
            reserve(Demand("n x c", 1, {"CPU": 1.0}), strategy="RANDOM", timeout_s=1)


@pytest.mark.usefixtures("ray_session")
def test_a_reservation_of_an_earlier_ray_job_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Held reservations are those of this process's current Ray job. A local cluster started after
    ray.shutdown gives its first job the same job id as the last cluster's, on another node: a group
    held under that node and this job id (an earlier cluster's) is dropped, one of this job is counted."""
    from ray_sampler import resources

    held, this_job = resources._held, resources._job_id()  # noqa: SLF001  (the process's reservations)
    everything = Demand("num_env_runners x num_cpus_per_env_runner", 1, {"CPU": float(ray.cluster_resources()["CPU"])})
    learner = Demand("num_learners x num_cpus_per_learner", 1, {"CPU": 1.0})
    job_id = ray.get_runtime_context().get_job_id()
    earlier = f"{'ab' * 28}/{job_id}"  # the same job id on another node
    assert earlier.split("/")[0] != ray.get_runtime_context().get_node_id()
    monkeypatch.setitem(held, "earlier-cluster", (earlier, everything))
    check_demands([learner])  # it would not fit beside the earlier cluster's group
    assert "earlier-cluster" not in held
    monkeypatch.setitem(held, "this-job", (this_job, everything))
    with pytest.raises(InsufficientResourcesError, match=r"\(held by this process\)"):
        check_demands([learner])


@pytest.mark.usefixtures("ray_session")
def test_lent_bundles_serve_reserve_until_they_run_out_and_release_gives_them_back() -> None:
    """A Ray Tune trial's placement group (ray_sampler.tune): bundle 0 is the trial's, the others
    are lent; ``reserve`` hands them out by shape, makes no group of its own, and refuses in one
    line when none is left."""
    before = idle_cpus()
    group = placement_group([{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 1.0}])
    ray.get(group.ready(), timeout=30)
    lend_bundles(group, {i: group.bundle_specs[i] for i in (1, 2, 3)})
    try:
        runners = reserve(
            Demand("num_env_runners x num_cpus_per_env_runner", 2, {"CPU": 0.5}), strategy="SPREAD", timeout_s=5
        )
        assert runners.group.id == group.id and runners.indices == (1, 2) and runners.lent
        learner = reserve(Demand("num_learners x num_cpus_per_learner", 1, {"CPU": 1.0}), strategy="PACK", timeout_s=5)
        assert learner.indices == (3,)
        assert ray.available_resources().get("CPU", 0.0) == before - 3  # only the trial's group holds CPUs
        with pytest.raises(
            InsufficientResourcesError,
            match=r"^n x c: 1 bundles of 0\.5 CPU wanted, but the trial's placement group has 0 free",
        ):
            reserve(Demand("n x c", 1, {"CPU": 0.5}), strategy="PACK", timeout_s=5)
        release(runners)  # back to the lender, the group stays
        assert reserve(Demand("n x c", 2, {"CPU": 0.5}), strategy="PACK", timeout_s=5).indices == (1, 2)
    finally:
        lend_bundles(None, None)
        remove_placement_group(group)
    assert cpus_back_to(before)
