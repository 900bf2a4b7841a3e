"""Train PPO on CartPole-v1: env runners sample, learners update, weights go back to the runners.

    python examples/train_cartpole.py --num-env-runners 2 --num-learners 0

The loop lives in ``learner/train.py`` (``train_ppo``, also behind ``ray-sampler train``), in
three steps per iteration: the EnvRunnerGroup samples (truncate mode: every runner returns
exactly ``rollout_fragment_length x num_envs_per_env_runner`` steps); the LearnerGroup runs the
learner pipeline (GAE across chunk cuts) and PPO's minibatch epochs, on one local learner or
``--num-learners`` actors in lockstep; the new weights go to every runner with one
``ray.put``. It stops once the mean return of the last ``--stop-window`` (100) finished
episodes reaches ``--target-return`` (default: the env's ``reward_threshold``, 475 for
CartPole-v1). This script starts the local Ray cluster and reads the knobs (the flags of
``ray-sampler train``), which compose one PPOTrainingConfig: the runner's config
(``env_runner``), the fleet's (``env_runner_group``), PPO's (``ppo``) and the loop's own budget.
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
        print(
            f"PPO on {cfg.env_runner.env}: {cfg.env_runner_group.num_env_runners} env runners x "
            f"{cfg.env_runner.num_envs_per_env_runner} sub-envs, {cfg.num_learners or 'one local'} learner(s), "
            f"seed {cfg.env_runner.seed}"
        )
        return train_ppo(cfg)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(command_from_args(TrainPPO, sys.argv[1:], prog="examples/train_cartpole.py").to_config())
