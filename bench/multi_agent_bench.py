"""Multi-agent sampling benchmark: MultiAgentEnvRunner's env steps/s beside the same env stepped bare, and RLlib.

    .venv/bin/python bench/multi_agent_bench.py [--seconds 5] [--num-envs 8] [--rllib-python PATH]

Two envs, each with a random module (uniform actions: the runner's own cost, not a network's):

- ``cartpole2``: ``make_multi_agent("CartPole-v1", num_agents=2)``, one module per agent;
- ``simple_spread``: mpe2's ``simple_spread_v3`` (3 agents, 25 cycles) through the Parallel adapter,
  one shared module.

For each: a local MultiAgentEnvRunner in truncate mode (``rollout_fragment_length`` 128 per
sub-env), repeated ``sample()`` calls for ``--seconds``; the baseline, in the same run, is the
bare loop a sampler cannot beat: the same number of sub-envs of the same env stepped with actions
drawn beforehand, resetting each sub-env when ``"__all__"`` ends it, nothing recorded. The ratio
runner / bare is the goal's figure (>= 0.8). RLlib 2.60's MultiAgentEnvRunner runs in its own
interpreter (``bench/rllib_multi_agent.py``, found at ``.venv-rllib`` or ``--rllib-python``) on the
same envs, number of sub-envs and random actions; the ratio ray-sampler / RLlib is the second goal
(>= 10x). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from bench_common import ROOT, run_json

sys.path.insert(0, str(ROOT))
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def make_cartpole2(config: dict[str, Any]) -> Any:
    from ray_sampler.sampling.multi_agent_env import make_multi_agent

    return make_multi_agent("CartPole-v1", num_agents=2)(config)


def make_spread(config: dict[str, Any]) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, max_cycles=25)


ENVS = {"cartpole2": make_cartpole2, "simple_spread": make_spread}


def bare_steps_per_s(name: str, num_envs: int, seconds: float) -> float:
    """Env steps/s of ``num_envs`` sub-envs stepped in a plain loop with pre-drawn actions."""
    import numpy as np

    from ray_sampler.sampling.pettingzoo_env import wrap_pettingzoo

    envs = [wrap_pettingzoo(ENVS[name]({})) for _ in range(num_envs)]
    rng = np.random.default_rng(0)
    acting = [list(env.reset(seed=i)[0]) for i, env in enumerate(envs)]  # agents that act next
    spaces = {a: envs[0].get_action_space(a) for a in envs[0].possible_agents}
    table = {a: rng.integers(0, s.n, 4096) for a, s in spaces.items()}
    steps, k = 0, 0
    t0 = time.perf_counter()
    while True:
        for i, env in enumerate(envs):
            actions = {a: int(table[a][k % 4096]) for a in acting[i]}
            o, _, term, trunc, _ = env.step(actions)
            if term["__all__"] or trunc["__all__"]:
                acting[i] = list(env.reset()[0])
            else:
                acting[i] = [a for a in o if not (term.get(a) or trunc.get(a))]
        steps += num_envs
        k += 1
        if k % 64 == 0 and time.perf_counter() - t0 >= seconds:
            return steps / (time.perf_counter() - t0)


def runner_steps_per_s(name: str, num_envs: int, seconds: float) -> dict[str, float]:
    from ray_sampler.modules import RandomModule
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
    from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner

    multi = (
        MultiAgentConfig(policies=("p0", "p1"), policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
        if name == "cartpole2"
        else MultiAgentConfig()
    )
    config = EnvRunnerConfig(
        env=ENVS[name], num_envs_per_env_runner=num_envs, rollout_fragment_length=128,
        module_class=RandomModule, multi_agent=multi,
    )  # fmt: skip
    runner = MultiAgentEnvRunner(config)
    runner.sample()  # warm-up
    steps = agent_steps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        episodes = runner.sample()
        steps += sum(len(e) for e in episodes)
        agent_steps += sum(e.agent_steps() for e in episodes)
    elapsed = time.perf_counter() - t0
    runner.stop()
    return {"env_steps_per_s": steps / elapsed, "agent_steps_per_s": agent_steps / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--num-envs", type=int, default=8)
    default_rllib = ROOT / ".venv-rllib" / "bin" / "python"
    parser.add_argument("--rllib-python", default=str(default_rllib) if default_rllib.exists() else None)
    args = parser.parse_args()
    rllib = None
    if args.rllib_python:
        cmd = [args.rllib_python, str(ROOT / "bench" / "rllib_multi_agent.py"), "--seconds", str(args.seconds)]
        rllib = run_json([*cmd, "--num-envs", str(args.num_envs)])
    results: dict[str, Any] = {}
    print(f"{'env':14s} {'bare env st/s':>14s} {'runner env st/s':>16s} {'runner/bare':>12s} "
          f"{'RLlib env st/s':>15s} {'ours/RLlib':>11s}")  # fmt: skip
    for name in ENVS:
        bare = bare_steps_per_s(name, args.num_envs, args.seconds)
        ours = runner_steps_per_s(name, args.num_envs, args.seconds)
        theirs = (rllib or {}).get(name)
        results[name] = {"bare": bare, **ours, "rllib": theirs, "ratio_bare": ours["env_steps_per_s"] / bare}
        if theirs:
            results[name]["ratio_rllib"] = ours["env_steps_per_s"] / theirs
        rl = f"{theirs:15.0f} {ours['env_steps_per_s'] / theirs:10.1f}x" if theirs else f"{'-':>15s} {'-':>11s}"
        print(f"{name:14s} {bare:14.0f} {ours['env_steps_per_s']:16.0f} {ours['env_steps_per_s'] / bare:12.2f} {rl}")
    print(json.dumps({"num_envs": args.num_envs, "seconds": args.seconds, "results": results}))


if __name__ == "__main__":
    main()
