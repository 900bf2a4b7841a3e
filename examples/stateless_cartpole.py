"""Train a torch LSTM policy with PPO on StatelessCartPole-v1, a task that needs memory.

    python examples/stateless_cartpole.py [--seed 0] [--max-env-steps 300000] [--num-env-runners 3]

StatelessCartPole-v1 (``ray_sampler/envs/stateless_cartpole.py``) is CartPole-v1 with the cart
and pole velocities left out of the observations: one observation cannot tell which way the
pole falls, so a memoryless policy balances it for a few dozen steps at best. The preset of
``learner/presets.py`` trains ``TorchLSTMModule`` (``--framework torch``, needs
``pip install 'ray-sampler[torch]'``): the runners step it one observation at a time, keeping
each sub-env's LSTM state and storing every step's ``state_out`` in its episode; the learner
cuts the episodes into sequences of ``--ppo.max-seq-len`` steps, each starting from the state
stored for the step before it (from the lookback when a chunk continues an episode), and
backpropagates through them. Observations are normalized (``--ppo.observation-filter
mean_std``). It stops once the last 100 episodes average 350 (RLlib's tuned example's target).

The same run from the command line: ``ray-sampler train --env StatelessCartPole-v1``; any flag of
``ray-sampler train`` works here too.
"""

from __future__ import annotations

import sys

import ray

from learner.metrics import PPOTrainResult
from learner.train import PPOTrainingConfig, train_ppo
from ray_sampler.cli.train import TrainPPO, command_from_args


def main(cfg: PPOTrainingConfig) -> PPOTrainResult:
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        module = cfg.env_runner.module_class
        obs_filter = getattr(cfg.ppo.observation_filter, "value", "none")
        framework, name = getattr(cfg.framework, "value", cfg.framework), getattr(module, "__name__", module)
        print(
            f"PPO ({framework}) with {name} on {cfg.env_runner.env}: "
            f"{cfg.env_runner_group.num_env_runners} env runners x {cfg.env_runner.num_envs_per_env_runner} "
            f"sub-envs, sequences of {cfg.ppo.max_seq_len} steps, observation filter {obs_filter}"
        )
        return train_ppo(cfg)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    argv = sys.argv[1:]
    if not any(a == "--env" or a.startswith("--env=") for a in argv):
        argv = ["--env", "StatelessCartPole-v1", *argv]
    main(command_from_args(TrainPPO, argv, prog="examples/stateless_cartpole.py").to_config())
