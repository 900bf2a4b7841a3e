"""A small Ray Tune sweep over the learning rate: PPO on CartPole-v1 (or DQN with ``--algo dqn``).

    python examples/tune_ppo_cartpole.py                       # 4 learning rates, 20 iterations each
    python examples/tune_ppo_cartpole.py --algo dqn --budget 3000

Each trial runs what ``ray-sampler train`` (or ``train-dqn``) runs, with its learning rate, in a run
directory under the trial's directory, and reports every metrics.csv row to Tune with a
checkpoint. The sweep prints each trial's learning rate, last mean return and env steps, then the
best trial. About a minute on 2 cores with the defaults.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ray
from ray import tune

from ray_sampler.tune import tuner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=["ppo", "dqn"], default="ppo")
    parser.add_argument("--lrs", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3, 1e-2])
    parser.add_argument("--budget", type=int, default=20, help="iterations (ppo) or env steps (dqn) per trial")
    parser.add_argument("--results", default="tune-results", help="Tune's storage directory")
    args = parser.parse_args()

    lr_key = "ppo.lr" if args.algo == "ppo" else "dqn.lr"
    budget_key = "max_iterations" if args.algo == "ppo" else "max_env_steps"
    space = {
        lr_key: tune.grid_search(args.lrs),
        budget_key: args.budget,
        "env_runner_group.num_env_runners": 1,
        "target_return": "none",
        "checkpoint_every": 1,
    }
    ray.init(log_to_driver=False)  # RAY_ADDRESS, if set, names the cluster; the trials' lines stay in their logs
    results = tuner(
        args.algo,
        space,
        tune_config=tune.TuneConfig(metric="return_mean", mode="max"),
        run_config=tune.RunConfig(storage_path=str(Path(args.results).resolve()), name=args.algo, verbose=0),
    ).fit()
    for result in sorted(results, key=lambda r: r.config[lr_key]):
        saved = "yes" if result.checkpoint is not None else "no"
        print(
            f"{lr_key} {result.config[lr_key]:g}: mean return {result.metrics['return_mean']:.1f} after "
            f"{result.metrics['env_steps']} env steps (checkpoint: {saved})"
        )
    best = results.get_best_result()
    print(f"best: {lr_key} {best.config[lr_key]:g}, mean return {best.metrics['return_mean']:.1f}")


if __name__ == "__main__":
    main()
