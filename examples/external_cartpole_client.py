"""A simulator outside Ray: CartPole played by clients that ask an external env runner for actions.

Start the server first (it trains PPO on what the clients send), then this script:

    ray-sampler train --env external --external.spaces-from CartPole-v1
    python examples/external_cartpole_client.py --clients 8

Each client is a thread with its own connection and CartPole. ``--inference remote`` (the
default) asks the server for every action; ``--inference local`` pulls the weights, acts here and
sends its steps in batches. It plays until the server goes away or ``--episodes`` are done, and
prints one line per 100 episodes. It imports only ``ray_sampler.client`` (numpy and the standard
library) and gymnasium, never Ray.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading

import gymnasium as gym

from ray_sampler.client import PolicyClient, ServerError


@dataclasses.dataclass
class Args:
    address: str = "127.0.0.1:9900"
    """Where the first runner listens (``host:port``)."""
    clients: int = 8
    """Clients, each with its own connection and env."""
    inference: str = "remote"
    """remote: the server acts; local: the client acts with the server's weights."""
    episodes: int = 0
    """Episodes per client (0: until the server goes away)."""
    token: str | None = None
    """The server's token, when it asks for one."""
    runners: int = 1
    """Runners listening on consecutive ports from ``address``'s: clients are spread over them."""
    connect_timeout_s: float = 120.0
    """How long a client tries to reach a server that is still starting (afterwards: 5 s to find
    it again once it went away)."""


def play(args: Args, index: int, finished: list[float], lock: threading.Lock, failed: list[int]) -> None:
    host, port = args.address.rsplit(":", 1)
    address = f"{host}:{int(port) + index % args.runners}"
    env = gym.make("CartPole-v1")
    try:
        client = PolicyClient(
            address, inference=args.inference, token=args.token, connect_timeout_s=args.connect_timeout_s,
            reconnect_timeout_s=5.0, seed=index, observation_space=env.observation_space,
            action_space=env.action_space,  # checked by the server, or its spaces if it was given none
        )  # fmt: skip
    except OSError as e:
        print(f"client {index}: cannot connect to {address} ({e})", flush=True)
        return
    episode = 0
    try:
        while not args.episodes or episode < args.episodes:
            obs, _ = env.reset(seed=1000 * index + episode)
            episode_id = client.start_episode()
            total = 0.0
            while True:
                action = client.get_action(episode_id, obs)
                obs, reward, terminated, truncated, _ = env.step(int(action))
                client.log_returns(episode_id, float(reward))
                total += float(reward)
                if terminated or truncated:
                    client.end_episode(episode_id, obs, truncated=truncated and not terminated)
                    break
            episode += 1
            with lock:
                finished.append(total)
                if len(finished) % 100 == 0:
                    print(
                        f"{len(finished)} episodes, mean return of the last 100: {sum(finished[-100:]) / 100:.1f}",
                        flush=True,
                    )
        client.close()
    except (ConnectionError, OSError):
        print(f"client {index}: the server went away after {episode} episodes", flush=True)
    except ServerError as e:  # the server refused a message: this client's bug, said in one line
        print(f"client {index}: the server answered: {e}", flush=True)
        failed.append(index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Args):
        parser.add_argument(
            f"--{field.name}", type=type(field.default) if field.default is not None else str, default=field.default
        )
    args = Args(**vars(parser.parse_args()))
    finished: list[float] = []
    failed: list[int] = []
    lock = threading.Lock()
    threads = [threading.Thread(target=play, args=(args, i, finished, lock, failed)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tail = finished[-100:]
    print(f"done: {len(finished)} episodes, mean return of the last {len(tail)}: {sum(tail) / max(len(tail), 1):.1f}")
    if failed:
        raise SystemExit(f"clients {sorted(failed)} failed")


if __name__ == "__main__":
    main()
