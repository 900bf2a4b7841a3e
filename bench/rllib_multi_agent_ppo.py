"""RLlib's MultiAgentCartPole PPO (its tuned example's settings) to a summed return of 800.

    .venv-rllib/bin/python bench/rllib_multi_agent_ppo.py [--seed 0] [--max-env-steps 300000]

Runs ONLY under RLlib's own interpreter (.venv-rllib); it imports nothing from this project.
RLlib 2.60's ``tuned_examples/ppo/multi_agent_cartpole_ppo.py``: 2 agents, a policy each, fcnet
[32] linear, vf_share_layers, lr 3e-4, 6 epochs, vf_loss_coeff 0.01; one remote env runner, 4,000
env steps per iteration (``train_batch_size_per_learner``). Stops when ``episode_return_mean``
(summed over agents) reaches 800 or at ``--max-env-steps``. Prints one JSON object on the last
stdout line: env steps, wall seconds from ``ray.init`` and the return reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-env-steps", type=int, default=300_000)
    args = parser.parse_args()
    t0 = time.perf_counter()
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.multi_agent_env import make_multi_agent
    from ray.tune.registry import register_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    register_env("ma_cartpole", lambda cfg: make_multi_agent("CartPole-v1")({"num_agents": 2}))
    config = (
        PPOConfig()
        .environment("ma_cartpole")
        .env_runners(num_env_runners=1)
        .training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01, train_batch_size_per_learner=4000)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True))
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, episode, **kw: f"p{aid}")
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    steps, ret = 0, float("nan")
    while steps < args.max_env_steps:
        result = algo.train()
        steps = int(result["num_env_steps_sampled_lifetime"])
        ret = float(result["env_runners"].get("episode_return_mean", float("nan")))
        print(
            f"[rllib] {steps} env steps, return {ret:.1f}, {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if ret >= 800:
            break
    algo.stop()
    print(json.dumps({"env_steps": steps, "wall_s": time.perf_counter() - t0, "return": ret, "reached": ret >= 800}))


if __name__ == "__main__":
    main()
