"""Sample a multi-agent env with remote env runners: PettingZoo's tic-tac-toe or MPE's simple_spread, or CartPole x 2.

    pip install -e ".[pettingzoo]"
    python examples/multi_agent_sample.py --env tictactoe --iterations 3
    python examples/multi_agent_sample.py --env simple_spread --address auto    # on a running cluster

Each player (or agent) gets its own module (``--shared`` maps them all to one), each module acts
with one batched forward pass over all its agents in all sub-envs, and every iteration prints the
env and agent steps and the episodes finished. At the end the chunks of each episode are joined
(they make whole episodes again) and the mean return of each agent and module is printed.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from ray_sampler import EnvRunnerConfig, EnvRunnerGroup, EnvRunnerGroupConfig, MultiAgentConfig, make_multi_agent
from ray_sampler.cli import parse, ray_cluster

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # PettingZoo imports pygame, which wants a display


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example (``--address``: see the README's "Run on a cluster")."""

    address: str = ""
    """Ray cluster to attach to: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if set, else
    a Ray started in this process)."""
    env: str = "tictactoe"
    """tictactoe (PettingZoo AEC, turn-based), simple_spread (MPE, Parallel) or cartpole2."""
    shared: bool = False
    """One module for every agent instead of one each."""
    iterations: int = 3
    num_env_runners: int = 2
    num_envs_per_env_runner: int = 4
    rollout_fragment_length: int = 50


def make_env(config: dict) -> object:
    """The env named by ``config["name"]`` (a creator: each runner builds its own sub-envs)."""
    if config["name"] == "tictactoe":
        from pettingzoo.classic import tictactoe_v3
        from pettingzoo.utils.env_logger import EnvLogger

        EnvLogger.suppress_output()  # random players make illegal moves (the game ends, the mover loses)
        return tictactoe_v3.env()
    if config["name"] == "simple_spread":
        from mpe2 import simple_spread_v3

        return simple_spread_v3.parallel_env(N=3, max_cycles=25)
    return make_multi_agent("CartPole-v1", num_agents=2)({})


AGENTS = {
    "tictactoe": ["player_1", "player_2"],
    "simple_spread": ["agent_0", "agent_1", "agent_2"],
    "cartpole2": [0, 1],
}


def main(args: Args) -> None:
    if args.env not in AGENTS:
        raise SystemExit(f"--env must be one of {sorted(AGENTS)} (got {args.env!r})")
    modules = ("shared",) if args.shared else tuple(f"m_{a}" for a in AGENTS[args.env])
    config = EnvRunnerConfig(
        env=make_env,
        env_config={"name": args.env},
        num_envs_per_env_runner=args.num_envs_per_env_runner,
        rollout_fragment_length=args.rollout_fragment_length,
        multi_agent=MultiAgentConfig(
            policies=modules,
            policy_mapping_fn=lambda aid, episode, **kw: "shared" if args.shared else f"m_{aid}",
        ),
    )
    group_config = EnvRunnerGroupConfig(num_env_runners=args.num_env_runners, num_cpus_per_env_runner=0.25)
    chunks = []
    with (
        ray_cluster(args.address, num_cpus=args.num_env_runners) as where,
        EnvRunnerGroup(config, group_config) as group,
    ):
        print(f"sampling {args.env} with {args.num_env_runners} runners on a {where}; modules {list(modules)}")
        for it in range(1, args.iterations + 1):
            episodes = group.sample()
            chunks += episodes
            m = group.metrics
            agent_steps = sum(ep.agent_steps() for ep in episodes)
            print(f"iter {it}: {m.num_env_steps} env steps, {agent_steps} agent steps, {m.num_episodes} episodes done")
    whole: dict = {}
    for c in chunks:
        if c.id_ in whole:
            whole[c.id_].concat_episode(c)
        else:
            whole[c.id_] = c
    done = [ep for ep in whole.values() if ep.is_done]
    for aid in AGENTS[args.env]:
        returns = [ep.agent_episodes[aid].get_return() for ep in done if aid in ep.agent_episodes]
        mean = sum(returns) / len(returns) if returns else float("nan")
        print(f"agent {aid}: {len(returns)} episodes, mean return {mean:.2f}")
    for mid in modules:  # a module's return in an episode sums all the agents it acted for
        returns = [
            sum(sa.get_return() for a, sa in ep.agent_episodes.items() if ep.module_for(a) == mid) for ep in done
        ]
        mean = sum(returns) / len(returns) if returns else float("nan")
        print(f"module {mid}: mean return {mean:.2f} over {len(returns)} episodes")
    print(f"{len(chunks)} chunks joined into {len(whole)} episodes, {len(done)} finished")


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/multi_agent_sample.py", description=__doc__ or ""))
