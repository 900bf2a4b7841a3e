"""The ``ray-sampler`` command line.

``ray-sampler train`` (the main job) starts a local Ray cluster in-process and trains PPO on
CartPole-v1 with remote env runners, a line per iteration; ``ray-sampler train-dqn`` trains DQN
through a replay actor; ``ray-sampler sample`` only samples with the runners;
``ray-sampler demo`` builds, cuts, joins and packs real episodes without Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from ray_sampler.data.arrow_format import arrow_to_columnar, columnar_to_arrow
from ray_sampler.data.columnar import columnar_to_episodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError, InsufficientResourcesError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.validate import check_int

if TYPE_CHECKING:  # the learner package (and Ray) load only when a training command runs
    from learner.metrics import TrainResult
    from learner.train import PPOTrainingConfig
    from learner.train_dqn import DQNTrainingConfig

__all__ = [
    "DQNTrainArgs",
    "DemoConfig",
    "PPOTrainArgs",
    "RayArgs",
    "SampleJobConfig",
    "add_config_arguments",
    "check_address",
    "main",
    "ray_cluster",
    "run_demo",
    "run_sample_job",
    "run_training",
]


EXIT_TARGET_MISSED = 1
"""Exit status of a training run that had a target return and did not reach it."""
EXIT_USAGE = 2
"""Exit status of a usage error (a bad flag or value, a request the cluster can never hold)."""
EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), once the actors are stopped."""

TASK_EVENTS_IN_GCS = 10_000
"""Task events the embedded cluster's GCS keeps (``RAY_task_events_max_num_task_in_gcs`` on a head)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RayArgs:
    """Where a job's Ray runs: flags every Ray job takes."""

    address: str = ""
    """Ray cluster to attach to: ``auto``, ``host:port`` or ``ray://host:10001`` (default: ``RAY_ADDRESS``
    if set, else ``local``: a Ray started in this process and stopped at the end)."""

    def __post_init__(self) -> None:
        check_address(self.address or os.environ.get("RAY_ADDRESS", ""))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SampleJobConfig(RayArgs):
    """Knobs of ``ray-sampler sample``."""

    env: str = "CartPole-v1"
    """Gymnasium id (or a name given to register_env) every runner steps."""
    num_env_runners: int = 2
    """Remote EnvRunner actors."""
    num_cpus_per_env_runner: float = 0.5
    """CPUs each runner actor reserves."""
    num_envs_per_env_runner: int = 8
    """Sub-envs per runner."""
    rollout_fragment_length: int = 128
    """Steps per sub-env per iteration."""
    batch_mode: str = "truncate_episodes"
    """``truncate_episodes`` or ``complete_episodes``."""
    iterations: int = 5
    """Sampling iterations to run."""
    seed: int = 0
    """Base seed."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("num_env_runners", "iterations"):
            check_int(name, getattr(self, name), minimum=1)


def check_address(address: str) -> str:
    """``address`` if it is empty, ``local``, ``auto``, ``host:port`` or ``ray://host:port``."""
    import re

    if address in ("", "local", "auto") or re.fullmatch(r"(ray://)?[\w.\-]+:\d{1,5}", address):
        return address
    raise ConfigError(
        f"'address' (--address or RAY_ADDRESS) must be auto, local, host:port or ray://host:port (got {address!r})"
    )


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Exits with one line if nothing answers at a ``host:port`` address (Ray itself retries for minutes)."""
    import socket

    if address == "auto":
        return  # Ray finds the address on this machine, or says at once that there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise SystemExit(
            f"ray-sampler: cannot attach to the Ray cluster at {address!r}: nothing answers at {host}:{port} ({e})"
        ) from None


@contextlib.contextmanager
def ray_cluster(address: str, *, num_cpus: int) -> Iterator[str]:
    """Ray for one job: attached to ``address`` (or ``RAY_ADDRESS``), which is left running, or
    started in this process with ``num_cpus`` CPUs and stopped at the end. Yields a description."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS", "") or "local"
    quiet: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address == "local":
        # A long job's GCS keeps the events of at most this many tasks (Ray's default: 100,000).
        system_config = {"task_events_max_num_task_in_gcs": TASK_EVENTS_IN_GCS}
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _system_config=system_config, **quiet)
        where = "local Ray cluster"
    else:
        _check_reachable(address)
        try:  # never num_cpus here: the cluster's own resources count
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ray.exceptions.RayError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SystemExit(
                f"ray-sampler: cannot attach to the Ray cluster at {address!r}: {first} (is it up? with token "
                "authentication, set RAY_AUTH_MODE=token and the cluster's token: see the README)"
            ) from None
        where = f"Ray cluster at {address} ({ray.cluster_resources().get('CPU', 0):g} CPUs)"
    try:
        yield where
    finally:
        ray.shutdown()  # attached: disconnects this driver only; the cluster stays up


def run_sample_job(cfg: SampleJobConfig) -> None:
    """Samples ``cfg.iterations`` times with a group of runners on an in-process Ray cluster."""
    runner_config = EnvRunnerConfig(
        env=cfg.env,
        num_envs_per_env_runner=cfg.num_envs_per_env_runner,
        rollout_fragment_length=cfg.rollout_fragment_length,
        batch_mode=cfg.batch_mode,
        seed=cfg.seed,
    )

    from ray_sampler.sampling.env_runner_group import EnvRunnerGroup

    group_config = EnvRunnerGroupConfig(
        num_env_runners=cfg.num_env_runners, num_cpus_per_env_runner=cfg.num_cpus_per_env_runner
    )
    with ray_cluster(cfg.address, num_cpus=max(os.cpu_count() or 1, 2)) as where:
        print(
            f"ray-sampler sample: {cfg.env}, {cfg.num_env_runners} env runners x {cfg.num_envs_per_env_runner} "
            f"sub-envs, {cfg.batch_mode}, {cfg.iterations} iterations ({where})"
        )
        group = EnvRunnerGroup(runner_config, group_config)
        total_steps, start = 0, time.perf_counter()
        with group:
            for it in range(1, cfg.iterations + 1):
                t0 = time.perf_counter()
                episodes = group.sample()
                steps = sum(len(ep) for ep in episodes)
                total_steps += steps
                m = group.metrics
                mean = f"{m.episode_return_mean:.1f}" if m.episode_return_mean is not None else "-"
                per_runner = ", ".join(f"{i}: {v / 1e3:.1f}k/s" for i, v in sorted(m.runner_env_steps_per_s.items()))
                print(
                    f"iter {it}: {steps} env steps, {m.num_episodes} episodes done, mean return {mean}, "
                    f"{steps / (time.perf_counter() - t0) / 1e3:.1f}k steps/s (runners {per_runner}), "
                    f"weights v{group.weights_version}"
                )
        elapsed = time.perf_counter() - start
        print(f"total: {total_steps} env steps in {elapsed:.1f} s ({total_steps / elapsed / 1e3:.1f}k steps/s)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """Knobs of ``ray-sampler demo``."""

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOTrainArgs(RayArgs):
    """Flags of ``ray-sampler train``; ``to_config()`` composes them into a PPOTrainingConfig."""

    env: str = "CartPole-v1"
    """Gymnasium id to train on."""
    num_env_runners: int = 2
    """Remote env runners."""
    num_cpus_per_env_runner: float = 0.5
    """CPUs each runner actor reserves."""
    num_envs_per_env_runner: int = 8
    """Sub-envs per runner."""
    rollout_fragment_length: int = 128
    """Steps per sub-env per iteration."""
    num_learners: int = 0
    """Learner actors (0: one local learner)."""
    lr: float = 1e-3
    """Adam learning rate."""
    max_iterations: int = 60
    """Stop after this many iterations."""
    target_return: str = "auto"
    """Stop once the mean return of the last ``stop_window`` episodes reaches this number; ``auto``: the
    env's ``reward_threshold`` (475 for CartPole-v1); ``none`` (or ``auto`` for an env without one):
    no target, the run uses its whole budget."""
    stop_window: int = 100
    """Finished episodes in the stop rule's mean (as RLlib's ``episode_return_mean``)."""
    seed: int = 0
    """Seed of the envs, the policy and the minibatch shuffling."""

    def to_config(self) -> PPOTrainingConfig:
        """The training config: the defaults of PPOTrainingConfig with these flags set."""
        from learner.train import PPOTrainingConfig

        base = PPOTrainingConfig()
        return dataclasses.replace(
            base,
            env_runner=dataclasses.replace(
                base.env_runner,
                env=self.env,
                num_envs_per_env_runner=self.num_envs_per_env_runner,
                rollout_fragment_length=self.rollout_fragment_length,
                seed=self.seed,
            ),
            env_runner_group=dataclasses.replace(
                base.env_runner_group,
                num_env_runners=self.num_env_runners,
                num_cpus_per_env_runner=self.num_cpus_per_env_runner,
            ),
            ppo=dataclasses.replace(base.ppo, lr=self.lr, seed=self.seed),
            num_learners=self.num_learners,
            max_iterations=self.max_iterations,
            target_return=_target(self.target_return),
            stop_window=self.stop_window,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNTrainArgs(RayArgs):
    """Flags of ``ray-sampler train-dqn`` (defaults that train CartPole-v1); ``to_config()`` composes
    them into a DQNTrainingConfig."""

    env: str = "CartPole-v1"
    """Gymnasium id to train on."""
    num_env_runners: int = 2
    """Remote env runners."""
    num_cpus_per_env_runner: float = 0.5
    """CPUs each runner actor reserves."""
    num_envs_per_env_runner: int = 4
    """Sub-envs per runner."""
    rollout_fragment_length: int = 32
    """Steps per sub-env per runner request."""
    keep_sampling: bool = True
    """Runners sample their next fragment while the learners update."""
    num_learners: int = 0
    """Learner actors pulling from the replay (0: one local learner)."""
    lr: float = 1e-3
    """Adam learning rate."""
    hidden_size: int = 64
    """Units of each of the Q-network's two ReLU layers."""
    batch_size: int = 64
    """Transitions per gradient step (over all learners together)."""
    n_step: int = 3
    """Steps of the n-step return."""
    updates_per_env_step: float = 0.5
    """Gradient steps per new env step."""
    target_update_every: int = 128
    """Gradient steps between target network copies."""
    learning_starts: int = 1000
    """Env steps stored before the first gradient step (the replay's ``min_size_to_sample``, at least 1)."""
    epsilon_final: float = 0.04
    """Exploration rate after the decay."""
    epsilon_steps: int = 8000
    """Env steps over which epsilon falls linearly from 1 to ``epsilon_final``."""
    replay_capacity: int = 50_000
    """Env steps the replay keeps."""
    prioritized: bool = True
    """Prioritized replay (|TD error| priorities); False: uniform (see bench/RESULTS.md: with
    these defaults prioritized replay reached 450 in every measured run, uniform in most)."""
    max_env_steps: int = 150_000
    """Stop after this many env steps."""
    target_return: str = "auto"
    """Stop once the mean return of the last ``stop_window`` episodes reaches this number; ``auto``: the
    env's ``reward_threshold`` (475 for CartPole-v1); ``none`` (or ``auto`` for an env without one):
    no target, the run uses its whole budget."""
    stop_window: int = 100
    """Finished episodes in the stop rule's mean (as RLlib's ``episode_return_mean``)."""
    seed: int = 0
    """Seed of the envs, the network, exploration and the replay's sampling."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # The two flags that are not one config field each: checked here, where their names are known.
        check_int("hidden_size", self.hidden_size, minimum=1)
        check_int("replay_capacity", self.replay_capacity, minimum=1)
        check_int("learning_starts", self.learning_starts, minimum=0, maximum=self.replay_capacity)

    def to_config(self) -> DQNTrainingConfig:
        """The training config: the defaults of DQNTrainingConfig with these flags set."""
        from learner.train_dqn import DQNTrainingConfig

        base = DQNTrainingConfig()
        module_config = {**base.env_runner.module_config, "hidden_sizes": (self.hidden_size,) * 2, "seed": self.seed}
        return dataclasses.replace(
            base,
            env_runner=dataclasses.replace(
                base.env_runner,
                env=self.env,
                num_envs_per_env_runner=self.num_envs_per_env_runner,
                rollout_fragment_length=self.rollout_fragment_length,
                seed=self.seed,
                module_config=module_config,
            ),
            env_runner_group=dataclasses.replace(
                base.env_runner_group,
                num_env_runners=self.num_env_runners,
                num_cpus_per_env_runner=self.num_cpus_per_env_runner,
                keep_sampling=self.keep_sampling,
            ),
            dqn=dataclasses.replace(base.dqn, lr=self.lr, target_update_every=self.target_update_every),
            replay=dataclasses.replace(
                base.replay,
                capacity_env_steps=self.replay_capacity,
                min_size_to_sample=max(self.learning_starts, 1),
                prioritized=self.prioritized,
                seed=self.seed,
            ),
            num_learners=self.num_learners,
            batch_size=self.batch_size,
            n_step=self.n_step,
            updates_per_env_step=self.updates_per_env_step,
            epsilon_final=self.epsilon_final,
            epsilon_steps=self.epsilon_steps,
            max_env_steps=self.max_env_steps,
            target_return=_target(self.target_return),
            stop_window=self.stop_window,
        )


def run_training(cfg: PPOTrainingConfig | DQNTrainingConfig, *, address: str = "") -> TrainResult:
    """``ray-sampler train`` / ``train-dqn``: PPO or DQN on an in-process Ray cluster, or the one at
    ``address`` (see learner.train and learner.train_dqn)."""
    from learner.train import PPOTrainingConfig, ReturnTracker, resolve_target, train_ppo
    from learner.train_dqn import train_dqn

    assert isinstance(cfg.env_runner.env, str), "the training configs check that env is a gymnasium id"
    stop_rule = ReturnTracker(resolve_target(cfg.env_runner.env, cfg.target_return), cfg.stop_window).describe()
    with ray_cluster(address, num_cpus=max(os.cpu_count() or 1, 2)) as where:
        print(
            f"ray-sampler train: {'PPO' if isinstance(cfg, PPOTrainingConfig) else 'DQN'} on {cfg.env_runner.env}, "
            f"{cfg.env_runner_group.num_env_runners} env runners x {cfg.env_runner.num_envs_per_env_runner} "
            f"sub-envs ({where})"
        )
        print(stop_rule)
        return train_ppo(cfg) if isinstance(cfg, PPOTrainingConfig) else train_dqn(cfg)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false (got {text!r})")


def _target(text: str | float) -> float | str | None:
    """``--target-return``'s value for the config: a number, ``"auto"`` or None."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    lowered = str(text).strip().lower()
    if lowered in ("auto", "none"):
        return None if lowered == "none" else "auto"
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"'target_return' must be a number, auto or none (got {text!r})") from None


def add_config_arguments(parser: argparse.ArgumentParser, config_class: type) -> None:
    """A ``--field-name`` option per field of a config dataclass, typed by its default."""
    for field in dataclasses.fields(config_class):
        kind = _parse_bool if isinstance(field.default, bool) else type(field.default)
        parser.add_argument(
            f"--{field.name.replace('_', '-')}", type=kind, default=field.default, help=f"(default: {field.default})"
        )


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``ray-sampler`` command."""
    parser = argparse.ArgumentParser(prog="ray-sampler", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    jobs: dict[str, tuple[type, Callable[..., Any], str]] = {
        "train": (PPOTrainArgs, _run_train, "train PPO with env runners on a local Ray cluster"),
        "train-dqn": (DQNTrainArgs, _run_train, "train DQN: env runners -> replay actor -> learners"),
        "sample": (SampleJobConfig, run_sample_job, "sample with a group of env runners on a local Ray cluster"),
        "demo": (DemoConfig, run_demo, "build, cut, join and pack episodes from a real gymnasium env (no Ray)"),
    }
    for name, (config_class, _, help_text) in jobs.items():
        add_config_arguments(sub.add_parser(name, help=help_text), config_class)
    args = parser.parse_args(argv)
    config_class, run, _ = jobs[args.command]
    try:
        result = run(config_class(**{f.name: getattr(args, f.name) for f in dataclasses.fields(config_class)}))
    except (ConfigError, InsufficientResourcesError) as e:  # the user's input: one line, no traceback
        print(f"ray-sampler {args.command}: error: {e}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except KeyboardInterrupt:  # the actors and Ray were stopped on the way out (finally blocks)
        print(f"ray-sampler {args.command}: interrupted; actors stopped", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    if getattr(result, "target_return", None) is not None and not result.reached:
        raise SystemExit(EXIT_TARGET_MISSED)


def _run_train(args: PPOTrainArgs | DQNTrainArgs) -> TrainResult:
    return run_training(args.to_config(), address=args.address)


if __name__ == "__main__":
    main(sys.argv[1:])
