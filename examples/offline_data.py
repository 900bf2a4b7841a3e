"""Offline data: sample into a replay actor, save it to Parquet, read it back with any Arrow tool.

    python examples/offline_data.py --iterations 3 --out /tmp/cartpole.parquet

Runners ship their chunks straight to a ReplayActor; the actor saves its buffer as Parquet
(the episode table of ray_sampler.data.arrow_format: one row per observation, no pickle). The file
is then read three ways: plain pyarrow, Ray Data (which needs pandas installed), and back into
a replay buffer that samples exactly as the saved one would.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile

import numpy as np
import pyarrow.parquet as pq
import ray

from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig
from ray_sampler.cli import parse
from replay import ReplayConfig, create_replay_actor, restore_buffer


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    env: str = "CartPole-v1"
    """Gymnasium id to sample."""
    num_env_runners: int = 2
    """Runner actors shipping to the replay actor."""
    iterations: int = 3
    """Sampling rounds."""
    rollout_fragment_length: int = 64
    """Steps per sub-env per round (4 sub-envs per runner)."""
    out: str = ""
    """Parquet file to write (default: a temporary file)."""


def main(args: Args) -> None:
    out = args.out or os.path.join(tempfile.mkdtemp(), "offline.parquet")
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    replay = create_replay_actor(ReplayConfig(capacity_env_steps=100_000, seed=0), num_cpus=0.5)
    config = EnvRunnerConfig(
        env=args.env, num_envs_per_env_runner=4, rollout_fragment_length=args.rollout_fragment_length, seed=0
    )
    with EnvRunnerGroup(
        config, EnvRunnerGroupConfig(num_env_runners=args.num_env_runners, num_cpus_per_env_runner=0.5)
    ) as group:
        for it in range(1, args.iterations + 1):
            acks = group.sample_to_replay(replay)
            stored = max(m.replay.num_env_steps_stored for m in acks)
            print(f"iter {it}: {sum(m.num_env_steps for m in acks)} env steps shipped, {stored} stored")
    ray.get(replay.save.remote(out))
    metrics = ray.get(replay.get_metrics.remote())
    print(f"saved {metrics.num_env_steps} env steps of {metrics.num_episodes} episodes to {out}")

    table = pq.read_table(out)
    is_step = table.column("action").is_valid().to_numpy(zero_copy_only=False)
    print(
        f"pyarrow: {table.num_rows} rows, columns {', '.join(table.column_names)}; "
        f"{int(is_step.sum())} rows with an action"
    )
    try:
        from ray import data as ray_data

        ds = ray_data.read_parquet(out)
        print(f"ray.data: {ds.count()} rows, mean reward {ds.mean('reward'):.2f}")
    except ImportError as e:
        print(f"ray.data: not available here ({e}); pip install pandas")

    restored = restore_buffer(out)
    batch = restored.sample(4, n_step=3, gamma=0.99)
    print(
        f"restored buffer: {len(restored)} env steps, {restored.num_episodes} episodes; "
        f"3-step returns of 4 samples: {np.round(batch['rewards'], 3).tolist()}"
    )
    ray.shutdown()


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/offline_data.py", description=__doc__ or ""))
