"""Node-loss scenario, run by test_node_loss.py in its own process (one process joins one Ray).

Starts a ``ray.cluster_utils.Cluster`` (a head and 2 worker nodes, 2 CPUs each; runners take 1
CPU, so 4 runners put at least 2 on the worker nodes and the survivors of one node's loss hold
all 4) and runs each scenario named, one after the other, on it: a new runner group samples, the
worker node holding the most runners is removed (its raylet told to shut down: ``graceful`` and
``no-restart``, which runs the group with restarts off; or killed outright: ``abrupt``, so that only
the health checks find it), the group samples on. Before the next scenario a new worker node takes
the removed one's place and every CPU is free again. Prints one JSON line: scenario -> its
findings. It stops only the cluster it started (one cluster for all: starting one takes seconds).

    python -m tests.ray_sampler.sampling.node_loss_scenario graceful abrupt no-restart
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import ray
from ray.cluster_utils import Cluster

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EnvRunnerFailedError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from tests.helpers import StampEnv, cpus_back_to, stamp_creator
from tests.ray_sampler.sampling.checks import assert_steps_once_and_continuous

NUM_RUNNERS = 4
SAMPLE_TIMEOUT_S = 10.0
AFTER_LOSS_TIMEOUT_S = 3.0
NUM_CALLS_AFTER_LOSS = 6
# Node death is told to the GCS when the raylet shuts down; the fast health checks catch a raylet
# that dies without a word. With --default-health-checks the cluster keeps Ray's own (a real
# cluster's: a crashed node is declared dead some 15-30 s later, and its actors are only
# "temporarily unavailable" until then).
FAST_HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 200}
FAST_HEALTH_CHECKS["health_check_failure_threshold"] = 3
# Ray's own metrics are off: after a node crash without room, ray.shutdown() waited 15-20 s on the
# driver's last metrics export, which a node's agent did not answer (nothing here reads Ray's metrics).
NO_METRICS = {"enable_metrics_collection": False}
MAX_S_AFTER_LOSS = 120.0
"""Calls go on past NUM_CALLS_AFTER_LOSS until the lost runners are replaced and two more calls
answered (Ray's own health checks take 15-30 s to declare a crashed node dead), up to this."""


def process_stamp_creator(ctx: Any) -> StampEnv:
    """StampEnv numbering its episodes from a per-process offset: a replacement never repeats the
    stamps of the runner it replaces. A runner's steps take 5 ms; the driver's own checks of the env
    (worker index 0: its 300 check steps) run at full speed."""
    env = stamp_creator(ctx)
    env.sleep_s = 0.005 if ctx["worker_index"] else 0.0
    env.episode = (os.getpid() % 10_000) * 1_000 - 1
    return env


def node_ids(group: EnvRunnerGroup, timeout_s: float = SAMPLE_TIMEOUT_S) -> dict[int, str | None]:
    """Worker index -> the id of the node its actor runs on (None: the actor is dead, as a runner on
    the removed node is when restarts are off and the group raised before getting to it, or it is
    not placed, as a replacement waiting for room: it does not answer by ``timeout_s``)."""
    refs = {
        i: group.actor(i).__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
        for i in group.worker_indices
    }
    found: dict[int, str | None] = {}
    deadline = time.monotonic() + timeout_s  # one for all: not one per runner not placed, each waited out
    for i, ref in refs.items():
        try:
            found[i] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            found[i] = None
    return found


SCENARIOS: dict[str, dict[str, Any]] = {
    "graceful": {"restart": True, "abrupt": False},
    "abrupt": {"restart": True, "abrupt": True},
    "no-restart": {"restart": False, "abrupt": False},
    # Runners fill every CPU (6 of 6): the survivors have no room for the lost node's replacements.
    "abrupt-no-room": {"restart": True, "abrupt": True, "num_runners": 6},
}


def lose_a_node(
    cluster: Cluster, workers: list[Any], *, restart: bool, abrupt: bool, num_runners: int = NUM_RUNNERS
) -> tuple[dict[str, Any], Any]:
    """One scenario on the running cluster: its findings and the worker node it removed."""
    findings: dict[str, Any] = {"error": None, "sample_s": [], "runner_failures": [], "late_runners": []}
    chunks: list[SingleAgentEpisode] = []
    config = EnvRunnerConfig(env=process_stamp_creator, num_envs_per_env_runner=2, rollout_fragment_length=10)
    group_config = EnvRunnerGroupConfig(
        num_env_runners=num_runners,
        num_cpus_per_env_runner=1.0,
        sample_timeout_s=SAMPLE_TIMEOUT_S,
        delay_between_env_runner_restarts_s=0.0,
        restart_failed_env_runners=restart,
    )
    with EnvRunnerGroup(config, group_config) as group:
        chunks += group.sample()
        before = node_ids(group)
        victim = max(workers, key=lambda n: sum(v == n.node_id for v in before.values()))
        findings["runners_on_removed_node"] = sorted(i for i, n in before.items() if n == victim.node_id)
        cluster.remove_node(victim, allow_graceful=not abrupt)
        removed_at, calls_after_restarts = time.monotonic(), 0
        try:
            while len(findings["sample_s"]) < NUM_CALLS_AFTER_LOSS or calls_after_restarts < 2:
                start = time.monotonic()
                chunks += group.sample()
                findings["sample_s"].append(round(time.monotonic() - start, 3))
                findings["runner_failures"] += group.metrics.runner_failures
                findings["late_runners"].append(group.metrics.late_runners)
                findings.setdefault("healthy", []).append(group.metrics.num_healthy_env_runners)
                findings.setdefault("waiting", []).append(group.metrics.waiting_runners)
                lost_so_far = group.metrics.num_env_runner_restarts >= len(findings["runners_on_removed_node"])
                calls_after_restarts += lost_so_far
                if time.monotonic() - removed_at > MAX_S_AFTER_LOSS:
                    break
        except EnvRunnerFailedError as e:
            findings["error"] = f"EnvRunnerFailedError: {e}"
        # The runners that sampled last answer at once; one dead or not placed does not answer
        # however long it is given (nor can one on the removed node): a shorter wait than before the loss.
        after = node_ids(group, timeout_s=AFTER_LOSS_TIMEOUT_S)
        findings.update(
            num_env_runner_restarts=group.metrics.num_env_runner_restarts,
            num_healthy_env_runners=group.metrics.num_healthy_env_runners,
            worker_indices=group.worker_indices,
            runners_on_removed_node_after=sorted(i for i, n in after.items() if n == victim.node_id),
            num_episodes_abandoned=group.metrics.num_episodes_abandoned,
            num_env_steps_lost=group.metrics.num_env_steps_lost,
            num_chunks=len(chunks),
            num_env_steps=sum(len(c) for c in chunks),
        )
    try:
        assert_steps_once_and_continuous(chunks)
        findings["continuity_error"] = None
    except AssertionError as e:
        findings["continuity_error"] = str(e) or "AssertionError"
    return findings, victim


def run(scenarios: list[str], *, fast_health_checks: bool = True) -> dict[str, Any]:
    system_config = {**NO_METRICS, **(FAST_HEALTH_CHECKS if fast_health_checks else {})}
    head_args: dict[str, Any] = {"num_cpus": 2, "include_dashboard": False, "_system_config": system_config}
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    found: dict[str, Any] = {}
    try:
        workers = [cluster.add_node(num_cpus=2) for _ in range(2)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        for name in scenarios:
            while len(workers) < 2:  # a new worker node in place of the one the last scenario removed
                workers.append(cluster.add_node(num_cpus=2))
                cluster.wait_for_nodes()
            assert cpus_back_to(6.0, timeout_s=60), "the CPUs of the last scenario's runners did not come back"
            found[name], removed = lose_a_node(cluster, workers, **SCENARIOS[name])
            workers.remove(removed)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return found


if __name__ == "__main__":
    names = [a for a in sys.argv[1:] if not a.startswith("--")]
    print(json.dumps(run(names, fast_health_checks="--default-health-checks" not in sys.argv)), flush=True)
