"""Self-play on PettingZoo's tictactoe: a PPO policy learns against a league of its own frozen copies
and a random player, then plays 1,000 games against the random player.

    python examples/tictactoe_self_play.py                      # train, then evaluate
    python examples/tictactoe_self_play.py --iterations 10      # a shorter run
    python examples/tictactoe_self_play.py --address auto       # on a running cluster

Needs ``pip install 'ray-sampler[pettingzoo,torch]'``. The env is PettingZoo's turn-based (AEC)
``tictactoe_v3``: each player observes the board and an ``action_mask`` of the legal moves, so the
modules are action-masking ones (``TorchActionMaskingModule`` learns; ``MaskedRandomModule`` is the
random player): no illegal move is ever drawn. Each episode, module ``main`` plays one side (at
random); the other is the random player in half the episodes, else a frozen copy of ``main``.
Every ``--snapshot-every`` iterations a frozen copy of ``main`` joins the league
(``TrainingLoop.add_frozen_copy``: the learners keep its weights, every runner gets the module and
the new mapping). At the end the greedy policy plays ``--games``
games against a random player of legal moves, half of them moving first, and the script prints the
share it won.
"""

from __future__ import annotations

import dataclasses
import sys
import zlib
from typing import Any

import numpy as np

from learner.learner import PPOConfig
from learner.train import PPOTrainingConfig, TrainingLoop, train_ppo
from ray_sampler import EnvRunnerConfig, EnvRunnerGroupConfig, MultiAgentConfig
from ray_sampler.cli import parse, ray_cluster
from ray_sampler.modules.action_masking import MaskedRandomModule
from ray_sampler.sampling.multi_agent_config import ModuleSpec

ENV = "pettingzoo:classic.tictactoe_v3"
PLAYERS = ("player_1", "player_2")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example (``--address``: see the README's "Run on a cluster")."""

    address: str = ""
    """Ray cluster to attach to: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if set, else
    a Ray started in this process)."""
    iterations: int = 80
    """Training iterations (2 runners x 8 sub-envs x 128 env steps each: 2,048 env steps)."""
    snapshot_every: int = 10
    """Iterations between frozen copies of main joining the league."""
    games: int = 1000
    """Evaluation games against the random player (half with main moving first)."""
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class LeagueMapping:
    """Each episode: main on one side; on the other, the random player in half the episodes, else one
    of the frozen ``copies`` (the random player while there is none). Both are picked by a hash of
    the episode id: the same for both players of an episode, in any runner."""

    copies: tuple[str, ...] = ()

    def __call__(self, agent_id: Any, episode: Any, **kwargs: Any) -> str:
        h = zlib.crc32(str(episode.id_).encode())
        if PLAYERS[h % 2] == agent_id:
            return "main"
        if not self.copies or (h // 2) % 2 == 0:
            return "random"
        return self.copies[(h // 4) % len(self.copies)]


def evaluate(main: Any, games: int, seed: int) -> dict[str, float]:
    """``main`` (greedy) against a random player of legal moves, ``games`` games, half moving first:
    the shares won, drawn and lost, and the win share as first and as second player."""
    from pettingzoo.classic import tictactoe_v3

    rng = np.random.default_rng(seed)
    outcomes = {"first": [], "second": []}  # +1 win, 0 draw, -1 loss
    for game in range(games):
        env = tictactoe_v3.env()
        env.reset(seed=int(rng.integers(2**31)))
        main_player = PLAYERS[game % 2]
        score = 0.0
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if terminated or truncated:
                score = float(reward) if agent == main_player else score  # the game's result for main
                env.step(None)
                continue
            if agent == main_player:
                batch = {"obs": {k: np.asarray(v)[None] for k, v in obs.items()}}
                logits = np.asarray(main.forward_inference(batch)["action_dist_inputs"])[0]
                action = int(np.argmax(logits))  # greedy: the masked logits never pick an illegal move
            else:
                action = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            env.step(action)
        outcomes["first" if main_player == PLAYERS[0] else "second"].append(np.sign(score))
        env.close()
    every = np.array(outcomes["first"] + outcomes["second"])
    return {
        "won": float(np.mean(every > 0)),
        "drawn": float(np.mean(every == 0)),
        "lost": float(np.mean(every < 0)),
        "won_first": float(np.mean(np.array(outcomes["first"]) > 0)),
        "won_second": float(np.mean(np.array(outcomes["second"]) > 0)),
    }


def main(args: Args) -> dict[str, float]:
    from ray_sampler.modules.torch_action_masking import TorchActionMaskingModule

    copies: tuple[str, ...] = ()
    multi_agent = MultiAgentConfig(
        policies={"main": None, "random": ModuleSpec(module_class=MaskedRandomModule, module_config={})},
        policy_mapping_fn=LeagueMapping(copies),
        policies_to_train=("main",),
    )
    cfg = PPOTrainingConfig(
        env_runner=EnvRunnerConfig(
            env=ENV, num_envs_per_env_runner=8, rollout_fragment_length=128, seed=args.seed,
            module_class=TorchActionMaskingModule, module_config={"seed": args.seed}, multi_agent=multi_agent,
        ),
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=2, num_cpus_per_env_runner=0.5),
        ppo=PPOConfig(seed=args.seed, lr=1e-3, entropy_coeff=0.01, num_epochs=6, minibatch_size=256),
        framework="torch",
        target_return=None,
        max_iterations=args.iterations,
    )  # fmt: skip
    modules: dict[str, Any] = {}

    def snapshot(loop: TrainingLoop) -> None:
        nonlocal copies
        if loop.iteration % args.snapshot_every == 0 and loop.iteration < args.iterations:
            copy = f"main_v{loop.iteration // args.snapshot_every}"
            copies = (*copies, copy)
            loop.add_frozen_copy(copy, copy_of="main", policy_mapping_fn=LeagueMapping(copies))
            print(f"iteration {loop.iteration}: {copy} joins the league {['random', *copies]}", flush=True)
        if loop.iteration == args.iterations:
            modules["main"] = loop.learners.get_weights(("main",))["main"]

    with ray_cluster(args.address, num_cpus=2):
        result = train_ppo(cfg, on_train_result=snapshot)
    from ray_sampler.sampling.multi_agent_env_runner import build_multi_rl_module

    main_module = build_multi_rl_module(cfg.env_runner)["main"]
    main_module.set_state(modules["main"])
    scores = evaluate(main_module, args.games, args.seed)
    print(
        f"trained {result.env_steps} env steps in {result.seconds:.0f} s; against a random player over "
        f"{args.games} games: won {scores['won']:.1%}, drew {scores['drawn']:.1%}, lost {scores['lost']:.1%} "
        f"(won {scores['won_first']:.1%} moving first, {scores['won_second']:.1%} moving second)"
    )
    return scores


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/tictactoe_self_play.py", description=__doc__ or ""))
