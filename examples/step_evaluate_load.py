"""Step a PPO run with ``Algorithm``, evaluate it greedily, save it, and act with the saved policy anywhere.

    python examples/step_evaluate_load.py --iterations 20 --out cartpole-run

``Algorithm`` (learner/algorithm.py) runs the same loop as ``ray-sampler train``, one iteration per
``train()``. Every ``--evaluate-every`` iterations ``evaluate()`` runs ``--episodes`` greedy episodes
on an evaluation runner of its own (its own seeds; nothing reaches the learner). At the end ``save()``
writes a run checkpoint, which holds the policy; ``Policy.from_checkpoint`` then loads it with no
Ray and plays one CartPole episode with ``compute_single_action``.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import gymnasium as gym
import ray
import tyro

from learner import Algorithm, EvaluationConfig, PPOTrainingConfig
from ray_sampler.policy import Policy


@dataclasses.dataclass(frozen=True)
class Args:
    iterations: int = 20
    """Training iterations (1,024 env steps each)."""
    evaluate_every: int = 5
    """Evaluate after every this many iterations."""
    episodes: int = 5
    """Greedy episodes per evaluation."""
    seed: int = 0
    """Seed of the runners' envs and of the network."""
    out: Path | None = None
    """Where the checkpoint goes (default: a new temporary directory)."""


def main(args: Args) -> float:
    evaluation = EvaluationConfig(evaluation_duration=args.episodes)  # what evaluate() runs
    config = PPOTrainingConfig(max_iterations=args.iterations, target_return=None, evaluation=evaluation)
    config = dataclasses.replace(config, env_runner=dataclasses.replace(config.env_runner, seed=args.seed))
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with Algorithm(config) as algo:
            while not algo.is_done:
                record = algo.train()
                if record.iteration % args.evaluate_every == 0:
                    evaluation = algo.evaluate()
                    print(
                        f"iter {record.iteration}: {record.env_steps} env steps, exploring return "
                        f"{record.return_mean:.1f}, greedy return {evaluation.summary()['episode_return_mean']:.1f} "
                        f"over {evaluation.num_episodes} episodes"
                    )
            checkpoint = algo.save(args.out or Path(tempfile.mkdtemp()))
    finally:
        ray.shutdown()
    print(f"checkpoint: {checkpoint}")

    policy = Policy.from_checkpoint(checkpoint)  # no Ray from here on
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=1234)
    state, total, done = None, 0.0, False
    while not done:
        action, state = policy.compute_single_action(obs, state)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + float(reward), terminated or truncated
    print(f"the loaded policy's greedy episode: return {total:.0f}")
    return total


if __name__ == "__main__":
    main(tyro.cli(Args))
