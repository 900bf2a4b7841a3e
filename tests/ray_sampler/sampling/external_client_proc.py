"""A CartPole simulator in a process of its own, playing through ``PolicyClient`` (the tests' client).

    python -m tests.ray_sampler.sampling.external_client_proc --address HOST:PORT --episodes 3 --seed 0
        [--inference remote|local] [--token T] [--hold]

Prints one JSON line: the returns and lengths of the episodes it finished and, with ``--log-actions``,
remote inference where the simulator picks its own actions (``log_action``). With ``--hold`` it
prints ``started`` once its last episode is under way and then waits for stdin to close (so a test
can kill it mid-episode). Imports no Ray.
"""

from __future__ import annotations

import argparse
import json
import sys

import gymnasium as gym

from ray_sampler.client import PolicyClient


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inference", default="remote")
    parser.add_argument("--token", default=None)
    parser.add_argument("--batch-steps", type=int, default=50)
    parser.add_argument("--log-actions", action="store_true")
    parser.add_argument("--hold", action="store_true")
    args = parser.parse_args()
    env = gym.make("CartPole-v1")
    client = PolicyClient(
        args.address, inference=args.inference, token=args.token, batch_steps=args.batch_steps, seed=args.seed
    )
    returns, lengths = [], []
    for k in range(args.episodes):
        obs, _ = env.reset(seed=args.seed * 1000 + k)
        episode_id = client.start_episode()
        total, steps = 0.0, 0
        while True:
            if args.log_actions:
                action = (steps // 3) % 2
                client.log_action(episode_id, obs, action)
            else:
                action = client.get_action(episode_id, obs)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            client.log_returns(episode_id, float(reward))
            total, steps = total + float(reward), steps + 1
            if args.hold and k == args.episodes - 1 and steps == 5:
                print("started", flush=True)
                sys.stdin.read()  # the test kills this process here
            if terminated or truncated:
                client.end_episode(episode_id, obs, truncated=truncated and not terminated)
                break
        returns.append(total)
        lengths.append(steps)
    client.close()
    print(json.dumps({"returns": returns, "lengths": lengths}), flush=True)


if __name__ == "__main__":
    main()
