"""Train PettingZoo's simple_spread (3 agents cover 3 landmarks) with one PPO policy shared by every agent.

    python examples/pettingzoo_simple_spread.py                        # 100k env steps, about a minute
    python examples/pettingzoo_simple_spread.py --centralized-critic   # MAPPO: the value sees every agent
    python examples/pettingzoo_simple_spread.py --address auto         # on a running cluster

Needs ``pip install 'ray-sampler[pettingzoo]' mpe2``. The env is mpe2's ``simple_spread_v3``
parallel env (25 steps an episode, a time limit: every agent is truncated, so GAE bootstraps
there); ``"pettingzoo:mpe2.simple_spread_v3"`` names it as the command line does. The three agents
share one module, whose batch holds all three agents' steps. A line every 5 iterations, then the
mean return per agent over the last 100 episodes (random play: about -26.5 per agent; RLlib 2.60
reaches about -20.5 after 100k env steps: bench/RESULTS.md).
"""

from __future__ import annotations

import dataclasses
import sys

from learner.learner import PPOConfig
from learner.train import PPOTrainingConfig, train_ppo
from ray_sampler import EnvRunnerConfig, EnvRunnerGroupConfig, MultiAgentConfig
from ray_sampler.cli import parse, ray_cluster


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example (``--address``: see the README's "Run on a cluster")."""

    address: str = ""
    """Ray cluster to attach to: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if set, else
    a Ray started in this process)."""
    env_steps: int = 100_000
    """Env steps to train (2,000 an iteration)."""
    centralized_critic: bool = False
    """MAPPO: the value function reads every agent's observation, the policy its own."""
    seed: int = 0


def main(args: Args) -> float:
    shared = MultiAgentConfig(
        policies=("shared",),
        policy_mapping_fn=lambda agent_id, episode, **kw: "shared",
        centralized_critic=args.centralized_critic,
    )
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env="pettingzoo:mpe2.simple_spread_v3", env_config={"N": 3, "max_cycles": 25},
            num_envs_per_env_runner=8, rollout_fragment_length=125, seed=args.seed, multi_agent=shared,
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5),
        ppo=PPOConfig(seed=args.seed, lr=3e-4, num_epochs=6, minibatch_size=256),
        target_return=None,
        max_iterations=max(args.env_steps // 2000, 1),
    )  # fmt: skip

    def every_fifth(line: str) -> None:
        if not line.startswith("iter ") or int(line.split(":")[0].split()[1]) % 5 == 0:
            print(line, flush=True)

    with ray_cluster(args.address, num_cpus=2):
        result = train_ppo(cfg, log=every_fifth)
    per_agent = result.mean_return / 3
    print(
        f"per agent {per_agent:.2f} over the last 100 episodes after {result.env_steps} env steps in "
        f"{result.seconds:.0f} s (random play: about -26.5)"
    )
    return per_agent


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/pettingzoo_simple_spread.py", description=__doc__ or ""))
