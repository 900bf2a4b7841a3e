"""``ray-sampler serve-env``: external runners collect what simulators send, into a replay actor, with
no learner; the episodes are saved as Parquet at the end (``--output``).

The runners act with the module they start with (the built-in MLP's first weights, seeded; or a
run's policy weights never: this command does not train) for clients that ask for actions, and take
the steps of clients that act on their own (``log_action``, or local inference). Each iteration
waits for ``rollout_fragment_length x num_envs_per_env_runner`` steps from every runner's clients
and prints what came; the run ends at ``--max-env-steps`` (or Ctrl-C), then the replay actor writes
its buffer to ``--output`` (the verified Parquet of docs/replay.md; ``restore_buffer`` or any
Arrow tool reads it).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ray_sampler.cli.external import ExternalOptions, addresses_line, check_ports_free
from ray_sampler.cli.options import UsageError
from ray_sampler.cli.ray_cluster import check_address, ray_cluster
from ray_sampler.cli.user_env import check_env_name
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig, EnvRunnerGroupConfig

__all__ = ["ServeEnvCommand", "run_serve_env"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeEnvCommand:
    """Serve external simulators and collect their episodes into a replay actor, saved as Parquet at
    the end; no learner (docs/external.md)."""

    external: ExternalOptions = dataclasses.field(default_factory=ExternalOptions)
    """Where the runners listen, and the spaces the clients use (--external.spaces-from is needed)."""
    output: Path = Path("episodes.parquet")
    """The Parquet file the collected episodes are written to at the end (replaced atomically)."""
    max_env_steps: int = 10_000
    """Stop once this many env steps came."""
    num_env_runners: int = 1
    """Runners, each listening on its own port (--external.port, +1, ...)."""
    rollout_fragment_length: int = 200
    """Steps a runner's clients send per iteration."""
    batch_mode: BatchMode = BatchMode.TRUNCATE_EPISODES
    """truncate_episodes: every step as it comes, running episodes cut with lookback; complete_episodes:
    whole episodes only."""
    capacity_env_steps: int = 1_000_000
    """Env steps the replay actor keeps (the oldest whole episodes go first)."""
    address: str = ""
    """Ray cluster to attach to: auto, host:port or ray://host:10001 (default: RAY_ADDRESS if set, else
    a Ray started in this process and stopped at the end)."""
    verbose: bool = False
    """Show Ray's own log lines."""

    def __post_init__(self) -> None:
        check_address(self.address or os.environ.get("RAY_ADDRESS", ""))
        if not self.external.spaces_from:
            raise UsageError("--external.spaces-from: a gymnasium id or env is needed (the spaces the clients use)")
        check_env_name(self.external.spaces_from)
        for name in ("max_env_steps", "num_env_runners", "rollout_fragment_length", "capacity_env_steps"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')}: an int >= 1 allowed (got {getattr(self, name)})")
        if not self.output.parent.is_dir():
            raise UsageError(f"--output: the directory of {str(self.output)!r} does not exist")


def run_serve_env(command: ServeEnvCommand) -> None:
    """Runs the command (see the module docstring): UsageError before Ray starts for a bad one."""
    options = dataclasses.replace(command.external, serve=True)
    runner, group = options.apply(
        EnvRunnerConfig(
            env=str(options.spaces_from),
            num_envs_per_env_runner=1,
            rollout_fragment_length=command.rollout_fragment_length,
            batch_mode=command.batch_mode,
        ),
        EnvRunnerGroupConfig(num_env_runners=command.num_env_runners, num_cpus_per_env_runner=0.5),
    )
    if (command.address or os.environ.get("RAY_ADDRESS", "") or "local") == "local":
        check_ports_free(options, command.num_env_runners)
    from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
    from replay import ReplayConfig, create_replay_actor

    output = command.output.resolve()  # the replay actor may have another working directory
    with ray_cluster(command.address, num_cpus=max(os.cpu_count() or 1, 2), verbose=command.verbose) as where:
        import ray

        n = command.num_env_runners
        print(f"ray-sampler serve-env: {options.spaces_from}'s spaces, {n} env runner{'' if n == 1 else 's'} ({where})")
        print(addresses_line(options, command.num_env_runners), flush=True)
        replay = create_replay_actor(ReplayConfig(capacity_env_steps=command.capacity_env_steps), num_cpus=0.5)
        total, episodes, start = 0, 0, time.perf_counter()
        try:
            with EnvRunnerGroup(runner, group) as runners:
                it = 0
                while total < command.max_env_steps:
                    it += 1
                    answers = runners.sample_to_replay(replay)
                    steps = sum(m.num_env_steps for m in answers)
                    returns = [r for m in answers for r in m.episode_returns]
                    total, episodes = total + steps, episodes + len(returns)
                    clients = sum((m.external or {}).get("num_clients_connected", 0) for m in answers)
                    mean = f"{sum(returns) / len(returns):.1f}" if returns else "-"
                    print(
                        f"iter {it}: {total}/{command.max_env_steps} env steps, {episodes} episodes, "
                        f"mean return {mean} (this iteration's), {clients} clients connected",
                        flush=True,
                    )
        finally:
            path = ray.get(replay.save.remote(str(output)), timeout=600) if total else None
            elapsed = time.perf_counter() - start
            saved = f"saved to {path}" if path else "nothing to save"
            print(f"collected {total} env steps, {episodes} episodes in {elapsed:.1f} s; {saved}", flush=True)
