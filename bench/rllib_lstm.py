"""RLlib baseline: LSTM PPO on StatelessCartPole until a mean return of 350 (issue #10).

    .venv-rllib/bin/python bench/rllib_lstm.py --seed 0 [--max-seconds 1800] [--max-env-steps 2000000]

Runs ONLY under RLlib's own interpreter (.venv-rllib); it imports nothing from this project.
RLlib 2.60's PPO on the new API stack, configured as its tuned StatelessCartPole example: its
own ``StatelessCartPole`` env class, 3 env runners, a MeanStdFilter env-to-module connector,
``lr=3e-4``, ``num_epochs=6``, ``vf_loss_coeff=0.05``, and the default model with
``use_lstm=True``, ``max_seq_len=20``, ``vf_share_layers=True``; it stops at an
``episode_return_mean`` of 350 or 2M env steps. With ``--until-100`` it keeps training past that
until the mean of the last 100 finished episodes also reaches 350 (the rule our runs stop by), or
``--max-env-steps``. Its env class has no time limit (episodes run past 500 steps);
``--max-episode-steps 500`` wraps it in gymnasium's ``TimeLimit`` as CartPole-v1 and ours are.

What ``episode_return_mean`` averages (RLlib 2.60 source): each EnvRunner logs every finished
episode's return into a mean with a window of ceil(metrics_num_episodes_for_smoothing (100) /
num_env_runners) = 34 (env/single_agent_env_runner.py ``_log_episode_metrics``); its
``get_metrics()``, called after each ``sample()``, reduces that to the mean of its (at most 34
latest) episodes finished since the last call and clears it (utils/metrics/stats/mean.py
``reduce``); the algorithm merges the runners' means (PPO ``training_step``:
``metrics.aggregate``) and ``compile()`` at the iteration's end takes their plain mean and clears
it. So: one iteration's finished episodes, as an unweighted mean of the per-runner means.

Measures (one JSON object on the last stdout line; progress on stderr):
  seconds    wall clock of the ``algo.train()`` loop until the target
  whole_s    the same plus ``ray.init`` and ``build_algo``
  env_steps  ``num_env_steps_sampled_lifetime`` at that point
  returns_100  the mean of the last 100 finished episodes' returns then (the rule our runs stop by)
  env_steps_100  with ``--until-100``: the env steps at the end of the first iteration where the last
             100 finished episodes average >= the target (None: not within the budget)
  iterations_log  per iteration: env steps, RLlib's episode_return_mean, the number of finished
             episodes, their pooled mean, the mean of the per-runner means recomputed from them
             (each runner's last 34; a check of the reading above) and the 100-episode mean
The finished episodes' returns come from an ``on_episode_end`` callback (the episode's return plus
its earlier chunks', as RLlib's own metrics count it), logged per runner as an ``item_series``.
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


RETURNS_KEY = "bench_episode_returns"


def on_episode_end(
    *, episode: Any, prev_episode_chunks: Any = None, env_runner: Any, metrics_logger: Any, **_: Any
) -> None:
    """Logs (runner index, whole return) of each finished episode, as RLlib's metrics count it."""
    ret = float(episode.get_return()) + sum(float(c.get_return()) for c in prev_episode_chunks or [])
    metrics_logger.log_value(RETURNS_KEY, (int(env_runner.worker_index or 0), ret), reduce="item_series")


def _items(value: Any) -> list[tuple[int, float]]:
    """The compiled item series: a list of (runner, return), one item unwrapped, none NaN or []."""
    if isinstance(value, tuple):
        return [value]
    if isinstance(value, list):
        return [tuple(v) for v in value]
    return []


def _mean_of_runner_means(items: list[tuple[int, float]], window: int) -> float:
    by_runner: dict[int, list[float]] = {}
    for runner, ret in items:
        by_runner.setdefault(runner, []).append(ret)
    means = [sum(r[-window:]) / len(r[-window:]) for r in by_runner.values()]
    return sum(means) / len(means) if means else float("nan")


def start_ray() -> None:
    """``ray.init`` for the example: 3 runners of one CPU each and the learner need at least 4
    logical CPUs, however many cores."""
    import ray

    ray.init(
        num_cpus=max(4, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False, configure_logging=False
    )


def tuned_config(seed: int, max_episode_steps: int | None = None) -> Any:
    """RLlib's tuned StatelessCartPole LSTM PPO example's config (its env in a ``TimeLimit`` of
    ``max_episode_steps`` if given; RLlib's own has none)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.examples.envs.classes.stateless_cartpole import StatelessCartPole

    env: Any = StatelessCartPole
    if max_episode_steps is not None:
        from gymnasium.wrappers import TimeLimit
        from ray.tune.registry import register_env

        register_env("StatelessCartPoleTimeLimit", lambda cfg: TimeLimit(StatelessCartPole(cfg), max_episode_steps))
        env = "StatelessCartPoleTimeLimit"
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=3, env_to_module_connector=lambda env, spaces=None, device=None: MeanStdFilter())
        .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.05)
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True, use_lstm=True, max_seq_len=20))
        .debugging(seed=seed)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--max-env-steps", type=int, default=2_000_000)
    parser.add_argument("--target", type=float, default=350.0)
    parser.add_argument("--until-100", action="store_true", help="go on until the 100-episode mean reaches the target")
    parser.add_argument(
        "--max-episode-steps",
        type=int,
        default=None,
        help="wrap RLlib's env in gymnasium's TimeLimit (500: CartPole-v1's horizon, which ours keeps)",
    )
    args = parser.parse_args()

    t_start = time.perf_counter()
    import ray

    start_ray()
    config = tuned_config(args.seed, args.max_episode_steps).callbacks(on_episode_end=on_episode_end)
    algo = config.build_algo()
    out: dict[str, Any] = {
        "seed": args.seed,
        "ray_version": ray.__version__,
        "max_episode_steps": args.max_episode_steps,
    }
    last_100: deque[float] = deque(maxlen=100)
    try:
        t0 = time.perf_counter()
        mean, steps, iters = float("nan"), 0, 0
        rllib_rule: dict[str, Any] | None = None
        steps_100: int | None = None
        window = -(-config.metrics_num_episodes_for_smoothing // config.num_env_runners)
        log_rows: list[list[Any]] = []
        while time.perf_counter() - t0 < args.max_seconds and steps < args.max_env_steps:
            result = algo.train()
            iters += 1
            runners = result["env_runners"]
            mean = runners.get("episode_return_mean", float("nan"))
            steps = result.get("num_env_steps_sampled_lifetime") or runners.get("num_env_steps_sampled_lifetime")
            items = _items(runners.get(RETURNS_KEY))
            last_100.extend(r for _, r in items)
            mean_100 = sum(last_100) / len(last_100) if last_100 else float("nan")
            pooled = sum(r for _, r in items) / len(items) if items else float("nan")
            recomputed = _mean_of_runner_means(items, window)
            log_rows.append(
                [
                    int(steps),
                    round(float(mean), 2),
                    len(items),
                    round(pooled, 2),
                    round(recomputed, 2),
                    round(mean_100, 2),
                ]
            )
            log(
                f"iter {iters}: {steps} env steps, mean return {mean:.1f} (recomputed {recomputed:.1f}, pooled"
                f" {pooled:.1f}, {len(items)} episodes), last 100: {mean_100:.1f}, {time.perf_counter() - t0:.1f} s"
            )
            if rllib_rule is None and mean >= args.target:
                rllib_rule = {
                    "reached": True,
                    "mean_return": mean,
                    "env_steps": int(steps),
                    "iterations": iters,
                    "seconds": time.perf_counter() - t0,
                    "whole_s": time.perf_counter() - t_start,
                    "returns_100": mean_100,
                }
            if steps_100 is None and len(last_100) >= 100 and mean_100 >= args.target:
                steps_100 = int(steps)
            if rllib_rule is not None and (not args.until_100 or steps_100 is not None):
                break
        if rllib_rule is None:
            rllib_rule = {
                "reached": False,
                "mean_return": mean,
                "env_steps": int(steps),
                "iterations": iters,
                "seconds": time.perf_counter() - t0,
                "whole_s": time.perf_counter() - t_start,
                "returns_100": sum(last_100) / len(last_100) if last_100 else float("nan"),
            }
        out.update(rllib_rule)
        out.update(
            env_steps_100=steps_100,
            env_steps_run=int(steps),
            iterations_run=iters,
            runner_window=window,
            iterations_log=log_rows,
        )
    finally:
        algo.stop()
        ray.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
