"""``ray-sampler sample`` (sampling only, with a group of remote runners) and ``ray-sampler demo``
(episodes built, cut, joined and packed from a real env, without Ray)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np

from learner.train import PPOTrainingConfig
from ray_sampler.cli.options import check_env_id
from ray_sampler.cli.ray_cluster import check_address, ray_cluster
from ray_sampler.cli.user_env import EnvOptions, check_env_builds, check_env_name, job_runtime_env
from ray_sampler.data.arrow_format import arrow_to_columnar, columnar_to_arrow
from ray_sampler.data.columnar import columnar_to_episodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.validate import check_int

__all__ = ["DemoConfig", "SampleJobConfig", "run_demo", "run_sample_job"]


_TRAIN = PPOTrainingConfig()
"""``ray-sampler train``'s defaults: ``sample`` starts the same runners unless told otherwise."""
_BATCH_MODE = BatchMode(_TRAIN.env_runner.batch_mode)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleJobConfig(EnvOptions):
    """Sample with a group of remote env runners and print each iteration's throughput (by default
    the runners ``ray-sampler train`` starts)."""

    address: str = ""
    """Ray cluster to attach to: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if set, else
    a Ray started in this process and stopped at the end)."""
    verbose: bool = False
    """Show Ray's own log lines (startup, its workers' output)."""
    num_env_runners: int = _TRAIN.env_runner_group.num_env_runners
    """Remote EnvRunner actors."""
    num_cpus_per_env_runner: float = _TRAIN.env_runner_group.num_cpus_per_env_runner
    """CPUs each runner actor reserves."""
    num_envs_per_env_runner: int = _TRAIN.env_runner.num_envs_per_env_runner
    """Sub-envs per runner."""
    rollout_fragment_length: int = _TRAIN.env_runner.rollout_fragment_length
    """Steps per sub-env per iteration."""
    batch_mode: BatchMode = _BATCH_MODE
    """truncate_episodes: fixed-size chunks cut with lookback; complete_episodes: whole episodes."""
    iterations: int = 5
    """Sampling iterations to run."""
    seed: int = 0
    """Base seed."""

    def __post_init__(self) -> None:
        check_address(self.address or os.environ.get("RAY_ADDRESS", ""))
        check_env_name(self.env)
        for name in ("num_env_runners", "iterations"):
            check_int(name, getattr(self, name), minimum=1)


def run_sample_job(cfg: SampleJobConfig) -> None:
    """Samples ``cfg.iterations`` times with a group of runners on an in-process Ray cluster."""
    multi_agent = check_env_builds(cfg.env, cfg.env_config_dict(), multi_agent_ok=True)  # before Ray starts
    runner_config = EnvRunnerConfig(
        env=cfg.env,
        env_config=cfg.env_config_dict(),
        num_envs_per_env_runner=cfg.num_envs_per_env_runner,
        rollout_fragment_length=cfg.rollout_fragment_length,
        batch_mode=cfg.batch_mode,
        seed=cfg.seed,
    )

    from ray_sampler.sampling.env_runner_group import EnvRunnerGroup

    group_config = EnvRunnerGroupConfig(
        num_env_runners=cfg.num_env_runners, num_cpus_per_env_runner=cfg.num_cpus_per_env_runner
    )
    attached = (cfg.address or os.environ.get("RAY_ADDRESS", "") or "local") != "local"
    runtime_env, shipped = job_runtime_env(cfg, attached=attached)
    cpus = max(os.cpu_count() or 1, 2)
    with ray_cluster(cfg.address, num_cpus=cpus, verbose=cfg.verbose, runtime_env=runtime_env) as where:
        print(
            f"ray-sampler sample: {cfg.env}, {cfg.num_env_runners} env runners x {cfg.num_envs_per_env_runner} "
            f"sub-envs, {BatchMode(cfg.batch_mode).value}, {cfg.iterations} iterations "
            f"({where}{'; ' + shipped if shipped else ''})"
        )
        group = EnvRunnerGroup(runner_config, group_config)
        total_steps, start = 0, time.perf_counter()
        with group:
            for it in range(1, cfg.iterations + 1):
                t0 = time.perf_counter()
                episodes: list[Any] = group.sample()  # MultiAgentEpisode chunks for a multi-agent env
                steps = sum(len(ep) for ep in episodes)
                total_steps += steps
                agent_steps = sum(ep.agent_steps() for ep in episodes if isinstance(ep, MultiAgentEpisode))
                agents = f" ({agent_steps} agent steps)" if multi_agent else ""
                m = group.metrics
                mean = f"{m.episode_return_mean:.1f}" if m.episode_return_mean is not None else "-"
                per_runner = ", ".join(f"{i}: {v / 1e3:.1f}k/s" for i, v in sorted(m.runner_env_steps_per_s.items()))
                print(
                    f"iter {it}: {steps} env steps{agents}, {m.num_episodes} episodes done, mean return {mean}, "
                    f"{steps / (time.perf_counter() - t0) / 1e3:.1f}k steps/s (runners {per_runner}), "
                    f"weights v{group.weights_version}"
                )
        elapsed = time.perf_counter() - start
        print(f"total: {total_steps} env steps in {elapsed:.1f} s ({total_steps / elapsed / 1e3:.1f}k steps/s)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Build, cut, join and pack episodes from a real gymnasium env with random actions (no Ray)."""

    env: str = "CartPole-v1"
    """Gymnasium id of the env to step with random actions."""
    num_env_steps: int = 2000
    """Env steps to collect."""
    cut_every: int = 100
    """Cut the ongoing episode every this many env steps (as a runner does between sample() calls)."""
    lookback: int = 4
    """Steps of lookback each continuation chunk keeps."""
    seed: int = 0
    """Seed of the env and the random actions."""

    def __post_init__(self) -> None:
        check_env_id(self.env)
        for name in ("num_env_steps", "cut_every"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("lookback", self.lookback, minimum=0)


def _collect(cfg: DemoConfig) -> list[SingleAgentEpisode]:
    """Steps the env, cutting the ongoing episode every ``cut_every`` steps; returns all chunks."""
    env = gym.make(cfg.env)
    env.action_space.seed(cfg.seed)
    spaces: dict[str, Any] = {"observation_space": env.observation_space, "action_space": env.action_space}
    chunks: list[SingleAgentEpisode] = []
    episode = SingleAgentEpisode(**spaces)
    episode.add_env_reset(*env.reset(seed=cfg.seed))
    for t in range(1, cfg.num_env_steps + 1):
        action = env.action_space.sample()
        obs, reward, terminated, truncated, infos = env.step(action)
        episode.add_env_step(obs, action, reward, infos, terminated=terminated, truncated=truncated)
        if episode.is_done:
            chunks.append(episode)
            episode = SingleAgentEpisode(**spaces)
            episode.add_env_reset(*env.reset())
        elif t % cfg.cut_every == 0:
            chunks.append(episode)
            episode = episode.cut(len_lookback_buffer=cfg.lookback)
    chunks.append(episode)
    env.close()
    return chunks


def run_demo(cfg: DemoConfig) -> None:
    """Collects chunks, joins them, packs them to columnar and Arrow form, and prints each step."""
    print(f"ray-sampler demo: {cfg.env}, {cfg.num_env_steps} env steps, random actions, seed {cfg.seed}")
    chunks = _collect(cfg)
    whole: dict[str, SingleAgentEpisode] = {}
    for chunk in chunks:
        if chunk.id_ in whole:
            whole[chunk.id_].concat_episode(chunk)
        else:
            whole[chunk.id_] = SingleAgentEpisode.from_state(chunk.get_state())
    done = [e for e in whole.values() if e.is_done]
    steps = sum(len(e) for e in whole.values())
    print(
        f"collected {len(chunks)} chunks of {len(whole)} episodes "
        f"(cut every {cfg.cut_every} steps, lookback {cfg.lookback})"
    )
    if done:
        print(
            f"episodes done: {len(done)}, mean return {np.mean([e.get_return() for e in done]):.1f}, "
            f"mean length {np.mean([len(e) for e in done]):.1f}"
        )
    status = "no step lost or duplicated" if steps == cfg.num_env_steps else "STEP COUNT MISMATCH"
    print(f"joined chunks with concat_episode: {len(whole)} episodes, {steps} steps ({status})")
    col = episodes_to_columnar(chunks)
    per_step = col.serialized_nbytes() / col.num_env_steps
    print(
        f"columnar: {col.num_env_steps} steps + {int(col.lookback_lens.sum())} lookback steps, "
        f"{per_step:.1f} bytes/step shipped (raw {col.raw_step_nbytes()}, ratio {per_step / col.raw_step_nbytes():.2f})"
    )
    table = columnar_to_arrow(col)
    back = columnar_to_episodes(arrow_to_columnar(table))
    same = all(
        np.array_equal(
            a.to_numpy().get_observations(slice(-len(a) - 1 - a.len_lookback_buffer, None)),
            b.get_observations(slice(-len(b) - 1 - b.len_lookback_buffer, None)),
        )
        and np.array_equal(a.get_actions(), b.get_actions())
        and a.get_return() == b.get_return()
        for a, b in zip(chunks, back)
    )
    print(f"arrow: {table.num_rows} rows x {table.num_columns} columns; round trip equal: {'yes' if same else 'NO'}")
    if steps != cfg.num_env_steps or not same:
        raise SystemExit(1)
