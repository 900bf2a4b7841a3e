"""Sample Pong with a CNN policy and train it with PPO, in this process (no Ray): the ``atari`` extra.

    pip install "ray-sampler[atari,torch]"
    python examples/atari_pong.py [--vectorization-mode vector_entry_point] [--iterations 3]

``atari_env("ALE/Pong-v5")`` names ``ray_sampler/Pong-v5``: ALE's Pong with the standard
preprocessing (frame skip 4, up to 30 noops at reset, 84x84 grayscale), one uint8 frame per
step and no frame stacking. ``"sync"`` steps single envs; ``"vector_entry_point"`` steps ALE's
own C++ vector env set to the same preprocessing. ``TorchCNNModule`` (the Nature-DQN encoder)
takes the frames as uint8 and scales them inside, so episodes and train batches keep one byte per
pixel. Each iteration samples ``num_envs x rollout_fragment_length`` steps and runs one PPO
update on them; Pong needs millions of steps to learn, so the returns here stay near -21.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from learner.learner import PPOConfig
from learner.torch_learner import TorchPPOLearner
from ray_sampler import EnvRunner, EnvRunnerConfig
from ray_sampler.cli import parse
from ray_sampler.envs import atari_env
from ray_sampler.modules.torch_cnn import TorchCNNModule


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    game: str = "ALE/Pong-v5"
    """ALE v5 id of the game (``atari_env`` turns it into the preprocessed id)."""
    vectorization_mode: str = "sync"
    """``sync`` (single envs) or ``vector_entry_point`` (ALE's own vector env)."""
    num_envs: int = 4
    """Sub-envs the runner steps."""
    rollout_fragment_length: int = 128
    """Steps per sub-env in each iteration."""
    iterations: int = 3
    """Sample-and-update iterations."""
    seed: int = 0
    """Seed of the sub-envs, the module's weights and the learner."""


def main(args: Args) -> None:
    env_id = atari_env(args.game)  # a one-line error with the install line where ale-py is missing
    runner = EnvRunner(
        EnvRunnerConfig(
            env=env_id,
            vectorization_mode=args.vectorization_mode,
            num_envs_per_env_runner=args.num_envs,
            rollout_fragment_length=args.rollout_fragment_length,
            module_class=TorchCNNModule,
            module_config={"seed": args.seed},
            seed=args.seed,
        )
    )
    module = TorchCNNModule(runner.observation_space, runner.action_space, seed=args.seed)
    learner = TorchPPOLearner(module, PPOConfig(lr=2.5e-4, num_epochs=1, minibatch_size=128, seed=args.seed))
    print(
        f"{env_id} ({args.vectorization_mode}): {args.num_envs} sub-envs, {runner.action_space.n} actions, "
        f"TorchCNNModule with {sum(p.numel() for p in module.parameters())} parameters"
    )
    total_steps, returns = 0, []
    for it in range(1, args.iterations + 1):
        episodes = runner.sample()
        obs = np.asarray(episodes[0].get_observations())
        rewards = np.asarray(episodes[0].get_rewards())
        num_steps = sum(len(ep) for ep in episodes)
        returns += [ep.get_return() for ep in episodes if ep.is_done]
        metrics = learner.update_from_episodes(episodes)
        runner.module.set_state(learner.module.get_state())
        total_steps += num_steps
        print(
            f"iter {it}: {num_steps} env steps, observations {obs.dtype} {obs.shape[1:]} per step, "
            f"rewards {rewards.dtype}, {len(returns)} episodes finished, PPO batch {metrics.batch_size}, "
            f"entropy {metrics.entropy:.3f}"
        )
    frame_bytes = int(np.prod(runner.observation_space.shape))
    print(
        f"stored: one uint8 frame per step ({frame_bytes} bytes); "
        f"{total_steps} env steps in {args.iterations} iterations"
    )
    runner.stop()


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/atari_pong.py", description=__doc__ or ""))
