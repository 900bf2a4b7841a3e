"""Train DQN on CartPole-v1 off-policy: env runners -> ReplayActor -> learners -> weights -> runners.

    python examples/train_cartpole_dqn.py --num-env-runners 2 [--replay.no-prioritized]

The loop lives in ``learner/train_dqn.py`` (``train_dqn``, also behind ``ray-sampler
train-dqn``). Each round the runners send their chunks straight to the ReplayActor (through the
object store, not the driver) and, with ``--env-runner-group.keep-sampling``, sample the next fragment at once;
the LearnerGroup pulls ``--batch-size`` n-step transitions per gradient step from the replay
(one round trip for a round's steps; ``--num-learners`` actors split every batch and average
their gradients) and takes ``--updates-per-env-step`` steps per new env step, copying the target
network every ``--dqn.target-update-every`` steps; with prioritized replay (the default;
``--replay.no-prioritized`` for uniform) they send |TD errors| back as priorities. The weights go to
the runners with the exploration rate of the schedule (epsilon 1 down to ``--epsilon-final``
over ``--epsilon-steps`` env steps). It stops once the mean return of the last ``--stop-window``
(100) finished episodes reaches ``--target-return`` (default: the env's ``reward_threshold``).
At the end it prints how many env steps the replay
received, which equals what the runners reported (nothing lost). The flags (those of
``ray-sampler train-dqn``) compose one DQNTrainingConfig: ``env_runner``, ``env_runner_group``,
``dqn``, ``replay`` and the loop's own batch size, update ratio, exploration schedule and budget.
"""

from __future__ import annotations

import sys

import ray

from learner.metrics import DQNTrainResult
from learner.train_dqn import DQNTrainingConfig, train_dqn
from ray_sampler.cli.train import TrainDQN, command_from_args


def main(cfg: DQNTrainingConfig) -> DQNTrainResult:
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        print(
            f"DQN on {cfg.env_runner.env}: {cfg.env_runner_group.num_env_runners} env runners x "
            f"{cfg.env_runner.num_envs_per_env_runner} sub-envs -> "
            f"{'prioritized' if cfg.replay.prioritized else 'uniform'} replay -> "
            f"{cfg.num_learners or 'one local'} learner(s), seed {cfg.env_runner.seed}"
        )
        result = train_dqn(cfg)
        print(
            f"replay received {result.replay_num_env_steps_received} env steps; "
            f"the runners reported {result.runner_env_steps_sent}"
        )
        return result
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(command_from_args(TrainDQN, sys.argv[1:], prog="examples/train_cartpole_dqn.py").to_config())
