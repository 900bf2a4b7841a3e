"""``ray-sampler evaluate``: a trained policy's episodes on evaluation runners, their returns and lengths.

The policy comes from a run directory (its final ``policy/``), a checkpoint or a policy folder, and
acts greedily unless ``--explore``. With ``--num-env-runners 0`` (the default) one runner steps the
episodes in this process, and Ray is not started; with more, they are Ray actors (``--address``
attaches to a cluster). The env is the run's, with ``--env-config.KEY VALUE`` overriding its config.
Prints the returns' mean, std, min and max and the lengths, and writes them with every episode's
return to ``evaluation.json``. ``--video DIR`` records every episode as an MP4 file in DIR, ``--render``
shows them in a window (both with the runner in this process; see ``ray_sampler.cli.video``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import tyro

from ray_sampler.cli.options import UsageError
from ray_sampler.cli.ray_cluster import check_address, ray_cluster
from ray_sampler.cli.run_dir import CONFIG_FILE, load_config
from ray_sampler.cli.user_env import parse_env_config
from ray_sampler.cli.video import (
    check_display,
    check_video_encoder,
    check_video_folder,
    probe_render,
    recording_runner,
    render_env_config,
    use_headless_sdl,
    video_files,
    video_prefix,
)
from ray_sampler.data.state_files import write_bytes
from ray_sampler.policy import MultiAgentPolicy, Policy, load_policy, runner_state
from ray_sampler.policy.policy import find_policy_dir
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.evaluation import EvaluationConfig, EvaluationResult, Evaluator, evaluation_seed, mapping_fn
from ray_sampler.sampling.multi_agent_config import ModuleSpec, MultiAgentConfig

__all__ = ["EVALUATION_FILE", "EvaluateCommand", "evaluation_runner", "run_evaluate"]

EVALUATION_FILE = "evaluation.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluateCommand:
    """Run a trained policy's episodes (greedy unless --explore) and print their returns and lengths."""

    checkpoint: tyro.conf.Positional[Path]
    """A run directory (its final policy, else its newest checkpoint's), a checkpoint or a policy folder."""
    episodes: int = 10
    """Episodes to run (with several env runners, rounded up to a whole number per runner)."""
    num_env_runners: int = 0
    """Remote evaluation runners (Ray actors); 0: one runner in this process, without Ray."""
    explore: bool = False
    """Sample actions from the policy's distribution instead of taking the greedy one."""
    seed: int | None = None
    """The evaluation envs' seeds come from this seed's evaluation stream (default: the run's seed, else 0;
    never the seeds its training envs had)."""
    env_config: str = ""
    """JSON object merged over the run's env config; --env-config.KEY VALUE sets one key."""
    max_episode_steps: int | None = None
    """A time limit per episode (default: the run's)."""
    out: Path | None = None
    """Where evaluation.json goes (default: the run directory, else the current directory)."""
    address: str = ""
    """Ray cluster for --num-env-runners >= 1: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if
    set, else a Ray started in this process)."""
    verbose: Annotated[bool, tyro.conf.arg(aliases=("-v",))] = False
    """Show Ray's own log lines."""
    video: Path | None = None
    """Record every episode as an MP4 file in this folder, <env>-episode-<k>.mp4 (the env renders 'rgb_array';
    needs pip install 'ray-sampler[video]' and --num-env-runners 0)."""
    render: bool = False
    """Show the episodes in a window (the env renders 'human'; needs a display and --num-env-runners 0)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise UsageError(f"--episodes: an int >= 1 allowed (got {self.episodes})")
        if self.num_env_runners < 0:
            raise UsageError(f"--num-env-runners: an int >= 0 allowed (got {self.num_env_runners})")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise UsageError(f"--max-episode-steps: an int >= 1 allowed (got {self.max_episode_steps})")
        check_address(self.address or os.environ.get("RAY_ADDRESS", ""))
        if self.video is not None and self.render:
            raise UsageError("--video and --render: one at a time (the env renders 'rgb_array' or 'human')")
        for flag, is_on in (("--video", self.video is not None), ("--render", self.render)):
            if is_on and self.num_env_runners:
                raise UsageError(
                    f"{flag} needs the runner in this process: --num-env-runners 0 allowed (got {self.num_env_runners})"
                )
        if self.video is not None:
            check_video_encoder()


def _run_dir_of(policy_folder: Path) -> Path | None:
    """The run directory a policy folder belongs to (``RUN/policy`` or ``RUN/checkpoints/ckpt-N/policy``)."""
    for candidate in (policy_folder.parent, policy_folder.parent.parent.parent):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return None


def evaluation_runner(
    policy: Policy | MultiAgentPolicy,
    *,
    env_config: dict[str, Any] | None = None,
    seed: int | None = None,
    max_episode_steps: int | None = None,
) -> EnvRunnerConfig:
    """The runner config that acts as ``policy`` does on its run's env (``policy.info``), its env config
    updated with ``env_config``; UsageError for a policy that does not name its env."""
    env = policy.info.get("env")
    if not isinstance(env, str):
        raise UsageError("the policy does not name the env it was trained on (its info has no 'env')")
    config = {**policy.info.get("env_config", {}), **(env_config or {})}
    common: dict[str, Any] = {"env": env, "env_config": config, "num_envs_per_env_runner": 1, "seed": seed}
    if isinstance(policy, MultiAgentPolicy):
        specs: dict[str, ModuleSpec | None] = {
            mid: ModuleSpec(module_class=type(p.module), module_config=dict(p.module_config))
            for mid, p in policy.policies.items()
        }
        first = next(iter(policy.policies.values()))
        multi_agent = MultiAgentConfig(policies=specs, policy_mapping_fn=mapping_fn(policy.mapping))
        return EnvRunnerConfig(
            **common, multi_agent=multi_agent, env_to_module_connectors=first.env_to_module_connectors
        )
    return EnvRunnerConfig(
        **common,
        module_class=type(policy.module),
        module_config=dict(policy.module_config),
        env_to_module_connectors=policy.env_to_module_connectors,
        module_to_env_connectors=policy.module_to_env_connectors,
        normalize_actions=policy.normalize_actions,
        max_episode_steps=max_episode_steps,
    )


def _lines(result: EvaluationResult) -> list[str]:
    s = result.summary()
    lines = [
        f"return {s['episode_return_mean']:.2f} +- {s['episode_return_std']:.2f} (min {s['episode_return_min']:.2f}, "
        f"max {s['episode_return_max']:.2f}) over {result.num_episodes} episodes",
        f"length {s['episode_len_mean']:.1f} (min {s['episode_len_min']:g}, max {s['episode_len_max']:g})",
    ]
    lines += [f"  {key}: return {s[f'{key}/episode_return_mean']:.2f}" for key in result.returns_by]
    if result.num_episodes_lost:
        lines.append(f"{result.num_episodes_lost} episodes lost with a failed runner (not counted above)")
    return lines


def run_evaluate(command: EvaluateCommand) -> EvaluationResult:
    """``ray-sampler evaluate``: loads the policy, runs its episodes, prints and writes what they gave."""
    folder = find_policy_dir(command.checkpoint)
    policy = load_policy(folder)
    run_dir = _run_dir_of(folder)
    saved = load_config(run_dir) if run_dir is not None else {}
    runner_saved = saved.get("env_runner", {}) if isinstance(saved.get("env_runner"), dict) else {}
    seeds = (command.seed, saved.get("seed"), runner_saved.get("seed"), 0)  # the first given
    seed = next(s for s in seeds if s is not None)
    max_steps = command.max_episode_steps or runner_saved.get("max_episode_steps")
    env_config = parse_env_config(command.env_config)
    flag, mode = ("--video", "rgb_array") if command.video is not None else ("--render", "human")
    is_rendering = command.video is not None or command.render
    if is_rendering:
        env_config = render_env_config(env_config, mode, flag=flag)
    if command.video is not None:
        use_headless_sdl()
    runner = evaluation_runner(policy, env_config=env_config, seed=seed, max_episode_steps=max_steps)
    if command.render:
        check_display()
    if command.video is not None:
        check_video_folder(command.video, video_prefix(runner.env))
    frame_size = probe_render(runner, mode=mode, flag=flag) if is_rendering else None  # before any episode
    stepped = runner
    if command.video is not None:
        stepped = recording_runner(runner, command.video, num_episodes=command.episodes)
    evaluation = EvaluationConfig(
        evaluation_duration=command.episodes,
        evaluation_num_env_runners=command.num_env_runners,
        evaluation_config={"explore": command.explore},
    )
    weights, connector_states = runner_state(policy)
    how = "exploring" if command.explore else "greedy"
    print(
        f"ray-sampler evaluate: {folder} on {runner.env}, {command.episodes} episodes, {how}, "
        f"seed {seed} (evaluation stream {evaluation_seed(seed)})",
        flush=True,
    )
    start = time.perf_counter()
    if command.num_env_runners == 0:
        with Evaluator(stepped, evaluation) as evaluator:  # stopping it closes the env: the last video is written
            result = evaluator.evaluate(weights, connector_states)
    else:
        cpus = max(os.cpu_count() or 1, 2)
        with ray_cluster(command.address, num_cpus=cpus, verbose=command.verbose) as where:
            print(f"{command.num_env_runners} evaluation runners ({where})", flush=True)
            with Evaluator(runner, evaluation) as evaluator:
                result = evaluator.evaluate(weights, connector_states)
    seconds = time.perf_counter() - start
    for line in _lines(result):
        print(line, flush=True)
    videos = []
    if command.video is not None:
        videos = video_files(command.video, video_prefix(runner.env), num_episodes=command.episodes)
        size = f", {frame_size[0]}x{frame_size[1]}" if frame_size else ""
        print(f"videos: {len(videos)} MP4 files in {command.video}{size}", flush=True)
    out = command.out or (run_dir if run_dir is not None else Path.cwd()) / EVALUATION_FILE
    record = {
        "policy": str(folder),
        "env": runner.env,
        "env_config": runner.env_config,
        "explore": command.explore,
        "seed": seed,
        "num_env_runners": command.num_env_runners,
        "seconds": seconds,
        **result.summary(),
        "num_episodes": result.num_episodes,
        "episode_returns": result.episode_returns,
        "episode_lengths": result.episode_lengths,
        "returns_by": result.returns_by,
        "num_episodes_lost": result.num_episodes_lost,
    }
    if command.video is not None:
        record["videos"] = [str(p) for p in videos]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    write_bytes(tmp, json.dumps(record, indent=1, default=str).encode())
    os.replace(tmp, out)
    print(f"evaluation: {out} ({seconds:.1f} s)", flush=True)
    if result.num_episodes == 0:
        print("no episode finished", file=sys.stderr)
    if command.video is not None and len(videos) < result.num_episodes:
        print(
            f"{result.num_episodes - len(videos)} of {result.num_episodes} videos missing: the env's render() gave "
            "no frame (gymnasium's warning above says why)",
            file=sys.stderr,
        )
    return result
