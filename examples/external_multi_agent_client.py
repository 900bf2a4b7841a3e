"""A multi-agent simulator outside Ray: two CartPoles per episode, one agent each, played through an
external env runner that serves ``ma-cartpole:2``'s spaces.

    ray-sampler train --env external --external.spaces-from ma-cartpole:2
    python examples/external_multi_agent_client.py --clients 4

Each client sends ``{agent: observation}`` for the agents still balancing and gets ``{agent:
action}`` back; an agent whose pole fell sends its last observation with ``terminateds`` and leaves
the episode, which ends with the last agent's. Only
``ray_sampler.client`` and gymnasium are imported, never Ray.
"""

from __future__ import annotations

import argparse
import threading

import gymnasium as gym

from ray_sampler.client import PolicyClient, ServerError


def play(
    address: str, index: int, episodes: int, returns: list[float], lock: threading.Lock, failed: list[int]
) -> None:
    try:
        client = PolicyClient(address, connect_timeout_s=120.0, reconnect_timeout_s=5.0)
    except OSError as e:
        print(f"client {index}: cannot connect to {address} ({e})", flush=True)
        return
    envs = {"0": gym.make("CartPole-v1"), "1": gym.make("CartPole-v1")}
    k = 0
    try:
        while not episodes or k < episodes:
            obs = {agent: env.reset(seed=1000 * index + 10 * k + int(agent))[0] for agent, env in envs.items()}
            episode_id = client.start_episode()
            total = 0.0
            done: dict[str, bool] = {}
            while len(done) < len(envs):
                actions = client.get_action(episode_id, obs, terminateds=done or None)
                rewards, obs, done = {}, {}, {}
                for agent, action in actions.items():
                    o, reward, terminated, truncated, _ = envs[agent].step(int(action))
                    rewards[agent], obs[agent] = float(reward), o
                    if terminated or truncated:
                        done[agent] = True  # its last observation goes with the flag: it gets no action
                client.log_returns(episode_id, rewards)
                total += sum(rewards.values())
                if len(done) == len(obs):  # every agent still playing ended in this step
                    break
            client.end_episode(episode_id, obs)
            k += 1
            with lock:
                returns.append(total)
                if len(returns) % 50 == 0:
                    print(
                        f"{len(returns)} episodes, mean return of the last 50: {sum(returns[-50:]) / 50:.1f}",
                        flush=True,
                    )
        client.close()
    except (ConnectionError, OSError):
        print(f"client {index}: the server went away after {k} episodes", flush=True)
    except ServerError as e:  # the server refused a message: this client's bug, said in one line
        print(f"client {index}: the server answered: {e}", flush=True)
        failed.append(index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1:9900")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=0, help="per client (0: until the server goes away)")
    args = parser.parse_args()
    returns: list[float] = []
    failed: list[int] = []
    lock = threading.Lock()
    threads = [
        threading.Thread(target=play, args=(args.address, i, args.episodes, returns, lock, failed))
        for i in range(args.clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"done: {len(returns)} episodes")
    if failed:
        raise SystemExit(f"clients {sorted(failed)} failed")


if __name__ == "__main__":
    main()
