"""Multi-node training scenario, run by test_train.py in its own process (one process joins one Ray).

Starts a ``ray.cluster_utils.Cluster`` (a head and 2 worker nodes, 2 CPUs each) and, on it, for each
``placement_strategy`` given, one after the other: trains PPO with 3 runners of 1 CPU each for 3
iterations, records which node each runner ran on (asked of the runners while the first iteration's
line is logged) and whether every CPU came back once the run stopped. Prints one JSON line of
findings, one entry per strategy. It stops only the cluster it started.

    python -m tests.learner.multinode_scenario SPREAD PACK
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import ray
from ray.cluster_utils import Cluster

from learner.train import PPOTrainingConfig, train_ppo
from tests.helpers import cpus_back_to

NUM_RUNNERS = 3
NUM_ITERATIONS = 3


def runner_names() -> set[str]:
    """The names of every live env runner of this job."""
    return {n for n in ray.util.list_named_actors() if "-env-runner-" in n}


def runner_nodes(exclude: set[str]) -> dict[str, str]:
    """Actor name -> node id of every live env runner of this job not named in ``exclude``."""
    names = sorted(runner_names() - exclude)
    refs = {n: ray.get_actor(n).__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()) for n in names}
    return dict(zip(refs, ray.get(list(refs.values()), timeout=30), strict=True))


def train_with(strategy: str) -> dict[str, Any]:
    """One PPO run placed with ``strategy`` on the cluster this process joined: what it found."""
    findings: dict[str, Any] = {"lines": [], "runner_nodes": None}
    earlier = runner_names()  # an earlier run's runners, should any name linger
    base = PPOTrainingConfig()
    cfg = dataclasses.replace(
        base,
        env_runner=dataclasses.replace(base.env_runner, num_envs_per_env_runner=4, rollout_fragment_length=64),
        env_runner_group=dataclasses.replace(
            base.env_runner_group,
            num_env_runners=NUM_RUNNERS,
            num_cpus_per_env_runner=1.0,
            placement_strategy=strategy,
        ),
        max_iterations=NUM_ITERATIONS,
    )

    def log(line: str) -> None:
        findings["lines"].append(line)
        if findings["runner_nodes"] is None:
            findings["runner_nodes"] = runner_nodes(earlier)

    result = train_ppo(cfg, log=log)
    findings["env_steps"] = result.env_steps
    findings["num_updates"] = sum(line.startswith("iter ") for line in findings["lines"])
    findings["cpus_back_after_stop"] = cpus_back_to(ray.cluster_resources()["CPU"])
    return findings


def run(strategies: list[str]) -> dict[str, Any]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        node_ids = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        return {strategy: {"node_ids": node_ids, **train_with(strategy)} for strategy in strategies}
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:])), flush=True)
