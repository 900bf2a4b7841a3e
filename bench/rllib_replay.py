"""RLlib replay benchmark: EpisodeReplayBuffer add/sample throughput and memory on CartPole-shaped data.

    .venv-rllib/bin/python bench/rllib_replay.py [--episodes 100] [--steps-per-episode 500]
                                                 [--seconds 2] [--batch-size 256]
                                                 [--episode-form numpy|list]

Runs ONLY under RLlib's own interpreter (.venv-rllib); it imports nothing from this project.

Data (built first, not timed): N SingleAgentEpisode objects of L steps each, built the way
SingleAgentEnvRunner builds them (``add_env_reset`` + ``add_env_step`` per step, observation /
action spaces of CartPole-v1 attached): random float32[4] observations, int64 actions in {0, 1},
rewards 1.0, empty info dicts, ``terminated=True`` on the last step. By default each episode is
then ``to_numpy()``-ed, as SingleAgentEnvRunner.sample() does with the new-API-stack default
``config.episodes_to_numpy=True`` (``--episode-form list`` skips that).

Measures:
  add_steps_per_s              EpisodeReplayBuffer(capacity=2*N*L).add(all episodes), best of
                               3 fresh buffers, env steps added per second
  sample_transitions_per_s     buffer.sample(num_items=B, n_step=1, sample_episodes=True,
                               batch_length_T=0, gamma=0.99): the call DQN/SAC make on the new
                               API stack (returns B 1-step SingleAgentEpisodes); B per call
  sample_transitions_per_s_n3  same with n_step=3
  sample_batch_transitions_per_s
                               buffer.sample(batch_size_B=B, batch_length_T=1) (the default
                               sample_episodes=False path: a dict of [B, T] numpy arrays; this
                               path ignores n_step entirely)
  stored_bytes_per_step        memory the filled buffer holds per env step (see memory_method)

Prints exactly one JSON object on the last stdout line; everything else goes to stderr. A part
that fails is reported as null and its error appended to "errors".

``--frames --capacity C --steps S`` measures instead what bench/replay_frames_bench.py compares
(see there): S steps of 84x84 uint8 frames, 2 episodes of 500 steps per ``add``, into
EpisodeReplayBuffer(capacity=C); per add: stored env steps, peak RSS during the add (less the RSS
before the buffer existed and the incoming batch's bytes) / stored payload, seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
import traceback
from typing import Any

ENV_ID = "CartPole-v1"


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return -1


def cartpole_spaces():
    import gymnasium as gym

    env = gym.make(ENV_ID)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def build_episodes(n: int, length: int, form: str, seed: int = 0) -> list:
    """N CartPole-shaped episodes built step by step like SingleAgentEnvRunner does."""
    import numpy as np
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    obs_space, act_space = cartpole_spaces()
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n):
        obs = rng.standard_normal((length + 1, 4), dtype=np.float32)
        acts = rng.integers(0, 2, size=length)  # int64 scalars, like a vector env's actions
        eps = SingleAgentEpisode(observation_space=obs_space, action_space=act_space)
        eps.add_env_reset(observation=obs[0].copy(), infos={})
        for t in range(length):
            eps.add_env_step(
                observation=obs[t + 1].copy(),
                action=acts[t],
                reward=1.0,
                infos={},
                terminated=(t == length - 1),
            )
        if form == "numpy":
            eps.to_numpy()
        eps.validate()
        episodes.append(eps)
    return episodes


def payload_bytes_per_step(episodes) -> float | None:
    """Bytes of the numpy arrays (obs/actions/rewards) per step: the irreducible data size."""
    import numpy as np

    total = 0
    steps = 0
    for e in episodes:
        for buf in (e.observations, e.actions, e.rewards):
            if not isinstance(buf.data, np.ndarray):
                return None
            total += buf.data.nbytes
        steps += len(e)
    return total / steps


def bench_add(episodes, capacity: int, repeats: int = 3) -> dict:
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    steps = sum(len(e) for e in episodes)
    times = []
    buf = None
    for r in range(repeats):
        buf = None
        gc.collect()
        buf = EpisodeReplayBuffer(capacity=capacity)
        t0 = time.perf_counter()
        buf.add(episodes)
        dt = time.perf_counter() - t0
        times.append(dt)
        assert buf.get_num_timesteps() == steps, (buf.get_num_timesteps(), steps)
        log(f"[add] run {r}: {steps} steps in {dt:.3f}s ({steps / dt:,.0f} steps/s)")
    best = min(times)
    return {
        "buffer": buf,
        "add_steps_per_s": steps / best,
        "add_seconds_runs": times,
        "buffer_num_episodes": buf.get_num_episodes(),
        "buffer_num_timesteps": buf.get_num_timesteps(),
    }


def timed_calls(fn, seconds: float, per_call: int, min_calls: int = 3) -> dict:
    fn()  # warm-up (not timed)
    calls = 0
    per = []
    t0 = time.perf_counter()
    while True:
        t1 = time.perf_counter()
        fn()
        per.append(time.perf_counter() - t1)
        calls += 1
        dt = time.perf_counter() - t0
        if dt >= seconds and calls >= min_calls:
            break
    med = sorted(per)[len(per) // 2]
    return {
        "per_s": calls * per_call / dt,
        "per_s_median_call": per_call / med,
        "calls": calls,
        "seconds": dt,
    }


def check_episode_sample(res, B: int, n_step: int) -> None:
    assert isinstance(res, list) and len(res) == B, (type(res), len(res) if hasattr(res, "__len__") else None)
    e = res[0]
    assert len(e) == 1 and len(e.observations) == 2, (len(e), len(e.observations))
    assert int(e.extra_model_outputs["n_step"][0]) == n_step


def bench_sample_episodes(buf, B: int, n_step: int, seconds: float) -> dict:
    kwargs = dict(num_items=B, n_step=n_step, batch_length_T=0, gamma=0.99, sample_episodes=True)
    check_episode_sample(buf.sample(**kwargs), B, n_step)
    r = timed_calls(lambda: buf.sample(**kwargs), seconds, B)
    log(f"[sample n_step={n_step}] {r['per_s']:,.0f} transitions/s ({r['calls']} calls of B={B})")
    return r


def bench_sample_batch(buf, B: int, seconds: float) -> dict:
    kwargs = dict(batch_size_B=B, batch_length_T=1)
    res = buf.sample(**kwargs)
    assert res["obs"].shape == (B, 1, 4), res["obs"].shape
    r = timed_calls(lambda: buf.sample(**kwargs), seconds, B)
    log(f"[sample batch T=1] {r['per_s']:,.0f} transitions/s ({r['calls']} calls of B={B})")
    return r


def bench_memory(args, capacity: int) -> dict:
    """Memory held by a filled buffer, per env step, two ways.

    rss:         VmRSS growth from just before building a fresh buffer + adding a fresh copy of
                 the data to just after (the fresh data copy is built first and counted out: it
                 is alive in both readings). add() deep-copies every episode, so the growth is the
                 buffer's own copy plus its index list. Run before any timing so freed memory
                 from earlier buffers can't be reused (which would hide growth).
    tracemalloc: Python + numpy heap bytes (numpy reports its data buffers to tracemalloc)
                 still allocated after the same construction + add, with a fresh buffer.
                 Allocator/page overhead is not counted, so this is usually a bit below RSS.
    """
    import tracemalloc

    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    out: dict[str, Any] = {}
    # --- RSS ---
    data = build_episodes(args.episodes, args.steps_per_episode, args.episode_form, seed=1)
    steps = sum(len(e) for e in data)
    gc.collect()
    before = rss_bytes()
    buf = EpisodeReplayBuffer(capacity=capacity)
    buf.add(data)
    gc.collect()
    after = rss_bytes()
    out["rss_growth_bytes"] = after - before
    out["rss_bytes_per_step"] = (after - before) / steps
    log(f"[memory] RSS growth {(after - before) / 2**20:.1f} MiB = {(after - before) / steps:.0f} B/step")
    del buf
    gc.collect()
    # --- tracemalloc ---
    tracemalloc.start()
    try:
        gc.collect()
        base, _ = tracemalloc.get_traced_memory()
        buf = EpisodeReplayBuffer(capacity=capacity)
        buf.add(data)
        gc.collect()
        cur, peak = tracemalloc.get_traced_memory()
        out["tracemalloc_bytes_per_step"] = (cur - base) / steps
        out["tracemalloc_peak_extra_bytes_per_step"] = (peak - base) / steps
        log(f"[memory] tracemalloc {(cur - base) / 2**20:.1f} MiB = {(cur - base) / steps:.0f} B/step")
    finally:
        tracemalloc.stop()
    # Index list cost, computed exactly from the structure (a list of 2-tuples of ints).
    idx = buf._indices  # noqa: SLF001  RLlib's index list, measured for its memory cost
    n_idx = len(idx)
    per_tuple = sys.getsizeof(idx[0]) if n_idx else 0
    big_ints = sum(1 for a, b in idx for v in (a, b) if not (-5 <= v <= 256))
    out["indices_bytes_per_step"] = (
        (sys.getsizeof(idx) + n_idx * per_tuple + big_ints * sys.getsizeof(10**6)) / steps if n_idx else None
    )
    del buf, data
    gc.collect()
    return out


FRAME = (84, 84)
FRAME_STEP_BYTES = 84 * 84 + 8 + 8
FRAME_EPISODE_STEPS = 500
FRAME_EPISODES_PER_ADD = 2


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) * 1024


def frame_batch(k: int) -> tuple[list, int]:
    """Batch ``k``: numpy'd episodes of random frames (as replay_frames_bench's), and its bytes."""
    import numpy as np
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    rng = np.random.default_rng(k)
    n, m = FRAME_EPISODES_PER_ADD * FRAME_EPISODE_STEPS, FRAME_EPISODES_PER_ADD
    frames = rng.integers(0, 256, (n + m, *FRAME), np.uint8)
    actions, rewards = rng.integers(0, 6, n), np.ones(n)
    episodes, nbytes = [], 0
    for i in range(m):
        obs = frames[i * (FRAME_EPISODE_STEPS + 1) : (i + 1) * (FRAME_EPISODE_STEPS + 1)]
        steps = slice(i * FRAME_EPISODE_STEPS, (i + 1) * FRAME_EPISODE_STEPS)
        ep = SingleAgentEpisode(
            id_=f"b{k}-{i}",
            observations=list(obs),
            actions=list(actions[steps]),
            rewards=list(rewards[steps]),
            infos=[{} for _ in range(FRAME_EPISODE_STEPS + 1)],
            terminated=True,
            len_lookback_buffer=0,
        )
        ep.to_numpy()
        nbytes += sum(b.data.nbytes for b in (ep.observations, ep.actions, ep.rewards))
        episodes.append(ep)
    return episodes, nbytes


def bench_frames(capacity: int, steps: int) -> dict:
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

    gc.collect()
    base = _status("VmRSS")
    buf = EpisodeReplayBuffer(capacity=capacity)
    adds = []
    for k in range(steps // (FRAME_EPISODES_PER_ADD * FRAME_EPISODE_STEPS)):
        episodes, incoming = frame_batch(k)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        t0 = time.perf_counter()
        buf.add(episodes)
        seconds = time.perf_counter() - t0
        peak = _status("VmHWM")
        del episodes
        stored = buf.get_num_timesteps()
        adds.append((stored, (peak - base - incoming) / (stored * FRAME_STEP_BYTES), seconds))
    return {"adds": adds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", action="store_true", help="the frames benchmark (see the docstring)")
    p.add_argument("--capacity", type=int, default=50_000, help="--frames: buffer capacity (env steps)")
    p.add_argument("--steps", type=int, default=50_000, help="--frames: env steps added")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--steps-per-episode", type=int, default=500)
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per sample measurement")
    p.add_argument("--batch-size", type=int, default=256, help="B per sample() call")
    p.add_argument(
        "--episode-form",
        choices=("numpy", "list"),
        default="numpy",
        help="numpy: to_numpy()-ed like SingleAgentEnvRunner ships them (default)",
    )
    p.add_argument("--add-repeats", type=int, default=3)
    args = p.parse_args()
    if args.frames:
        print(json.dumps(bench_frames(args.capacity, args.steps)), flush=True)
        return

    N, L, B = args.episodes, args.steps_per_episode, args.batch_size
    capacity = N * L * 2
    out: dict[str, Any] = {
        "impl": "rllib",
        "buffer": "EpisodeReplayBuffer",
        "episodes": N,
        "steps_per_episode": L,
        "capacity": capacity,
        "batch_size": B,
        "seconds": args.seconds,
        "episode_form": None,
        "add_steps_per_s": None,
        "sample_transitions_per_s": None,
        "sample_transitions_per_s_n3": None,
        "sample_batch_transitions_per_s": None,
        "stored_bytes_per_step": None,
        "memory_method": None,
        "errors": [],
    }
    try:
        import gymnasium
        import numpy
        import ray

        out["versions"] = {
            "ray": ray.__version__,
            "numpy": numpy.__version__,
            "gymnasium": gymnasium.__version__,
            "python": platform.python_version(),
        }
        out["cpu_count"] = os.cpu_count()
    except Exception as e:
        out["errors"].append(f"versions: {type(e).__name__}: {e}")

    def part(name: str, fn) -> Any:
        try:
            return fn()
        except Exception as e:
            log(f"[{name}] FAILED:\n{traceback.format_exc()}")
            out["errors"].append(f"{name}: {type(e).__name__}: {e}")
            return None

    t_start = time.perf_counter()
    out["loadavg_1m_start"] = os.getloadavg()[0]

    # Does the installed RLlib numpy-ize episodes in the EnvRunner by default?
    def _runner_default():
        from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

        return bool(AlgorithmConfig().episodes_to_numpy)

    out["episodes_to_numpy_default"] = part("episodes_to_numpy_default", _runner_default)

    t0 = time.perf_counter()
    episodes = part("build", lambda: build_episodes(N, L, args.episode_form))
    if episodes is not None:
        out["build_seconds"] = time.perf_counter() - t0
        out["episode_form"] = (
            "numpy (SingleAgentEpisode.to_numpy(), as SingleAgentEnvRunner.sample() returns with "
            "episodes_to_numpy=True)"
            if args.episode_form == "numpy"
            else "list (not numpy'ized; episodes_to_numpy=False)"
        )
        out["payload_bytes_per_step"] = part("payload", lambda: payload_bytes_per_step(episodes))
        log(f"[build] {N} episodes x {L} steps ({args.episode_form}) in {out['build_seconds']:.2f}s")

        # Memory first (see bench_memory's docstring).
        mem = part("memory", lambda: bench_memory(args, capacity))
        if mem:
            out["memory_details"] = mem
            out["stored_bytes_per_step"] = mem.get("rss_bytes_per_step")
            out["memory_method"] = (
                "VmRSS growth (/proc/self/status) across EpisodeReplayBuffer creation + add() of a "
                "fresh copy of the data (data built before the first reading), divided by env steps; "
                "measured before any other buffer existed. Cross-check in memory_details: "
                "tracemalloc (Python + numpy heap, no allocator overhead) and the exact size of the "
                "buffer's _indices list."
            )

        add = part("add", lambda: bench_add(episodes, capacity, args.add_repeats))
        buf = None
        if add:
            buf = add.pop("buffer")
            out.update(add)
        if buf is not None:
            s1 = part("sample_n1", lambda: bench_sample_episodes(buf, B, 1, args.seconds))
            if s1:
                out["sample_transitions_per_s"] = s1["per_s"]
                out["sample_details_n1"] = s1
            s3 = part("sample_n3", lambda: bench_sample_episodes(buf, B, 3, args.seconds))
            if s3:
                out["sample_transitions_per_s_n3"] = s3["per_s"]
                out["sample_details_n3"] = s3
            sb = part("sample_batch", lambda: bench_sample_batch(buf, B, args.seconds))
            if sb:
                out["sample_batch_transitions_per_s"] = sb["per_s"]
                out["sample_batch_details"] = sb
            out["sample_call"] = (
                f"buffer.sample(num_items={B}, n_step=n, batch_length_T=0, gamma=0.99, "
                "sample_episodes=True) -> list of B 1-step SingleAgentEpisodes (DQN's call on the "
                "new API stack; turning them into a train batch happens later in the learner "
                "connector and is not timed)"
            )
            out["sample_batch_call"] = (
                f"buffer.sample(batch_size_B={B}, batch_length_T=1) -> dict of [B, 1, ...] "
                "numpy arrays (n_step is ignored on this path)"
            )

    out["loadavg_1m_end"] = os.getloadavg()[0]
    out["total_wall_s"] = time.perf_counter() - t_start
    sys.stdout.flush()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
