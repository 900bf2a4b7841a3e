"""Where a multi-agent runner's time goes on mpe2's simple_spread_v3: cProfile beside a bare loop.

    .venv/bin/python bench/spread_runner_profile.py [--calls 10]

One ``MultiAgentEnvRunner`` (8 sub-envs x 125 steps a call, one module for the 3 agents, as in
bench/multi_agent_spread_ppo.py), in this process, no Ray: ``--calls`` calls of ``sample_columnar()``
timed, then the same number profiled. Baseline in the same run: the same env steps of one
simple_spread stepped bare with random actions. Prints the env steps per second of both, their
ratio, and the profile's top functions by own time and by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from multi_agent_spread_ppo import bare_s, spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
    from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner

    shared = MultiAgentConfig(policies=("shared",), policy_mapping_fn=lambda aid, episode, **kw: "shared")
    config = EnvRunnerConfig(
        env=spread, num_envs_per_env_runner=8, rollout_fragment_length=125, seed=0, multi_agent=shared
    )
    runner = MultiAgentEnvRunner(config)
    runner.sample_columnar()  # warm: the first reset, the modules built
    steps = args.calls * 8 * 125
    t0 = time.perf_counter()
    for _ in range(args.calls):
        runner.sample_columnar()
    run_s = time.perf_counter() - t0
    bare = bare_s(steps)
    print(
        f"runner: {steps} env steps in {run_s:.2f} s ({steps / run_s:.0f}/s); bare loop {bare:.2f} s "
        f"({steps / bare:.0f}/s); runner / bare {run_s / bare:.2f}"
    )
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        runner.sample_columnar()
    profile.disable()
    for key, lines in (("tottime", 25), ("cumulative", 30)):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(key).print_stats(lines)
        print(out.getvalue())


if __name__ == "__main__":
    main()
