"""RLlib baseline: LSTM PPO on StatelessCartPole until a mean return of 350 (issue #10).

    .venv-rllib/bin/python bench/rllib_lstm.py --seed 0 [--max-seconds 1800] [--max-env-steps 2000000]

Runs ONLY under RLlib's own interpreter (.venv-rllib); it imports nothing from this project.
RLlib 2.60's PPO on the new API stack, configured as its tuned StatelessCartPole example: its
own ``StatelessCartPole`` env class, 3 env runners, a MeanStdFilter env-to-module connector,
``lr=3e-4``, ``num_epochs=6``, ``vf_loss_coeff=0.05``, and the default model with
``use_lstm=True``, ``max_seq_len=20``, ``vf_share_layers=True``; it stops at an
``episode_return_mean`` of 350 or 2M env steps.

Measures (one JSON object on the last stdout line; progress on stderr):
  seconds    wall clock of the ``algo.train()`` loop until the target
  whole_s    the same plus ``ray.init`` and ``build_algo``
  env_steps  ``num_env_steps_sampled_lifetime`` at that point
  returns_100  the mean of the last 100 finished episodes' returns then (the rule our runs stop by;
             RLlib's ``episode_return_mean`` averages one iteration's episodes)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from typing import Any


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--max-env-steps", type=int, default=2_000_000)
    parser.add_argument("--target", type=float, default=350.0)
    args = parser.parse_args()

    t_start = time.perf_counter()
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.examples.envs.classes.stateless_cartpole import StatelessCartPole

    # 3 runners of one CPU each and the learner: at least 4 logical CPUs, however many cores.
    ray.init(
        num_cpus=max(4, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    config = (
        PPOConfig()
        .environment(StatelessCartPole)
        .env_runners(num_env_runners=3, env_to_module_connector=lambda env, spaces=None, device=None: MeanStdFilter())
        .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.05)
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True, use_lstm=True, max_seq_len=20))
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    out: dict[str, Any] = {"seed": args.seed, "ray_version": ray.__version__}
    last_100: deque[float] = deque(maxlen=100)
    try:
        t0 = time.perf_counter()
        mean, steps, iters = float("nan"), 0, 0
        while time.perf_counter() - t0 < args.max_seconds and steps < args.max_env_steps:
            result = algo.train()
            iters += 1
            runners = result["env_runners"]
            mean = runners.get("episode_return_mean", float("nan"))
            steps = result.get("num_env_steps_sampled_lifetime") or runners.get("num_env_steps_sampled_lifetime")
            last_100.extend(runners.get("hist_stats", {}).get("episode_return", []))
            log(f"iter {iters}: {steps} env steps, mean return {mean:.1f}, {time.perf_counter() - t0:.1f} s")
            if mean >= args.target:
                break
        out.update(
            reached=bool(mean >= args.target),
            mean_return=mean,
            env_steps=int(steps),
            iterations=iters,
            seconds=time.perf_counter() - t0,
            whole_s=time.perf_counter() - t_start,
        )
    finally:
        algo.stop()
        ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
