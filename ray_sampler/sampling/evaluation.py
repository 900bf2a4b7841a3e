"""Evaluation runners: a policy's episodes on runners of their own, never on the training runners.

``EvaluationConfig`` holds RLlib's names for when and how much to evaluate; ``Evaluator`` owns the
evaluation runners (``evaluation_num_env_runners`` remote runners in an ``EnvRunnerGroup`` of their
own, fault tolerant like the training runners; 0: one runner in this process, with no Ray) and runs
whole episodes (``complete_episodes``) with the weights and connector states it is given, greedily
by default (``explore=False``: argmax, or the distribution's mean; a mean/std filter is applied and
not updated).

Evaluation envs have their own seed stream (``evaluation_seed``): the runner config's seed goes
through a SeedSequence with a tag, so their sub-envs are seeded apart from every training runner's.
Evaluation episodes go nowhere but into the ``EvaluationResult``: no learner, no replay.

Duration: ``evaluation_duration`` episodes (or env steps, ``evaluation_duration_unit="timesteps"``),
split over the evaluation runners and rounded up to a whole number per runner, as RLlib does. A
runner killed in the middle is replaced, its replacement runs its share, and the episodes it had
running are counted in ``num_episodes_lost`` (never reported half-made).

Opponent: ``evaluation_opponent="random"`` evaluates a two-player game's trained modules against a
uniformly random player (of legal moves where the observations carry an ``action_mask``), which
takes the seats in turn, episode by episode (``OpponentMapping``). The episode's return is then the
trained side's, and the summary gives its win, draw and loss rates, overall and by the seat it
played (``win/<agent>``): a zero-sum game's summed return is 0 by construction and says nothing.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Hashable, Mapping, Sequence
from enum import Enum
from typing import Any, Literal

import numpy as np

from ray_sampler.errors import ConfigError
from ray_sampler.sampling.config import BatchMode, EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.validate import check_enum, check_int, check_type, replace_field

__all__ = [
    "OPPONENTS",
    "OPPONENT_MODULE_ID",
    "DurationUnit",
    "EvaluationConfig",
    "EvaluationResult",
    "Evaluator",
    "OpponentMapping",
    "check_evaluation_opponent",
    "evaluation_runner_config",
    "evaluation_seed",
]

_EVALUATION_TAG = 0x6576616C  # "eval": the evaluation envs' seed stream
_RUNNER_FIELDS = {f.name for f in dataclasses.fields(EnvRunnerConfig)}
_NOT_OVERRIDDEN = {"batch_mode", "seed"}  # evaluation runs whole episodes on its own seed stream
OPPONENTS = ("random",)
"""The values ``evaluation_opponent`` takes besides None."""
OPPONENT_MODULE_ID = "opponent_random"
"""The module id the random opponent acts as in the evaluation runners (``module/opponent_random``)."""
_DRAW_TOLERANCE = 1e-6  # a return within this of 0 is a draw


class DurationUnit(str, Enum):
    EPISODES = "episodes"
    TIMESTEPS = "timesteps"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationConfig:
    """When and how a training run evaluates its policy (RLlib's names)."""

    evaluation_interval: int = 0
    """Evaluate after every this many training iterations; 0 (or None, as RLlib writes it): never."""
    evaluation_duration: int = 10
    """How much one evaluation runs: episodes, or env steps (``evaluation_duration_unit``)."""
    evaluation_duration_unit: DurationUnit | str = DurationUnit.EPISODES
    """``"episodes"`` or ``"timesteps"`` (whole episodes until at least that many env steps)."""
    evaluation_num_env_runners: int = 0
    """Remote evaluation runners, an EnvRunnerGroup of their own; 0: one runner in the driver."""
    evaluation_parallel_to_training: bool = False
    """Run each evaluation while the next training iteration samples and updates (remote evaluation
    runners only), with the weights of the iteration that asked for it."""
    evaluation_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Overrides of the runner config for the evaluation runners (any ``EnvRunnerConfig`` field but
    ``batch_mode`` and ``seed``, e.g. ``env_config`` for a harder level), and ``explore`` (default
    False: greedy)."""
    evaluation_opponent: Literal["random"] | None = None
    """Two-player games: None (default) evaluates the modules as the training runs map them;
    ``"random"`` plays the trained modules against a uniformly random player of legal moves, which
    takes each seat in turn. The reported return is then the trained side's, with its win, draw
    and loss rates (``win``, ``draw``, ``loss``; by seat ``win/<agent>`` ...)."""

    def __post_init__(self) -> None:
        if self.evaluation_interval is None:
            replace_field(self, "evaluation_interval", 0)
        check_int("evaluation_interval", self.evaluation_interval, minimum=0)
        check_int("evaluation_duration", self.evaluation_duration, minimum=1)
        unit = check_enum("evaluation_duration_unit", DurationUnit, self.evaluation_duration_unit)
        replace_field(self, "evaluation_duration_unit", unit)
        check_int("evaluation_num_env_runners", self.evaluation_num_env_runners, minimum=0)
        check_type("evaluation_parallel_to_training", self.evaluation_parallel_to_training, bool)
        check_type("evaluation_config", self.evaluation_config, dict)
        unknown = sorted(set(self.evaluation_config) - (_RUNNER_FIELDS - _NOT_OVERRIDDEN) - {"explore"})
        if unknown:
            raise ConfigError(
                f"'evaluation_config' may override EnvRunnerConfig fields (not batch_mode or seed) and 'explore' "
                f"(got {unknown})"
            )
        if "explore" in self.evaluation_config:
            check_type("evaluation_config['explore']", self.evaluation_config["explore"], bool)
        if self.evaluation_opponent is not None and self.evaluation_opponent not in OPPONENTS:
            raise ConfigError(
                f"'evaluation_opponent' must be None or one of {list(OPPONENTS)} (got {self.evaluation_opponent!r})"
            )
        if self.evaluation_parallel_to_training and self.evaluation_num_env_runners == 0:
            raise ConfigError(
                "'evaluation_parallel_to_training' needs remote evaluation runners: 'evaluation_num_env_runners' "
                "must be >= 1 (got 0: the driver's runner cannot run while the driver trains)"
            )

    @property
    def is_on(self) -> bool:
        return bool(self.evaluation_interval)

    @property
    def explore(self) -> bool:
        return bool(self.evaluation_config.get("explore", False))

    def is_due(self, iteration: int) -> bool:
        """Whether training iteration ``iteration`` (from 1) ends with an evaluation."""
        return self.is_on and iteration % int(self.evaluation_interval or 1) == 0


def evaluation_seed(seed: int | None) -> int | None:
    """The evaluation envs' seed for a run seeded ``seed`` (None: unseeded), below 2**30 as every
    derived seed: their sub-env seeds come from another SeedSequence than any training runner's."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, _EVALUATION_TAG]).generate_state(1)[0]) >> 2


def evaluation_runner_config(
    runner: EnvRunnerConfig, config: EvaluationConfig, agents: Sequence[Hashable] = ()
) -> EnvRunnerConfig:
    """The evaluation runners' config: ``runner`` with ``evaluation_config``'s overrides, whole episodes,
    and the evaluation seed stream; with ``evaluation_opponent``, the random opponent's module and
    mapping on the two ``agents`` (the env's possible agents)."""
    overrides = {k: v for k, v in config.evaluation_config.items() if k != "explore"}
    if "env_config" in overrides:  # merged key by key, as --env-config flags are
        overrides["env_config"] = {**runner.env_config, **overrides["env_config"]}
    if config.evaluation_opponent is not None:
        check_evaluation_opponent(config, runner, agents)
        overrides["multi_agent"] = _with_opponent(runner.multi_agent, tuple(agents))
    return dataclasses.replace(
        runner, **overrides, batch_mode=BatchMode.COMPLETE_EPISODES, seed=evaluation_seed(runner.seed)
    )


def check_evaluation_opponent(
    config: EvaluationConfig, runner: EnvRunnerConfig | None, agents: Sequence[Hashable] | None
) -> None:
    """ConfigError unless ``config.evaluation_opponent`` is None or fits the run: a multi-agent
    ``runner`` (None: a single-agent run) whose env has exactly two possible ``agents`` and no module
    of the opponent's id. Training loops call it before their actors start."""
    opponent = config.evaluation_opponent
    if opponent is None:
        return
    if runner is None or runner.multi_agent is None or agents is None:
        raise ConfigError(
            f"'evaluation_opponent' {opponent!r} plays two-player multi-agent games; this run's env is single-agent"
        )
    if len(agents) != 2:
        raise ConfigError(
            f"'evaluation_opponent' {opponent!r} plays two-player games; the env has {len(agents)} possible "
            f"agents {[str(a) for a in agents]}"
        )
    if OPPONENT_MODULE_ID in runner.multi_agent.module_ids:
        raise ConfigError(
            f"'evaluation_opponent' {opponent!r} acts as module {OPPONENT_MODULE_ID!r}, which the run's "
            f"modules {list(runner.multi_agent.module_ids)} already name: rename that module"
        )


def _with_opponent(base: Any, agents: tuple[Hashable, ...]) -> Any:
    """``base`` (the training runners' MultiAgentConfig) with the random opponent's module and a
    mapping that seats it (``OpponentMapping``)."""
    from ray_sampler.modules.random_module import RandomModule
    from ray_sampler.sampling.multi_agent_config import ModuleSpec, MultiAgentConfig

    specs = {mid: base.spec(mid) for mid in base.module_ids}
    specs[OPPONENT_MODULE_ID] = ModuleSpec(module_class=RandomModule, module_config={})
    return MultiAgentConfig(
        policies=specs,
        policy_mapping_fn=OpponentMapping(base, agents),
        policies_to_train=base.trained_module_ids,
        centralized_critic=base.centralized_critic,
        global_state=base.global_state,
    )


class OpponentMapping:
    """A ``policy_mapping_fn`` for evaluation against an opponent: in each new episode the opponent
    (``OPPONENT_MODULE_ID``) takes the next seat of ``agents`` in turn (the first episode a runner
    starts: ``agents[0]``), and the other agent gets its module from ``base`` (a MultiAgentConfig).

    >>> from types import SimpleNamespace
    >>> from ray_sampler.sampling.multi_agent_config import MultiAgentConfig
    >>> mapping = OpponentMapping(MultiAgentConfig(), ("x", "o"))
    >>> first, second = SimpleNamespace(id_="e1"), SimpleNamespace(id_="e2")
    >>> [mapping("x", first), mapping("o", first), mapping("o", second), mapping("x", second)]
    ['opponent_random', 'default_policy', 'opponent_random', 'default_policy']
    """

    _REMEMBERED = 4096  # episode ids kept; a runner has at most its sub-envs' episodes running

    def __init__(self, base: Any, agents: tuple[Hashable, ...]) -> None:
        self.base, self.agents = base, agents
        self._seats: dict[Any, int] = {}
        self._episodes = 0

    def __call__(self, agent_id: Hashable, episode: Any, **kwargs: Any) -> str:
        key = getattr(episode, "id_", id(episode))
        seat = self._seats.get(key)
        if seat is None:
            seat = self._seats[key] = self._episodes % len(self.agents)
            self._episodes += 1
            if len(self._seats) > self._REMEMBERED:
                del self._seats[next(iter(self._seats))]
        if agent_id == self.agents[seat]:
            return OPPONENT_MODULE_ID
        return str(self.base.map_agent(agent_id, episode))


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationResult:
    """One evaluation: every episode's return and length (and per agent and module, multi-agent)."""

    episode_returns: list[float]
    episode_lengths: list[int]
    returns_by: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Multi-agent: ``module/<id>`` and ``agent/<id>`` returns, one per episode the agent acted in."""
    num_episodes_lost: int = 0
    """Episodes running on an evaluation runner when it died (one per sub-env), never reported half-made;
    its replacement ran the episodes asked of it, which are reported."""
    num_env_runner_restarts: int = 0
    duration_s: float = math.nan
    """Wall time from the evaluation's start to its result."""
    seats: list[str] = dataclasses.field(default_factory=list)
    """Against an opponent: the agent the trained side played in each episode (``episode_returns``
    are that side's returns); empty otherwise."""

    @property
    def num_episodes(self) -> int:
        return len(self.episode_returns)

    def summary(self) -> dict[str, float]:
        """``episode_return_mean`` / ``_std`` / ``_min`` / ``_max``, ``episode_len_mean`` / ``_min`` /
        ``_max``, ``num_episodes``, ``duration_s``, and per key of ``returns_by`` ``<key>/episode_return_mean``."""
        returns, lengths = np.asarray(self.episode_returns, np.float64), np.asarray(self.episode_lengths)
        out: dict[str, float] = {"num_episodes": float(len(returns)), "duration_s": self.duration_s}
        if len(returns):
            out.update(
                episode_return_mean=float(returns.mean()),
                episode_return_std=float(returns.std()),
                episode_return_min=float(returns.min()),
                episode_return_max=float(returns.max()),
                episode_len_mean=float(lengths.mean()),
                episode_len_min=float(lengths.min()),
                episode_len_max=float(lengths.max()),
            )
        for key, values in self.returns_by.items():
            out[f"{key}/episode_return_mean"] = float(np.mean(values)) if values else math.nan
        if self.seats:
            out.update(self.outcomes())
        return out

    def outcomes(self, agents: Sequence[Hashable] = ()) -> dict[str, float]:
        """Against an opponent: the trained side's ``win``, ``draw`` and ``loss`` rates, and by the
        seat it played ``win/<agent>`` ... (for each of ``agents`` too, NaN where it never sat);
        empty without one.

        >>> result = EvaluationResult(episode_returns=[1.0, 0.0, -1.0, 1.0], episode_lengths=[5, 9, 6, 7],
        ...                           seats=["x", "o", "x", "o"])
        >>> {k: v for k, v in result.outcomes().items() if k in ("win", "draw", "win/x", "loss/x")}
        {'win': 0.5, 'draw': 0.25, 'win/x': 0.5, 'loss/x': 0.5}
        """
        if not self.seats:
            return {}
        returns, seats = np.asarray(self.episode_returns, np.float64), np.asarray(self.seats)
        out: dict[str, float] = {}
        for suffix, rows in (
            ("", np.ones(len(returns), bool)),
            *((f"/{a}", seats == str(a)) for a in dict.fromkeys([*map(str, agents), *self.seats])),
        ):
            chosen = returns[rows]
            won, lost = chosen > _DRAW_TOLERANCE, chosen < -_DRAW_TOLERANCE
            for kind, hits in (("win", won), ("draw", ~(won | lost)), ("loss", lost)):
                out[f"{kind}{suffix}"] = float(hits.mean()) if len(chosen) else math.nan
        return out


def _episode_returns_by(episode: Any) -> dict[str, float]:
    """A multi-agent episode's return per module and per agent."""
    out: dict[str, float] = {}
    for agent, agent_episode in episode.agent_episodes.items():
        ret = float(agent_episode.get_return())
        out[f"agent/{agent}"] = ret
        module = f"module/{episode.module_for(agent)}"
        out[module] = out.get(module, 0.0) + ret
    return out


def _trained_side(episode: Any) -> tuple[float, str]:
    """Against an opponent: the return of the agents not played by it, and the agent(s) they are."""
    mine = [aid for aid in episode.agent_episodes if episode.module_for(aid) != OPPONENT_MODULE_ID]
    total = sum(float(episode.agent_episodes[aid].get_return()) for aid in mine)
    return total, ",".join(map(str, mine))


def _result_of(episodes: list[Any], *, lost: int = 0, restarts: int = 0, opponent: bool = False) -> EvaluationResult:
    by: dict[str, list[float]] = {}
    for episode in episodes:
        if hasattr(episode, "agent_episodes"):
            for key, value in _episode_returns_by(episode).items():
                by.setdefault(key, []).append(value)
    sides = [_trained_side(ep) for ep in episodes] if opponent else []
    return EvaluationResult(
        episode_returns=[r for r, _ in sides] if opponent else [float(ep.get_return()) for ep in episodes],
        episode_lengths=[len(ep) for ep in episodes],
        returns_by=dict(sorted(by.items())),
        num_episodes_lost=lost,
        num_env_runner_restarts=restarts,
        seats=[seat for _, seat in sides],
    )


class Evaluator:
    """The evaluation runners of ``runner`` (the training runners' config) under ``config``."""

    def __init__(
        self,
        runner: EnvRunnerConfig,
        config: EvaluationConfig,
        *,
        group: EnvRunnerGroupConfig | None = None,
    ) -> None:
        self.config = config
        self.agents: tuple[Hashable, ...] = ()
        """Against an opponent: the env's two possible agents (the seats); empty otherwise."""
        if config.evaluation_opponent is not None and runner.multi_agent is not None:
            from ray_sampler.sampling.multi_agent_env_runner import probe_multi_agent, resolve_multi_agent

            runner = resolve_multi_agent(runner)  # the seats' modules as the training runners build them
            self.agents = tuple(probe_multi_agent(runner)[0])
        self.runner_config = evaluation_runner_config(runner, config, self.agents)
        self.num_env_runners = config.evaluation_num_env_runners
        self._local: Any = None
        self._group: Any = None
        self._pending: Any = None
        self._executor: Any = None
        self._started_at = math.nan
        self._restarts_seen = 0
        if self.num_env_runners == 0:
            if self.runner_config.multi_agent is not None:
                from ray_sampler.sampling.multi_agent_env_runner import MultiAgentEnvRunner

                self._local = MultiAgentEnvRunner(self.runner_config)
            else:
                from ray_sampler.sampling.env_runner import EnvRunner

                self._local = EnvRunner(self.runner_config)
        else:
            from ray_sampler.sampling.env_runner_group import EnvRunnerGroup

            base = group or EnvRunnerGroupConfig(num_cpus_per_env_runner=0.5)
            self._group = EnvRunnerGroup(
                self.runner_config,
                dataclasses.replace(base, num_env_runners=self.num_env_runners, check_env=False, keep_sampling=False),
            )

    def _per_runner(self) -> dict[str, int]:
        share = math.ceil(self.config.evaluation_duration / max(self.num_env_runners, 1))
        unit = DurationUnit(self.config.evaluation_duration_unit)
        return {"num_episodes": share} if unit is DurationUnit.EPISODES else {"num_timesteps": share}

    def evaluate(
        self, weights: Mapping[str, Any], connector_states: Mapping[str, Any] | None = None
    ) -> EvaluationResult:
        """One evaluation with these module weights (multi-agent: by module id) and env-to-module
        connector states (the training runners' merged ones), waited for."""
        self.start(weights, connector_states)
        return self.wait()

    def start(self, weights: Mapping[str, Any], connector_states: Mapping[str, Any] | None = None) -> None:
        """Starts an evaluation (remote runners: it runs while the caller goes on; ``wait`` gives it)."""
        if self._pending is not None:
            raise ConfigError("Evaluator.start: the previous evaluation was not waited for")
        explore, share = self.config.explore, self._per_runner()
        self._started_at = time.perf_counter()
        if self._local is not None:
            state: dict[str, Any] = {"module": dict(weights)}
            if connector_states is not None:
                state["env_to_module"] = dict(connector_states)
            self._local.set_state(state)
            self._pending = ("local", self._local.sample(**share, explore=explore, force_reset=True))
            return
        self._group.sync_weights(dict(weights))
        if connector_states is not None:
            self._group.set_connector_states(dict(connector_states))
        if self._executor is None:  # one thread waits on the evaluation runners while the caller trains
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(1, thread_name_prefix="ray-sampler-evaluation")
        self._pending = ("group", self._executor.submit(self._group.sample, **share, explore=explore, force_reset=True))

    def wait(self) -> EvaluationResult:
        """The evaluation ``start`` began (re-raises what failed in it)."""
        if self._pending is None:
            raise ConfigError("Evaluator.wait: no evaluation was started")
        kind, payload = self._pending
        self._pending = None
        if kind == "local":
            result = _result_of(payload, opponent=self.agents != ())
            return dataclasses.replace(result, duration_s=time.perf_counter() - self._started_at)
        episodes = payload.result()
        metrics = self._group.metrics
        restarts = metrics.num_env_runner_restarts - self._restarts_seen
        self._restarts_seen = metrics.num_env_runner_restarts
        # A runner that died in the call had an episode running in each sub-env (complete mode ships
        # none of it); the group gave its request to its replacement, which ran the episodes anew.
        lost = restarts * self.runner_config.num_envs_per_env_runner
        result = _result_of(episodes, lost=lost, restarts=restarts, opponent=self.agents != ())
        return dataclasses.replace(result, duration_s=time.perf_counter() - self._started_at)

    @property
    def opponent_keys(self) -> list[str]:
        """Against an opponent: the summary's outcome keys (``win``, ``draw``, ``loss``, then by seat);
        empty otherwise."""
        if not self.agents:
            return []
        return [
            f"{kind}{suffix}" for suffix in ("", *(f"/{a}" for a in self.agents)) for kind in ("win", "draw", "loss")
        ]

    @property
    def env_runner_group(self) -> Any:
        """The remote evaluation runners' EnvRunnerGroup (None: the runner is in this process)."""
        return self._group

    @property
    def is_running(self) -> bool:
        """Whether an evaluation was started and not waited for."""
        return self._pending is not None

    def stop(self) -> None:
        """Stops the evaluation runners (an evaluation still running is dropped)."""
        if self._executor is not None:  # a running evaluation ends with its runners, never waited out
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._group is not None:
            self._group.stop()
        if self._local is not None:
            close = getattr(self._local, "stop", None)
            if callable(close):
                close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mapping_fn(mapping: Mapping[Hashable, str]) -> Any:
    """A ``policy_mapping_fn`` that gives each agent its module from ``mapping`` (a saved policy's)."""
    fixed = dict(mapping)

    def policy_mapping_fn(agent_id: Hashable, episode: Any, **kwargs: Any) -> str:
        return fixed[agent_id]

    return policy_mapping_fn
