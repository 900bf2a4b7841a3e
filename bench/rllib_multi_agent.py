"""RLlib multi-agent sampling benchmark: MultiAgentEnvRunner env steps/s with random actions.

    .venv-rllib/bin/python bench/rllib_multi_agent.py [--seconds 5] [--num-envs 8]

Runs ONLY under RLlib's own interpreter (.venv-rllib: torch==2.13.0, "ray[rllib]", pettingzoo,
mpe2, pygame-ce); it imports nothing from this project. The envs of bench/multi_agent_bench.py:
``cartpole2`` (RLlib's ``make_multi_agent("CartPole-v1")``, 2 agents, one policy each) and
``simple_spread`` (mpe2 simple_spread_v3 through RLlib's ParallelPettingZooEnv, one shared
policy), ``--num-envs`` sub-envs (RLlib's vectorized multi-agent env), truncate mode with
rollout_fragment_length 128, ``sample(random_actions=True)`` (no forward pass), repeated for
``--seconds``. Prints one JSON object ({env: env steps/s}) on the last stdout line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def config_for(name: str, num_envs: int) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.multi_agent_env import make_multi_agent
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env

    if name == "cartpole2":
        register_env("cartpole2", lambda cfg: make_multi_agent("CartPole-v1")({"num_agents": 2}))
        policies, mapping = {"p0", "p1"}, (lambda aid, episode, **kw: f"p{aid}")
    else:
        from mpe2 import simple_spread_v3

        register_env(
            "simple_spread", lambda cfg: ParallelPettingZooEnv(simple_spread_v3.parallel_env(N=3, max_cycles=25))
        )
        policies, mapping = {"shared"}, (lambda aid, episode, **kw: "shared")
    return (
        PPOConfig()
        .environment(name)
        .multi_agent(policies=policies, policy_mapping_fn=mapping)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs, rollout_fragment_length=128)
    )


def steps_per_s(name: str, num_envs: int, seconds: float) -> float:
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

    runner = MultiAgentEnvRunner(config=config_for(name, num_envs))
    runner.sample(random_actions=True)  # warm-up
    steps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        steps += sum(e.env_steps() for e in runner.sample(random_actions=True))
    rate = steps / (time.perf_counter() - t0)
    runner.stop()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--num-envs", type=int, default=8)
    args = parser.parse_args()
    out = {}
    for name in ("cartpole2", "simple_spread"):
        out[name] = steps_per_s(name, args.num_envs, args.seconds)
        print(f"[rllib] {name}: {out[name]:.0f} env steps/s", file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
