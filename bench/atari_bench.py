"""Atari benchmark: a CNN runner on Pong, bytes shipped, replay memory and stacked replay samples, beside baselines.

    .venv/bin/python bench/atari_bench.py [--num-envs 8] [--rollout-fragment-length 128] [--calls 3]
                                          [--repeats 5] [--replay-steps 200000] [--batch-size 32]
                                          [--seconds 3] [--rllib-python .venv-rllib/bin/python]
                                          [--replay-only]

One run, every figure beside a baseline measured in the same run (each part in a fresh process):

1. Runner steps/s: one local EnvRunner on ``atari_env("ALE/Pong-v5")`` (84x84 grayscale, frame skip
   4) in ALE's C++ vector env (``vectorization_mode="vector_entry_point"``), ``--num-envs`` sub-envs,
   TorchCNNModule (Nature CNN), truncate mode, ``sample_columnar()`` (what a remote runner ships),
   with ``FrameStackingEnvToModule(num_frames=4)``; over the bare loop: the same vector env, the
   same module's ``forward_exploration`` on [N, 4, 84, 84] stacks kept by an in-place shift (the
   least that makes the same input), Categorical sampling and log-probs, nothing else; one torch
   thread in both (the runner's ``num_torch_threads``). The same without stacking (1 frame) too.
   Bare loop and runner take turns, ``--repeats`` times; best of each.
2. Bytes shipped per env step / one frame (7,056 B): the ``sample_columnar()`` object of one call
   (``num_envs x rollout_fragment_length`` steps, action log-probs, logits and values included)
   as pickle protocol 5 with out-of-band buffers (Ray's way) and its size in Ray's object store
   after ``ray.put``. RLlib (bench/rllib_atari.py ``--part ship``): the episodes its
   SingleAgentEnvRunner's ``sample()`` returns, set up as its docs recommend
   (``wrap_atari_for_new_api_stack`` + its ``FrameStackingEnvToModule``, and with the wrapper's
   ``framestack=4``).
3. Replay memory per stored step / one frame: a ``--replay-steps``-step EpisodeReplayBuffer filled
   to capacity. Producing 200k steps of real Pong on this 2-core machine takes minutes, so the
   data is synthetic and shaped like Pong's (``rllib_atari.pong_like_chunks``: random 84x84 uint8
   frames, episodes of 760-1,000 steps, shipped as a runner of 8 sub-envs with 128-step fragments
   and a 4-frame stack ships them: continuation chunks with 3 steps of lookback). RSS held after
   the fill (and its peak) less the RSS before, over the stored steps' frames. RLlib's
   EpisodeReplayBuffer gets the same chunks as numpy'd SingleAgentEpisodes (``--part replay``).
4. Replay sample of B stacked transitions, transitions/s: ``sample(B, frame_stack=4)``, ``obs``
   and ``next_obs`` [B, 4, 84, 84] gathered straight from the stored frames and lookback
   (``replay/frame_stacks.py``). Beside it, the way through episodes:
   ``sample_episodes(B, batch_length_T=1, lookback=3)`` and the learner pieces
   ``AddColumnsFromEpisodesToTrainBatch``, ``FrameStacking(num_frames=4)`` and
   ``FrameStacking(num_frames=4, as_next_obs=True)``. The floor beside it: one fancy-index gather
   of the same two stacks from a plain frame array. RLlib:
   its DQN learner pipeline with ``FrameStackingLearner`` over ``sample(..., lookback=3,
   sample_episodes=True)`` (its ``new_obs`` is one frame, not a stack: less work than ours). For
   scale, also our ``sample(B)``: the flat batch of single-frame ``obs`` and ``next_obs``.

Prints a table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_common import run_json
from rllib_atari import (
    FRAME,
    FRAME_BYTES,
    NUM_FRAMES,
    object_store_nbytes,
    per_second,
    pickle5_nbytes,
    pong_like_chunks,
    reset_peak_rss,
    rss,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: A/B runs point it at another checkout

GAME = "ALE/Pong-v5"


# ---------------------------------------------------------------- 1 and 2: the runner
def bare_loop(num_envs: int, steps: int, num_frames: int) -> float:
    """Env steps/s of the vector env stepping with the CNN forward and action sampling, nothing else."""
    import gymnasium as gym
    import torch

    from ray_sampler.envs import atari_env
    from ray_sampler.modules.distributions import Categorical
    from ray_sampler.modules.torch_cnn import TorchCNNModule

    torch.set_num_threads(1)
    env = gym.make_vec(atari_env(GAME), num_envs, vectorization_mode="vector_entry_point")
    space = env.single_observation_space
    module = TorchCNNModule(space, env.single_action_space, num_channels=num_frames, seed=0)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    stack = np.zeros((num_envs, num_frames, *space.shape), np.uint8)
    stack[:, -1] = obs
    t0 = time.perf_counter()
    for i in range(-16, steps // num_envs):  # 16 untimed steps first, as the runner's warm-up call
        if i == 0:
            t0 = time.perf_counter()
        out = module.forward_exploration({"obs": stack if num_frames > 1 else obs})
        dist = Categorical(out["action_dist_inputs"])
        actions = dist.sample(rng)
        dist.logp(actions)
        obs, _, terminated, truncated, _ = env.step(actions)
        stack[:, :-1] = stack[:, 1:]
        stack[:, -1] = obs
        stack[terminated | truncated, :-1] = 0
    rate = steps // num_envs * num_envs / (time.perf_counter() - t0)
    env.close()
    return rate


def make_runner(num_envs: int, fragment: int, num_frames: int) -> Any:
    from connectors import FrameStackingEnvToModule
    from ray_sampler import EnvRunner, EnvRunnerConfig
    from ray_sampler.envs import atari_env
    from ray_sampler.modules.torch_cnn import TorchCNNModule

    return EnvRunner(
        EnvRunnerConfig(
            env=atari_env(GAME),
            vectorization_mode="vector_entry_point",
            num_envs_per_env_runner=num_envs,
            rollout_fragment_length=fragment,
            module_class=TorchCNNModule,
            env_to_module_connectors=(FrameStackingEnvToModule(num_frames=num_frames),) if num_frames > 1 else (),
            seed=0,
        )
    )


def runner_rate(num_envs: int, fragment: int, calls: int, num_frames: int) -> tuple[float, Any]:
    """Env steps/s of ``sample_columnar()`` over ``calls`` calls after a warm-up; the last object shipped."""
    runner = make_runner(num_envs, fragment, num_frames)
    runner.sample_columnar()  # warm-up: resets, first allocations
    t0, steps, col = time.perf_counter(), 0, None
    for _ in range(calls):
        col, _ = runner.sample_columnar()
        steps += col.num_env_steps
    rate = steps / (time.perf_counter() - t0)
    runner.stop()
    return rate, col


def measure_runner(num_envs: int, fragment: int, calls: int, repeats: int) -> dict[str, Any]:
    """Bare loop and runner, 4 frames then 1, taking turns ``repeats`` times; best of each."""
    out: dict[str, Any] = {}
    steps = num_envs * fragment * calls
    for _ in range(repeats):
        for k in (NUM_FRAMES, 1):
            bare = bare_loop(num_envs, steps, k)
            rate, col = runner_rate(num_envs, fragment, calls, k)
            out[f"bare_k{k}"] = max(out.get(f"bare_k{k}", 0.0), bare)
            out[f"runner_k{k}"] = max(out.get(f"runner_k{k}", 0.0), rate)
    for k in (NUM_FRAMES, 1):
        col = runner_rate(num_envs, fragment, 1, k)[1]
        n = col.num_env_steps
        out[f"pickle5_bytes_per_step_k{k}"] = pickle5_nbytes(col) / n
        out[f"object_store_bytes_per_step_k{k}"] = (object_store_nbytes(col) or 0) / n
        out[f"model_output_bytes_per_step_k{k}"] = sum(v.nbytes for v in col.data.extra_model_outputs.values()) / n
        out[f"lookback_k{k}"] = int(col.lookback_lens.max())
    return out


# ---------------------------------------------------------------- 3 and 4: replay
def to_columnar(chunks: list[dict[str, Any]]) -> Any:
    """One ColumnarEpisodes of ``pong_like_chunks``' chunks (what our runner ships)."""
    from ray_sampler.data.columnar import ColumnarEpisodes, StepRows

    lb = np.array([c["lookback_len"] for c in chunks])
    empty = np.zeros(0, np.int64)

    def rows(side: str) -> StepRows:
        own = side == "data"
        return StepRows(
            observations=np.concatenate([c["frames"][b:] if own else c["frames"][:b] for c, b in zip(chunks, lb)]),
            actions=np.concatenate([c["actions"][b:] if own else c["actions"][:b] for c, b in zip(chunks, lb)]),
            rewards=np.concatenate([c["rewards"][b:] if own else c["rewards"][:b] for c, b in zip(chunks, lb)]),
            extra_model_outputs={},
            info_rows=empty,
            info_values=[],
        )

    return ColumnarEpisodes(
        ids=[c["id"] for c in chunks],
        t_started=np.array([c["t_started"] for c in chunks]),
        lens=np.array([len(c["actions"]) - b for c, b in zip(chunks, lb)]),
        lookback_lens=lb,
        terminated=np.array([c["terminated"] for c in chunks]),
        truncated=np.zeros(len(chunks), bool),
        data=rows("data"),
        lookback=rows("lookback"),
    )


def measure_replay(steps: int, num_envs: int, fragment: int, batch_size: int, seconds: float) -> dict[str, Any]:
    from connectors import ConnectorPipelineV2
    from connectors.learner import DEFAULT_MODULE_ID, AddColumnsFromEpisodesToTrainBatch, FrameStacking
    from replay.buffer import EpisodeReplayBuffer

    calls = steps // (num_envs * fragment)
    chunks = pong_like_chunks(calls, num_envs=num_envs, fragment=fragment)
    gc.collect()
    base = rss()
    reset_peak_rss()
    buf = EpisodeReplayBuffer(capacity_env_steps=steps, seed=0)
    t0, add_s = time.perf_counter(), 0.0
    for batch in chunks:
        col = to_columnar(batch)
        t1 = time.perf_counter()
        buf.add(col)
        add_s += time.perf_counter() - t1
        del col, batch
    fill_s = time.perf_counter() - t0
    gc.collect()
    stored = len(buf)
    out: dict[str, Any] = {
        "stored_steps": stored,
        "rss_over_frames": (rss() - base) / (stored * FRAME_BYTES),
        "peak_rss_over_frames": (rss("VmHWM") - base) / (stored * FRAME_BYTES),
        "nbytes_over_frames": buf.get_metrics().nbytes / (stored * FRAME_BYTES),
        "add_steps_per_s": stored / add_s,
        "fill_s": fill_s,
    }
    print(f"[replay] {out}", file=sys.stderr, flush=True)

    pipeline = ConnectorPipelineV2(
        [
            AddColumnsFromEpisodesToTrainBatch(extra_model_outputs=()),
            FrameStacking(num_frames=NUM_FRAMES),
            FrameStacking(num_frames=NUM_FRAMES, as_next_obs=True),
        ]
    )
    shapes: dict[str, Any] = {}

    def sample() -> int:
        episodes = buf.sample_episodes(batch_size, 1, lookback=NUM_FRAMES - 1)
        batch = pipeline(rl_module=None, batch={}, episodes=episodes, shared_data={})[DEFAULT_MODULE_ID]
        shapes.update({k: list(np.shape(batch[k])) for k in ("obs", "next_obs", "actions")})
        return len(batch["obs"])

    def stacked_sample() -> int:
        batch = buf.sample(batch_size, frame_stack=NUM_FRAMES)
        shapes.update({k: list(np.shape(batch[k])) for k in ("obs", "next_obs", "actions")})
        return len(batch["obs"])

    out["sample_transitions_per_s"] = per_second(stacked_sample, seconds)
    out["episodes_sample_transitions_per_s"] = per_second(sample, seconds)
    out["sample_shapes"] = shapes
    out["flat_sample_transitions_per_s"] = per_second(lambda: len(buf.sample(batch_size)["obs"]), seconds)

    frames = np.random.default_rng(1).integers(0, 256, (min(steps, 50_000), *FRAME), np.uint8)
    rng = np.random.default_rng(2)
    window = np.arange(-NUM_FRAMES + 1, 1)

    def gather() -> int:
        t = rng.integers(NUM_FRAMES, len(frames) - 1, batch_size)
        rows = t[:, None] + window
        obs, next_obs = frames[rows], frames[rows + 1]
        assert obs.shape == next_obs.shape == (batch_size, NUM_FRAMES, *FRAME)
        return batch_size

    out["floor_transitions_per_s"] = per_second(gather, seconds)
    return out


# ---------------------------------------------------------------- the table
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["runner", "replay"], help=argparse.SUPPRESS)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rollout-fragment-length", type=int, default=128)
    parser.add_argument("--calls", type=int, default=3, help="timed sample_columnar() calls per runner figure")
    parser.add_argument("--repeats", type=int, default=5, help="bare loop / runner turns; best of each")
    parser.add_argument("--replay-steps", type=int, default=200_000, help="replay capacity, filled (env steps)")
    parser.add_argument("--batch-size", type=int, default=32, help="stacked transitions per replay sample")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per replay sampling figure")
    parser.add_argument(
        "--replay-only", action="store_true", help="figures 3 and 4 only (ours and RLlib's), no runner or shipping"
    )
    default_rllib = ROOT / ".venv-rllib" / "bin" / "python"
    parser.add_argument("--rllib-python", default=str(default_rllib) if default_rllib.exists() else None)
    args = parser.parse_args()
    sizes = ["--num-envs", str(args.num_envs), "--rollout-fragment-length", str(args.rollout_fragment_length)]
    if args.part == "runner":
        print(json.dumps(measure_runner(args.num_envs, args.rollout_fragment_length, args.calls, args.repeats)))
        return
    if args.part == "replay":
        replay = measure_replay(
            args.replay_steps, args.num_envs, args.rollout_fragment_length, args.batch_size, args.seconds
        )
        print(json.dumps(replay))
        return

    t_start = time.perf_counter()
    runner_cmd = [sys.executable, __file__, "--part", "runner", "--calls", str(args.calls), "--repeats"]
    runner_cmd += [str(args.repeats), *sizes]
    ours_runner = {} if args.replay_only else run_json(runner_cmd) or {}
    replay_args = ["--batch-size", str(args.batch_size), "--seconds", str(args.seconds), *sizes]
    ours_replay = (
        run_json([sys.executable, __file__, "--part", "replay", "--replay-steps", str(args.replay_steps), *replay_args])
        or {}
    )
    theirs: dict[str, Any] = {}
    if args.rllib_python:
        script = str(ROOT / "bench" / "rllib_atari.py")
        ship = [args.rllib_python, script, "--part", "ship", "--calls", str(args.calls), *sizes]
        if not args.replay_only:
            theirs["ship"] = run_json(ship) or {}
            theirs["ship_env_stack"] = run_json([*ship, "--framestack-in-env"]) or {}
        theirs["replay"] = (
            run_json([args.rllib_python, script, "--part", "replay", "--steps", str(args.replay_steps), *replay_args])
            or {}
        )
    report(args, ours_runner, ours_replay, theirs, time.perf_counter() - t_start)


def report(
    args: argparse.Namespace, run: dict[str, Any], rep: dict[str, Any], theirs: dict[str, Any], wall_s: float
) -> None:
    ship, ship_env = theirs.get("ship", {}), theirs.get("ship_env_stack", {})
    rrep = theirs.get("replay", {})
    print(
        f"atari_bench  {time.strftime('%Y-%m-%d %H:%M')}  {GAME}, {args.num_envs} sub-envs x "
        f"{args.rollout_fragment_length} steps, 4-frame stack; replay {args.replay_steps} steps, B={args.batch_size}; "
        f"RLlib: {'yes' if rrep else 'no'}; {wall_s:.0f} s"
    )
    print(f"{'figure':62s} {'ours':>10s} {'baseline':>10s} {'ratio':>7s} {'goal':>8s} {'RLlib':>10s}")

    def row(label: str, mine: Any, base: Any, goal: str, other: Any = None, fmt: str = "{:,.0f}") -> None:
        show = lambda v: fmt.format(v) if isinstance(v, int | float) else "-"  # noqa: E731
        ratio = f"{mine / base:.2f}" if isinstance(mine, int | float) and base else "-"
        print(f"{label:62s} {show(mine):>10s} {show(base):>10s} {ratio:>7s} {goal:>8s} {show(other):>10s}")

    row(
        "runner env steps/s, CNN, 4-frame stack (base: bare loop)",
        run.get("runner_k4"),
        run.get("bare_k4"),
        ">= 0.9",
        ship.get("steps_per_s"),
    )
    row("runner env steps/s, CNN, 1 frame (base: bare loop)", run.get("runner_k1"), run.get("bare_k1"), ">= 0.9")
    row("  RLlib with the wrapper's framestack=4, env steps/s", None, None, "", ship_env.get("steps_per_s"))
    per_frame = lambda v: v / FRAME_BYTES if v else None  # noqa: E731
    two = "{:.3f}"
    row(
        "bytes shipped / step / frame, object store, 4-frame stack",
        per_frame(run.get("object_store_bytes_per_step_k4")),
        1.0,
        "<= 1.1",
        per_frame(ship.get("object_store_bytes_per_step")),
        two,
    )
    row(
        "bytes shipped / step / frame, pickle5, 4-frame stack",
        per_frame(run.get("pickle5_bytes_per_step_k4")),
        1.0,
        "<= 1.1",
        per_frame(ship.get("pickle5_bytes_per_step")),
        two,
    )
    row(
        "  RLlib with the wrapper's framestack=4 (object store)",
        None,
        1.0,
        "",
        per_frame(ship_env.get("object_store_bytes_per_step")),
        two,
    )
    row(
        "  of which model outputs (logp, logits, value) / frame",
        per_frame(run.get("model_output_bytes_per_step_k4")),
        None,
        "",
        None,
        two,
    )
    row(
        f"replay RSS held / stored step / frame ({args.replay_steps} steps)",
        rep.get("rss_over_frames"),
        1.0,
        "<= 1.1",
        rrep.get("rss_over_frames"),
        two,
    )
    row(
        "replay RSS peak while filling / stored step / frame",
        rep.get("peak_rss_over_frames"),
        1.0,
        "",
        rrep.get("peak_rss_over_frames"),
        two,
    )
    row("replay buffer's own bytes / stored step / frame", rep.get("nbytes_over_frames"), 1.0, "", None, two)
    row("replay add, env steps/s (filling)", rep.get("add_steps_per_s"), None, "", rrep.get("add_steps_per_s"))
    sample, rsample = rep.get("sample_transitions_per_s"), rrep.get("sample_transitions_per_s")
    row(f"replay sample, B={args.batch_size} stacked transitions/s (base: RLlib)", sample, rsample, ">= 20")
    row(
        "  ours through sample_episodes + learner FrameStacking pieces",
        rep.get("episodes_sample_transitions_per_s"),
        rsample,
        "",
    )
    row(
        "  ours, sample() of 1-frame obs/next_obs (no stack), for scale",
        rep.get("flat_sample_transitions_per_s"),
        rsample,
        "",
    )
    row("  floor: one gather of the same stacks from a frame array", rep.get("floor_transitions_per_s"), None, "")
    print(
        f"shapes: ours {rep.get('sample_shapes')}; RLlib {rrep.get('sample_shapes')}; RLlib ships "
        f"{ship.get('obs_dtype')} {ship.get('obs_shape')} observations (lookback {ship.get('lookback')}), "
        f"with framestack=4 {ship_env.get('obs_dtype')} {ship_env.get('obs_shape')}; ours uint8, lookback "
        f"{run.get('lookback_k4')}"
    )
    print(json.dumps({"ours_runner": run, "ours_replay": rep, "rllib": theirs}))


if __name__ == "__main__":
    main()
