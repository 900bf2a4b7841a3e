"""Multi-agent PPO on mpe2's simple_spread_v3 (3 agents, one shared policy): the return after 100k env steps.

    .venv/bin/python bench/multi_agent_spread_ppo.py [--seed 0] [--lr 3e-4] [--env-steps 100000]

``train_ppo`` with 2 env runners x 8 sub-envs x 125 steps (2,000 env steps an
iteration, 80 episodes of 25 cycles), one module for the 3 agents, the numpy PPO with ``--lr``, 6
epochs, minibatches of 256. Every episode ends at the 25-cycle limit: a truncation, which the
learner bootstraps. Prints the mean summed return of the last 100 episodes every 5 iterations and
at the end, per agent (the sum / 3, the figure RLlib's study reports: random play -26.5, RLlib
2.60 about -20.5 after 88k-104k env steps in 507-543 s), then the per-agent curve every 5
iterations. Baseline in the same run: the same env steps of simple_spread stepped bare with random
actions. The last stdout line is one JSON object, with the curve ``[env steps, per-agent return,
loop s]`` of every iteration (RLlib's side: bench/rllib_spread_ppo.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

from bench_common import ROOT

sys.path.insert(0, str(ROOT))
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
ITER_LINE = re.compile(r"iter \d+: (?P<steps>\d+) env steps, mean return (?P<ret>\S+) .*, (?P<s>[\d.]+) s$")


def spread(config: dict[str, Any]) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, max_cycles=25)


def bare_s(env_steps: int) -> float:
    """Seconds of ``env_steps`` steps of one simple_spread with random actions."""
    import numpy as np

    env = spread({})
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(env_steps):
        if not env.agents:
            env.reset()
        env.step({a: int(rng.integers(5)) for a in env.agents})
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--env-steps", type=int, default=100_000)
    args = parser.parse_args()
    t0 = time.perf_counter()
    import ray

    from learner.learner import PPOConfig
    from learner.train import PPOTrainingConfig, train_ppo
    from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
    from ray_sampler.sampling.multi_agent_config import MultiAgentConfig

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env=spread, num_envs_per_env_runner=8, rollout_fragment_length=125, seed=args.seed,
            multi_agent=MultiAgentConfig(policies=("shared",), policy_mapping_fn=lambda aid, episode, **kw: "shared"),
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5),
        ppo=PPOConfig(seed=args.seed, lr=args.lr, num_epochs=6, minibatch_size=256),
        max_iterations=max(args.env_steps // 2000, 1),
    )  # fmt: skip

    curve: list[list[float]] = []  # [env steps, per-agent return, loop s] of every iteration

    def log(line: str) -> None:
        if m := ITER_LINE.match(line):
            curve.append([int(m["steps"]), round(float(m["ret"]) / 3, 3), float(m["s"])])
        if not line.startswith("iter ") or int(line.split(":")[0].split()[1]) % 5 == 0:
            print(line, flush=True)

    result = train_ppo(cfg, log=log)
    whole = time.perf_counter() - t0
    ray.shutdown()
    raw = bare_s(result.env_steps)
    per_agent = result.mean_return / 3
    print("per agent by env steps: " + ", ".join(f"{int(n)} {r:.2f}" for n, r, _ in curve[4::5]), flush=True)
    print(
        f"after {result.env_steps} env steps: mean summed return {result.mean_return:.1f} "
        f"({per_agent:.1f} per agent), loop {result.seconds:.1f} s, whole {whole:.1f} s; "
        f"bare simple_spread for those steps {raw:.1f} s (whole / bare {whole / raw:.1f})"
    )
    # Where the loop's time goes: sampling (the runners, in parallel) and updating (one learner,
    # the runners idle meanwhile), and the rest of the process (imports, Ray, actors, the stop).
    print(
        f"loop: sampling {result.sample_s:.1f} s, updating {result.update_s:.1f} s (learner pipeline "
        f"{result.learner_connector_s:.1f} s); outside the loop {whole - result.seconds:.1f} s"
    )
    print(json.dumps({"seed": args.seed, "lr": args.lr, "env_steps": result.env_steps, "per_agent": per_agent,
                      "loop_s": result.seconds, "whole_s": whole, "bare_s": raw, "sample_s": result.sample_s,
                      "update_s": result.update_s, "curve": curve}))  # fmt: skip


if __name__ == "__main__":
    main()
