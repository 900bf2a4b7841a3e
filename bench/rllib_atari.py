"""RLlib's side of bench/atari_bench.py: Atari bytes shipped per env step, replay memory and stacked sampling.

    .venv-rllib/bin/python bench/rllib_atari.py --part ship [--num-envs 8] [--rollout-fragment-length 128]
                                                            [--calls 2] [--framestack-in-env]
    .venv-rllib/bin/python bench/rllib_atari.py --part replay [--steps 200000] [--batch-size 32] [--seconds 3]

Runs ONLY under RLlib's own interpreter (.venv-rllib, with ale-py installed there); it imports
nothing from this project. bench/atari_bench.py imports the pure-numpy helpers at the top of this
file (``pong_like_chunks``, ``pickle5_nbytes``, ``object_store_nbytes``, ...), so that both sides
measure the same data the same way.

``--part ship``: a local SingleAgentEnvRunner set up as RLlib's docs recommend for Atari (its
example ``examples/connectors/frame_stacking.py``): ``ale_py:ALE/Pong-v5`` with ``frameskip=1``,
wrapped by ``wrap_atari_for_new_api_stack(env, dim=84, framestack=None)`` and a
``FrameStackingEnvToModule(num_frames=4)`` env-to-module connector (``--framestack-in-env``: the
wrapper's ``framestack=4`` instead, no connector); PPO's default RLModule with Nature-CNN filters.
``sample()`` of ``num_envs x rollout_fragment_length`` steps is what a remote runner returns;
its serialized size is measured as pickle protocol 5 with out-of-band buffers (Ray's way) and as
the object's size in Ray's object store after ``ray.put``. Also env steps/s of ``sample()``.

``--part replay``: ``--steps`` env steps of ``pong_like_chunks`` (84x84 uint8 frames, stored
[84, 84, 1] as RLlib's Atari wrapper gives them) added as numpy'd SingleAgentEpisode chunks to
``EpisodeReplayBuffer(capacity=steps)``; RSS held (and peak) over the stored frames. Then B
stacked transitions per call: ``buffer.sample(batch_size_B=2B, batch_length_T=1, lookback=3,
sample_episodes=True)`` (its 1-step slices count 2 toward B, so 2B returns B) run through DQN's
learner connector pipeline with ``FrameStackingLearner(num_frames=4)`` and
``AddNextObservationsFromEpisodesToTrainBatch``, RLlib's documented way (``obs`` [B, 84, 84, 4];
its ``new_obs`` stays one frame, [B, 84, 84, 1]: RLlib has no piece stacking next observations).

Prints exactly one JSON object on the last stdout line; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

FRAME = (84, 84)
FRAME_BYTES = 84 * 84
NUM_FRAMES = 4
PONG_EPISODE_STEPS = (760, 1000)
"""Episode lengths drawn uniformly from this range: Pong under a random policy (frame skip 4)."""


# ---------------------------------------------------------------- shared, pure numpy
def pong_like_chunks(
    num_calls: int, *, num_envs: int = 8, fragment: int = 128, lookback: int = NUM_FRAMES - 1, seed: int = 0
) -> Iterator[list[dict[str, Any]]]:
    """What a truncate-mode runner of ``num_envs`` sub-envs ships per call, ``num_calls`` times:
    a list of chunk dicts with ``id``, ``t_started``, ``lookback_len`` (min(lookback, t_started)),
    ``frames`` uint8 [lookback_len + len + 1, 84, 84] (the lookback's, then the chunk's own
    observations), ``actions`` int64 and ``rewards`` float64 [lookback_len + len], ``terminated``.
    Random frames; episode lengths uniform in ``PONG_EPISODE_STEPS``; a continuation chunk starts
    with the observation its predecessor ended with."""
    rng = np.random.default_rng(seed)
    low, high = PONG_EPISODE_STEPS

    def new_episode(e: int, k: int) -> dict[str, Any]:
        first = rng.integers(0, 256, (1, *FRAME), np.uint8)
        return {
            "id": f"env{e}-ep{k}",
            "t": 0,
            "len": int(rng.integers(low, high + 1)),
            "frames": first,
            "actions": np.zeros(0, np.int64),
            "rewards": np.zeros(0),
        }

    count = [0] * num_envs
    state = [new_episode(e, 0) for e in range(num_envs)]
    for _ in range(num_calls):
        out = []
        for e in range(num_envs):
            left = fragment
            while left > 0:
                s = state[e]
                n = min(left, s["len"] - s["t"])
                lb = min(lookback, s["t"])
                new = rng.integers(0, 256, (n, *FRAME), np.uint8)
                actions, rewards = rng.integers(0, 6, n), rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0], n)
                out.append(
                    {
                        "id": s["id"],
                        "t_started": s["t"],
                        "lookback_len": lb,
                        "frames": np.concatenate([s["frames"][len(s["frames"]) - lb - 1 :], new]),
                        "actions": np.concatenate([s["actions"][len(s["actions"]) - lb :], actions]),
                        "rewards": np.concatenate([s["rewards"][len(s["rewards"]) - lb :], rewards]),
                        "terminated": s["t"] + n == s["len"],
                    }
                )
                s["t"] += n
                s["frames"] = out[-1]["frames"][-(lookback + 1) :]
                s["actions"], s["rewards"] = out[-1]["actions"][-lookback:], out[-1]["rewards"][-lookback:]
                left -= n
                if s["t"] == s["len"]:
                    count[e] += 1
                    state[e] = new_episode(e, count[e])
        yield out


def pickle5_nbytes(obj: Any) -> int:
    """Bytes of ``obj`` pickled as Ray does: protocol 5, in-band bytes plus the out-of-band buffers."""
    buffers: list[pickle.PickleBuffer] = []
    inband = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return len(inband) + sum(b.raw().nbytes for b in buffers)


def object_store_nbytes(obj: Any) -> int | None:
    """The size of ``obj`` in Ray's object store after one ``ray.put`` (a fresh local Ray session)."""
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ref = ray.put(obj)
        size: int | None = ray.experimental.get_object_locations([ref])[ref]["object_size"]
        return size
    finally:
        ray.shutdown()


def rss(key: str = "VmRSS") -> int:
    """This process's ``key`` (VmRSS, VmHWM) from /proc/self/status, in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) * 1024


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS


def per_second(fn: Callable[[], int], seconds: float) -> float:
    """Items per second of ``fn`` (which returns the items it made), called for ``seconds`` after one warm-up call."""
    fn()
    t0, items = time.perf_counter(), 0
    while True:
        items += fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return items / elapsed


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- RLlib
def ship(num_envs: int, fragment: int, calls: int, framestack_in_env: bool) -> dict[str, Any]:
    import ale_py
    import gymnasium as gym
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    framestack = NUM_FRAMES if framestack_in_env else None
    tune.register_env(
        "atari-env",
        lambda cfg: wrap_atari_for_new_api_stack(gym.make("ale_py:ALE/Pong-v5", **cfg), dim=84, framestack=framestack),
    )
    config = (
        PPOConfig()
        .environment(
            "atari-env", env_config={"frameskip": 1, "full_action_space": False, "repeat_action_probability": 0.0}
        )
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=num_envs,
            rollout_fragment_length=fragment,
            env_to_module_connector=(
                None if framestack_in_env else lambda env, spaces, device: FrameStackingEnvToModule(num_frames=4)
            ),
        )
        .rl_module(
            model_config=DefaultModelConfig(
                conv_filters=[[32, 8, 4], [64, 4, 2], [64, 3, 1]],
                conv_activation="relu",
                head_fcnet_hiddens=[512],
                vf_share_layers=True,
            )
        )
    )
    runner = SingleAgentEnvRunner(config=config)
    runner.sample()  # warm-up: resets, first allocations
    t0, steps, episodes = time.perf_counter(), 0, []
    for _ in range(calls):
        episodes = runner.sample()
        steps += sum(len(e) for e in episodes)
    rate = steps / (time.perf_counter() - t0)
    n = sum(len(e) for e in episodes)
    obs = episodes[0].observations.data
    runner.stop()
    out = {
        "steps_per_s": rate,
        "steps_per_call": n,
        "obs_dtype": str(obs.dtype),
        "obs_shape": list(obs.shape[1:]),
        "lookback": int(episodes[0].observations.lookback),
        "pickle5_bytes_per_step": pickle5_nbytes(episodes) / n,
        "object_store_bytes_per_step": (object_store_nbytes(episodes) or 0) / n,
    }
    log(f"[ship] {out}")
    return out


def to_episodes(chunks: list[dict[str, Any]], spaces: tuple[Any, Any]) -> list[Any]:
    """Numpy'd SingleAgentEpisodes of ``pong_like_chunks``' chunks, frames [84, 84, 1]."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    episodes = []
    for c in chunks:
        n = len(c["frames"])
        ep = SingleAgentEpisode(
            id_=c["id"],
            observations=list(c["frames"].reshape(n, *FRAME, 1)),
            actions=list(c["actions"]),
            rewards=list(c["rewards"]),
            infos=[{} for _ in range(n)],
            terminated=c["terminated"],
            t_started=c["t_started"],
            len_lookback_buffer=c["lookback_len"],
            observation_space=spaces[0],
            action_space=spaces[1],
        )
        ep.to_numpy()
        episodes.append(ep)
    return episodes


def replay(steps: int, num_envs: int, fragment: int, batch_size: int, seconds: float) -> dict[str, Any]:
    import gymnasium as gym
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.connectors.learner import AddNextObservationsFromEpisodesToTrainBatch
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    spaces = (gym.spaces.Box(0, 255, (*FRAME, 1), np.uint8), gym.spaces.Discrete(6))
    calls = steps // (num_envs * fragment)
    chunks = pong_like_chunks(calls, num_envs=num_envs, fragment=fragment)
    gc.collect()
    base = rss()
    reset_peak_rss()
    buf = EpisodeReplayBuffer(capacity=steps)
    t0, add_s = time.perf_counter(), 0.0
    for batch in chunks:
        episodes = to_episodes(batch, spaces)
        t1 = time.perf_counter()
        buf.add(episodes)
        add_s += time.perf_counter() - t1
        del episodes, batch
    fill_s = time.perf_counter() - t0
    gc.collect()
    stored = buf.get_num_timesteps()
    out: dict[str, Any] = {
        "stored_steps": stored,
        "rss_over_frames": (rss() - base) / (stored * FRAME_BYTES),
        "peak_rss_over_frames": (rss("VmHWM") - base) / (stored * FRAME_BYTES),
        "add_steps_per_s": stored / add_s,
        "fill_s": fill_s,
    }
    log(f"[replay] {out}")

    config = DQNConfig().training(learner_connector=lambda obs, act: FrameStackingLearner(num_frames=NUM_FRAMES))
    pipeline = config.build_learner_connector(*spaces)
    pipeline.insert_after("FrameStacking", AddNextObservationsFromEpisodesToTrainBatch())
    shapes: dict[str, Any] = {}

    def sample() -> int:
        episodes = buf.sample(
            batch_size_B=2 * batch_size, batch_length_T=1, lookback=NUM_FRAMES - 1, sample_episodes=True, n_step=1
        )
        batch = pipeline(rl_module=None, batch={}, episodes=episodes, shared_data={}, metrics=None)
        shapes.update({k: list(np.shape(v)) for k, v in batch.items() if k in ("obs", "new_obs", "actions")})
        return len(batch["obs"])

    out["sample_transitions_per_s"] = per_second(sample, seconds)
    out["sample_shapes"] = shapes
    log(f"[replay] sample {out['sample_transitions_per_s']:,.0f} transitions/s, {shapes}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["ship", "replay"], required=True)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rollout-fragment-length", type=int, default=128)
    parser.add_argument("--calls", type=int, default=2, help="ship: timed sample() calls")
    parser.add_argument("--framestack-in-env", action="store_true", help="ship: the wrapper's framestack=4")
    parser.add_argument("--steps", type=int, default=200_000, help="replay: env steps stored (the capacity)")
    parser.add_argument("--batch-size", type=int, default=32, help="replay: stacked transitions per sample")
    parser.add_argument("--seconds", type=float, default=3.0, help="replay: seconds of sampling")
    args = parser.parse_args()
    if args.part == "ship":
        out = ship(args.num_envs, args.rollout_fragment_length, args.calls, args.framestack_in_env)
    else:
        out = replay(args.steps, args.num_envs, args.rollout_fragment_length, args.batch_size, args.seconds)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
