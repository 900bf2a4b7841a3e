"""RLlib end-to-end benchmark: PPO on CartPole-v1 with 2 env runners until a mean return of 450.

    .venv-rllib/bin/python bench/rllib_e2e.py --seed 0 [--max-seconds 600] [--connector-only]

Runs ONLY under RLlib's own interpreter (.venv-rllib); it imports nothing from this project.
RLlib 2.60's default PPO on the new API stack (its default hyperparameters: train batch 4000
env steps per iteration, 1 local learner), ``num_env_runners=2``, seeded with ``--seed``.

Measures:
  seconds            wall clock of the ``algo.train()`` loop until ``episode_return_mean`` >= 450
  whole_s            the same plus ``ray.init`` and ``build_algo``
  env_steps          ``num_env_steps_sampled_lifetime`` at that point
  learner_connector_steps_per_s
                     the algorithm's own learner connector pipeline (``learner._learner_connector``,
                     GAE included) on freshly sampled ~4000-step episode lists, median of 5

Prints exactly one JSON object on the last stdout line; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def connector_throughput(algo: Any, config: Any) -> float:
    """Env steps/s of the learner connector on ~4000-step episode lists (median of 5)."""
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    runner = SingleAgentEnvRunner(config=config.copy(copy_frozen=False).env_runners(num_env_runners=0))
    learner = algo.learner_group._learner  # noqa: SLF001  RLlib has no public handle on its local learner
    rates = []
    try:
        for _ in range(6):
            episodes = runner.sample(num_timesteps=4000, explore=True)
            steps = sum(len(e) for e in episodes)
            t0 = time.perf_counter()
            learner._learner_connector(  # noqa: SLF001  the piece of RLlib this benchmark measures
                rl_module=learner.module, batch={}, episodes=episodes, shared_data={}, metrics=learner.metrics
            )
            rates.append(steps / (time.perf_counter() - t0))
    finally:
        runner.stop()
    return statistics.median(rates[1:])  # the first call pays lazy initialization


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--connector-only", action="store_true")
    args = parser.parse_args()

    t_start = time.perf_counter()
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=2).debugging(seed=args.seed)
    algo = config.build_algo()
    out: dict[str, Any] = {"seed": args.seed, "ray_version": ray.__version__}
    try:
        if not args.connector_only:
            t0 = time.perf_counter()
            mean, steps, iters = float("nan"), 0, 0
            while time.perf_counter() - t0 < args.max_seconds:
                result = algo.train()
                iters += 1
                runners = result["env_runners"]
                mean = runners.get("episode_return_mean", float("nan"))
                steps = result.get("num_env_steps_sampled_lifetime") or runners.get("num_env_steps_sampled_lifetime")
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
        out["learner_connector_steps_per_s"] = connector_throughput(algo, config)
    finally:
        algo.stop()
        ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
