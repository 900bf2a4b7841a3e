"""What limits the runners' utilization in the asynchronous loop: requests in flight, fragment size,
broadcast interval.

    .venv/bin/python bench/async_utilization.py [--env-steps 60000]

One Ray session (2 CPUs), 2 env runners x 4 CartPole-v1 sub-envs, ``train_ppo`` with
``optimizer="async_samples"`` (APPO, 4 epochs) for a fixed number of env steps and no target, once
per setting. Prints per setting: seconds, runner utilization (the runners' sampling time over
2 x the loop's seconds), the learner's update and its wait for the next fragment (ms per update),
env steps per second sampled, and the largest policy lag. Then what one runner call costs beside
its sampling: a remote ``collect`` round trip against its own ``duration_s``, an empty actor call,
and a ``set_state`` of the weights. Baseline in the same run: CartPole-v1 stepped bare.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from bench_common import ROOT, raw_stepping_s

SETTINGS = [  # (requests in flight per runner, steps per sub-env per fragment, broadcast interval)
    (1, 64, 1),
    (2, 64, 1),
    (2, 64, 4),
    (2, 64, 16),
    (2, 256, 1),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-steps", type=int, default=60_000)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import ray

    from learner.learner import PPOConfig
    from learner.optimizers import AsyncSamplesConfig
    from learner.train import PPOTrainingConfig, train_ppo
    from ray_sampler.sampling.config import EnvRunnerConfig
    from ray_sampler.sampling.env_runner import EnvRunner
    from ray_sampler.sampling.request import SampleRequest

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    base = PPOTrainingConfig(target_return=None, optimizer="async_samples", ppo=PPOConfig(num_epochs=4))
    print("in flight  fragment  broadcast  seconds  utilization  update ms  wait ms  env steps/s  max lag")
    for depth, length, interval in SETTINGS:
        cfg = dataclasses.replace(
            base,
            env_runner=dataclasses.replace(base.env_runner, rollout_fragment_length=length),
            max_iterations=max(1, args.env_steps // (length * 4)),
            async_samples=AsyncSamplesConfig(max_requests_in_flight_per_env_runner=depth, broadcast_interval=interval),
        )
        t0 = time.perf_counter()
        result = train_ppo(cfg, log=lambda line: None)
        seconds = time.perf_counter() - t0
        print(
            f"{depth:>9}  {length * 4:>8}  {interval:>9}  {seconds:>7.1f}  {result.runner_utilization:>11.2f}  "
            f"{result.update_s / result.iterations * 1e3:>9.1f}  {result.sample_s / result.iterations * 1e3:>7.1f}  "
            f"{result.num_env_steps_sampled / seconds:>11.0f}  {max(result.policy_lags):>7}",
            flush=True,
        )
    runner_config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=64)
    runner = ray.remote(EnvRunner).options(num_cpus=0.5).remote(runner_config, worker_index=1, num_workers=1)
    request = SampleRequest()
    ray.get(runner.collect.remote(request))
    n, durations = 100, 0.0
    t0 = time.perf_counter()
    for _ in range(n):
        durations += ray.get(runner.collect.remote(request))[1].duration_s
    round_trip = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        ray.get(runner.ping.remote())
    empty = (time.perf_counter() - t0) / n
    weights = ray.put({"module": ray.get(runner.get_state.remote())["module"]})
    t0 = time.perf_counter()
    for _ in range(n):
        ray.get(runner.set_state.remote(weights))
    set_state = (time.perf_counter() - t0) / n
    print(
        f"one 256-step collect: {round_trip * 1e3:.1f} ms round trip, {durations / n * 1e3:.1f} ms of it sampling; "
        f"an empty call {empty * 1e3:.1f} ms; set_state of the weights {set_state * 1e3:.1f} ms"
    )
    ray.shutdown()
    bare = raw_stepping_s("CartPole-v1", args.env_steps, num_envs=4)
    print(f"baseline: {args.env_steps} env steps of CartPole-v1 stepped bare (4 sub-envs, one process): {bare:.1f} s")


if __name__ == "__main__":
    main()
