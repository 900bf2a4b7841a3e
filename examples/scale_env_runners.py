"""Scale the number of env runners up and down while sampling, without losing an env step.

    python examples/scale_env_runners.py --schedule 1,3,2,4
    python examples/scale_env_runners.py --address auto --schedule 4,16,8    # on a running cluster

Each iteration first scales the group to the next size in ``--schedule``, then samples once.
In ``truncate_episodes`` mode every runner returns exactly ``rollout_fragment_length x
num_envs_per_env_runner`` steps per call, so an iteration yields that many steps per runner;
runners that are stopped hand their unfinished episodes to the next ``sample()``. Each line also
says how many nodes the runners are on: ``SPREAD`` (the default) puts them on as many as it can.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import ray

from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
from ray_sampler.cli import parse, ray_cluster


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example (``--address``: see the README's "Run on a cluster")."""

    address: str = ""
    """Ray cluster to attach to: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if set, else
    a Ray started in this process)."""

    env: str = "CartPole-v1"
    """Gymnasium id to step."""
    schedule: str = "1,3,2,4"
    """Group size for each iteration, comma-separated."""
    num_envs_per_env_runner: int = 4
    """Sub-envs per runner."""
    rollout_fragment_length: int = 64
    """Steps per sub-env per iteration."""
    placement_strategy: str = "SPREAD"
    """How the runners' placement group bundles go over the nodes: SPREAD, PACK, STRICT_SPREAD, STRICT_PACK."""


def num_nodes(group: EnvRunnerGroup) -> int:
    """How many nodes the group's runners run on (asked of each runner)."""
    refs = [
        group.actor(i).__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        for i in group.worker_indices
    ]
    return len(set(ray.get(refs, timeout=60)))


def main(args: Args) -> None:
    sizes = [int(s) for s in args.schedule.split(",")]
    config = EnvRunnerConfig(
        env=args.env,
        num_envs_per_env_runner=args.num_envs_per_env_runner,
        rollout_fragment_length=args.rollout_fragment_length,
        seed=0,
    )
    per_runner = args.rollout_fragment_length * args.num_envs_per_env_runner
    group_config = EnvRunnerGroupConfig(
        num_env_runners=sizes[0], num_cpus_per_env_runner=0.25, placement_strategy=args.placement_strategy
    )
    total = 0
    with ray_cluster(args.address, num_cpus=max(sizes)) as where, EnvRunnerGroup(config, group_config) as group:
        print(f"scaling env runners {args.schedule} on a {where}")
        for it, size in enumerate(sizes, start=1):
            t0 = time.perf_counter()
            group.scale(size)
            scaled_s = time.perf_counter() - t0
            episodes = group.sample()
            steps = sum(len(ep) for ep in episodes)
            total += steps
            status = "ok" if steps == size * per_runner else f"expected {size * per_runner}"
            print(
                f"iter {it}: {size} runners {group.worker_indices} on {num_nodes(group)} node(s), "
                f"scale took {scaled_s:.2f} s, {steps} env steps ({status}), {group.metrics.num_episodes} episodes done"
            )
    print(f"total: {total} env steps over {len(sizes)} iterations; expected {sum(sizes) * per_runner}")


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/scale_env_runners.py", description=__doc__ or ""))
