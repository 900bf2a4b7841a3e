"""Multi-agent PPO: one PPO learner per trained module, on the chunks of every agent mapped to it.

Each iteration the EnvRunnerGroup of MultiAgentEnvRunners samples; each module's learner builds its
train batch from its agents' chunks (``module_episodes``: every agent that maps to the module, each
on its own time), so GAE runs per agent on the agent's own steps, bootstraps at a time limit (the
episode's agents are truncated, not terminated) and at a chunk's end, never at a terminal, and
advantages are standardized per module; then every trained module's weights go to the runners
in one object. Modules left out of ``policies_to_train`` act with their first weights and never
learn. The stop rule reads the summed return of every agent (RLlib's ``episode_return_mean``).
Ray must be running.

>>> from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
>>> ep = MultiAgentEpisode(agent_to_module_mapping_fn=lambda aid, episode: "shared")
>>> ep.add_env_reset(observations={"a": 0, "b": 0})
>>> sorted((mid, [sa.id_[-1] for sa in sas]) for mid, sas in module_episodes([ep]).items())
[('shared', ['a', 'b'])]
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from learner.learner import Learner, PPOConfig
from learner.train import ReturnTracker
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.multi_agent_columnar import unpack_columnar
from ray_sampler.data.multi_agent_episode import MultiAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner_group import EnvRunnerGroup
from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner
from ray_sampler.validate import check_int, check_number, check_optional, check_type

__all__ = ["MultiAgentPPOConfig", "MultiAgentPPOResult", "module_episodes", "train_multi_agent_ppo"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiAgentPPOConfig:
    """A multi-agent PPO run: the runners (their ``multi_agent`` names the modules and the mapping),
    PPO's hyperparameters (the same for every module), and the stop rule."""

    env_runner: EnvRunnerConfig
    """The runners' config; ``multi_agent`` None: one module for every agent."""
    env_runner_group: EnvRunnerGroupConfig = dataclasses.field(default_factory=EnvRunnerGroupConfig)
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    policies_to_train: tuple[str, ...] | None = None
    """Modules that learn; None: all."""
    target_return: float | None = None
    """Stop once the mean summed return of the last ``stop_window`` episodes reaches it; None: never."""
    stop_window: int = 100
    max_iterations: int = 100

    def __post_init__(self) -> None:
        check_type("env_runner", self.env_runner, EnvRunnerConfig)
        check_type("env_runner_group", self.env_runner_group, EnvRunnerGroupConfig)
        check_type("ppo", self.ppo, PPOConfig)
        check_optional(check_number, "target_return", self.target_return)
        check_int("stop_window", self.stop_window, minimum=1)
        check_int("max_iterations", self.max_iterations, minimum=1)
        modules = (self.env_runner.multi_agent or MultiAgentConfig()).module_ids
        unknown = sorted(set(self.policies_to_train or ()) - set(modules))
        if unknown:
            raise ConfigError(
                f"'policies_to_train' names modules {unknown} that 'policies' lacks (has {list(modules)})"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiAgentPPOResult:
    """What a multi-agent PPO run reached."""

    reached: bool
    mean_return: float
    """Mean summed return of the last ``stop_window`` episodes (NaN before any ended)."""
    env_steps: int
    agent_steps: int
    iterations: int
    elapsed_s: float
    module_returns: dict[str, float]
    """Per module, the mean whole-episode return of its agents (summed) over the last iteration's
    finished episodes."""


def module_episodes(episodes: list[MultiAgentEpisode]) -> dict[str, list[SingleAgentEpisode]]:
    """Each module's agent chunks: every agent's chunk, under the module its episode maps it to."""
    out: dict[str, list[SingleAgentEpisode]] = {}
    for ep in episodes:
        for aid, sa in ep.agent_episodes.items():
            out.setdefault(ep.module_for(aid), []).append(sa)
    return out


def train_multi_agent_ppo(cfg: MultiAgentPPOConfig, *, log: Callable[[str], None] = print) -> MultiAgentPPOResult:
    """Trains until ``target_return`` or ``max_iterations`` (see the module docstring); a line per
    iteration to ``log``."""
    runner_config = cfg.env_runner
    if runner_config.multi_agent is None:
        runner_config = dataclasses.replace(runner_config, multi_agent=MultiAgentConfig())
    probe = MultiAgentEnvRunner(dataclasses.replace(runner_config, num_envs_per_env_runner=1))
    probe.stop()
    trained = set(cfg.policies_to_train or probe.module_ids)
    learners = {mid: Learner(module, cfg.ppo) for mid, module in probe.modules.items() if mid in trained}
    frozen = {mid: module.get_state() for mid, module in probe.modules.items() if mid not in trained}
    tracker = ReturnTracker(cfg.target_return, cfg.stop_window)
    steps = agent_steps = it = 0
    start = time.perf_counter()
    module_returns: dict[str, float] = {}
    with EnvRunnerGroup(runner_config, cfg.env_runner_group) as runners:
        runners.sync_weights({**frozen, **{mid: lr.module.get_state() for mid, lr in learners.items()}})
        while it < cfg.max_iterations:
            it += 1
            answers = runners.sample_columnar()
            episodes: list[Any] = [ep for col, _ in answers if col is not None for ep in unpack_columnar(col)]
            steps += sum(len(ep) for ep in episodes)
            agent_steps += sum(ep.agent_steps() for ep in episodes)
            tracker.add(runners.metrics.episode_returns)
            losses = {}
            for mid, chunks in module_episodes(episodes).items():
                chunks = [sa for sa in chunks if len(sa)]
                if mid in learners and chunks:
                    losses[mid] = learners[mid].update_from_episodes(chunks).policy_loss
            runners.sync_weights({mid: lr.module.get_state() for mid, lr in learners.items()})
            module_returns = _module_returns([m for _, m in answers])
            per_module = ", ".join(f"{mid} {r:.1f}" for mid, r in sorted(module_returns.items()))
            log(
                f"iter {it}: {steps} env steps, mean return {tracker.mean:.1f} (last {tracker.count} episodes)"
                f"{'; per module ' + per_module if per_module else ''}, {time.perf_counter() - start:.1f} s"
            )
            if tracker.reached:
                break
    return MultiAgentPPOResult(
        reached=tracker.reached, mean_return=tracker.mean, env_steps=steps, agent_steps=agent_steps,
        iterations=it, elapsed_s=time.perf_counter() - start, module_returns=module_returns,
    )  # fmt: skip


def _module_returns(answers: list[Any]) -> dict[str, float]:
    """Per module, the mean whole-episode return of its agents (summed) over the episodes that ended
    in this iteration (the runners' ``module_episode_returns``)."""
    sums: dict[str, list[float]] = {}
    for m in answers:
        for mid, values in getattr(m, "module_episode_returns", {}).items():
            sums.setdefault(mid, []).extend(values)
    return {mid: sum(v) / len(v) for mid, v in sums.items() if v}
