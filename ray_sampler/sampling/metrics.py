"""Sampling metrics: one runner's call (``RunnerMetrics``), a group's call (``GroupMetrics``), and the
per-episode sums that carry an episode's return and length across the chunks of several calls."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np

from ray_sampler.data.columnar import ColumnarEpisodes
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.request import SampleRequest

__all__ = ["EpisodeTotals", "GroupMetrics", "RunnerMetrics", "chunk_totals"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunnerMetrics:
    """What one runner's ``sample()`` call collected (the group adds ``request`` and ``replay``)."""

    worker_index: int | None = 0
    """The runner's worker index (None: the chunks that runners stopped by ``scale`` left)."""
    num_env_steps: int = 0
    """Env steps returned by the call (lookback never counted)."""
    num_agent_steps: int = 0
    """Agent steps returned (equal to env steps: one agent)."""
    num_episodes: int = 0
    """Episodes that ended in this call's chunks (terminated or truncated: a ``soft_horizon`` cut
    ends one too, and the env's run goes on as the next episode; see ``horizon``)."""
    episode_returns: list[float] = dataclasses.field(default_factory=list)
    """Whole-episode return of each episode that ended, summed over every chunk it came in."""
    episode_lengths: list[int] = dataclasses.field(default_factory=list)
    """Whole-episode length of each episode that ended."""
    num_episodes_dropped_by_reset: int = 0
    """Unfinished episodes a ``force_reset`` threw away (complete mode only; truncate mode ships them)."""
    num_episodes_dropped_env_error: int = 0
    """Running episodes a sub-env failure ended (``restart_failed_sub_environments``); after an
    ``EnvError`` (restarts off), every sub-env's episode, counted in the next call."""
    num_env_steps_dropped: int = 0
    """Env steps made but never shipped because a sub-env failed: the ended episodes' steps since
    their last cut, or (restarts off) everything the runner held or made in the failed call."""
    num_sub_env_restarts: int = 0
    """Sub-envs rebuilt through the creator in this call (a whole vector env rebuilt, native or after an
    ``EnvError``, counts as one)."""
    ended_episode_ids: list[str] = dataclasses.field(default_factory=list)
    """Ids of the running episodes a sub-env failure ended in this call: earlier calls may have
    shipped chunks of them, but they never get another (the group does not count them abandoned)."""
    running_episode_ids: list[str] | None = None
    """With ``sample_to``/``collect_to``: ids of every episode the runner shipped unfinished chunks
    of (to a replay, or held for a dead one) and that still runs after the call, so the group can
    count them abandoned if the runner dies. None for ``collect``, whose chunks the group sees."""
    duration_s: float = 0.0
    """Wall time of the call."""
    num_env_steps_per_s: float = 0.0
    """``num_env_steps / duration_s``."""
    weights_version: int = 0
    """The weights version the call sampled with (policy lag is the group's version minus this)."""
    request: SampleRequest | None = None
    """The request the call answered (set by the group)."""
    replay: Any = None
    """The replay actor's acknowledgement of the call's chunks, as its ``add`` returned it (set when
    the chunks went to a replay; None otherwise). With chunks held from earlier calls, one ack for
    all the adds (counts summed)."""
    num_env_steps_held_for_replay: int = 0
    """Env steps of chunks the runner holds because the replay actor died before it took them; they
    go first, in order, to the replay of the next ``sample_to`` (a restored actor's handle)."""
    external: dict[str, Any] | None = None
    """An external runner's server counts since it started (clients connected now and in all,
    closed by reason, messages refused by type: ``ServerStats.snapshot``); None for other runners."""
    vectorized_fallback: str | None = None
    """Why this call took the per-step engine although ``columnar_sampling`` asked for the
    vectorized one (``EnvRunner.vectorized_fallback``: the connector pieces outside its contract);
    None when it did not fall back."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GroupMetrics:
    """What one ``EnvRunnerGroup`` sampling call collected, over the runners that answered."""

    num_env_steps: int = 0
    """Env steps of every answer."""
    num_episodes: int = 0
    """Episodes that ended in the answers."""
    episode_return_mean: float | None = None
    """Mean of ``episode_returns`` (None when no episode ended)."""
    episode_returns: list[float] = dataclasses.field(default_factory=list)
    """Whole-episode returns of the episodes that ended."""
    episode_lengths: list[int] = dataclasses.field(default_factory=list)
    """Whole-episode lengths of the episodes that ended."""
    num_runners_answered: int = 0
    """Answers collected (the stopped runners' leftover chunks count as one)."""
    late_runners: list[int] = dataclasses.field(default_factory=list)
    """Worker indices still sampling at the deadline."""
    weights_versions: dict[int, int] = dataclasses.field(default_factory=dict)
    """Weights version each answering runner sampled with."""
    max_policy_lag: int = 0
    """Largest difference between the group's weights version and an answer's."""
    runner_env_steps_per_s: dict[int, float] = dataclasses.field(default_factory=dict)
    """Sampling speed of each answering runner."""
    runner_sampling_s: float = 0.0
    """The answering runners' sampling time, summed (their calls' ``duration_s``)."""
    num_episodes_dropped_by_scale: int = 0
    """Running episodes dropped when ``scale`` stopped runners (complete mode), since the start."""
    num_env_runner_restarts: int = 0
    """Failed runners replaced since the start."""
    num_healthy_env_runners: int = 0
    """Runners in the group at the end of the call that can sample: not ``unavailable_runners`` nor
    ``waiting_runners`` (failed ones are replaced or the call raised)."""
    unavailable_runners: list[int] = dataclasses.field(default_factory=list)
    """Runners Ray reported temporarily unavailable (their node may be down), not replaced until
    they answer or Ray declares them dead; the call went on without them."""
    waiting_runners: list[int] = dataclasses.field(default_factory=list)
    """Replacements waiting for room: their bundle's node is gone and no live node has room for
    it; the call went on without them, and their answer comes in a later call."""
    num_env_steps_lost: int = 0
    """Env steps that died with their runner, since the start: the steps of its request that never
    answered, and the steps it held for a dead replay actor (``num_env_steps_held_for_replay`` of
    its last answer). A request that never answered cannot be measured, so each counts the steps
    it asked for (``rollout_fragment_length x num_envs`` by default; its ``num_timesteps`` rounded
    up to a multiple of ``num_envs``; 0 for a ``num_episodes`` request). In truncate mode that is an
    upper bound of what the runner had made and not shipped while its sub-envs never failed; a
    request whose sub-envs failed makes up for the steps it dropped, so it may have made more
    (bench/faults.py: at most 881 against 512 counted). In complete mode it is no bound, as the
    dead runner's running episodes are lost too."""
    num_episodes_abandoned: int = 0
    """Episodes that were running on a failed runner when it died, since the start: the group
    received chunks of them that were not done (with ``sample_to_replay``, the replay did: the runner
    reports them in ``RunnerMetrics.running_episode_ids``), and they never get another (0 in
    complete mode, which ships no unfinished chunk)."""
    runner_failures: list[str] = dataclasses.field(default_factory=list)
    """One line per runner failure handled since the previous sampling call (e.g. ``runner 2
    died (ActorDiedError: ...); restarted (restart 3 of 1000)``), and one for the runners the call
    went on without (``unavailable_runners``, ``waiting_runners``), for a training loop's log."""
    num_sub_env_restarts: int = 0
    """Sub-envs the answering runners rebuilt in their calls (``RunnerMetrics.num_sub_env_restarts``)."""
    num_env_steps_dropped: int = 0
    """Env steps the answering runners dropped because a sub-env failed."""
    num_episodes_dropped_env_error: int = 0
    """Running episodes a sub-env failure ended in the answering runners' calls."""
    sub_env_failures: list[str] = dataclasses.field(default_factory=list)
    """One line per answering runner that rebuilt sub-envs in its call (e.g. ``runner 2: 3 sub-env
    restarts; 87 env steps and 3 episodes dropped``), for a training loop's log."""
    num_runners_fallback: int = 0
    """Answering runners whose call fell back to the per-step engine (``RunnerMetrics.vectorized_fallback``)."""
    agent_episode_returns: dict[Any, list[float]] = dataclasses.field(default_factory=dict)
    """Multi-agent: per agent id, its whole-episode return in each episode that ended."""
    module_episode_returns: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Multi-agent: per module, the return of all its agents together in each episode that ended
    where it acted."""

    @classmethod
    def of(
        cls, answers: list[RunnerMetrics], *, weights_version: int, late_runners: list[int], num_dropped_by_scale: int
    ) -> GroupMetrics:
        """The group's metrics from its runners' answers."""
        returns = [r for m in answers for r in m.episode_returns]
        by_runner = [m for m in answers if m.worker_index is not None]
        return cls(
            num_env_steps=sum(m.num_env_steps for m in answers),
            num_episodes=len(returns),
            episode_return_mean=sum(returns) / len(returns) if returns else None,
            episode_returns=returns,
            episode_lengths=[n for m in answers for n in m.episode_lengths],
            num_runners_answered=len(answers),
            late_runners=late_runners,
            weights_versions={m.worker_index: m.weights_version for m in by_runner if m.worker_index is not None},
            max_policy_lag=max((weights_version - m.weights_version for m in answers), default=0),
            runner_env_steps_per_s={
                m.worker_index: m.num_env_steps_per_s for m in by_runner if m.worker_index is not None
            },
            runner_sampling_s=sum(m.duration_s for m in answers),
            num_episodes_dropped_by_scale=num_dropped_by_scale,
            num_sub_env_restarts=sum(m.num_sub_env_restarts for m in answers),
            num_env_steps_dropped=sum(m.num_env_steps_dropped for m in answers),
            num_episodes_dropped_env_error=sum(m.num_episodes_dropped_env_error for m in answers),
            sub_env_failures=[_sub_env_line(m) for m in by_runner if m.num_sub_env_restarts],
            num_runners_fallback=sum(m.vectorized_fallback is not None for m in by_runner),
            agent_episode_returns=_merged(answers, "agent_episode_returns"),
            module_episode_returns=_merged(answers, "module_episode_returns"),
        )


def _merged(answers: list[RunnerMetrics], name: str) -> dict[Any, list[float]]:
    """A multi-agent per-key list field of every answer, the lists joined by key (empty for
    single-agent answers, which lack the field)."""
    out: dict[Any, list[float]] = {}
    for m in answers:
        for key, values in getattr(m, name, {}).items():
            out.setdefault(key, []).extend(values)
    return out


def _sub_env_line(m: RunnerMetrics) -> str:
    """The log line of one runner's sub-env restarts in a call."""

    def count(n: int, what: str) -> str:
        return f"{n} {what}" if n == 1 else f"{n} {what}s"

    return (
        f"runner {m.worker_index}: {count(m.num_sub_env_restarts, 'sub-env restart')}; "
        f"{count(m.num_env_steps_dropped, 'env step')} and {count(m.num_episodes_dropped_env_error, 'episode')} dropped"
    )


class EpisodeTotals:
    """Return and length of each episode summed over its chunks, until the chunk that ends it.

    >>> totals = EpisodeTotals()
    >>> totals.add([("a", 1.0, 2, False)])
    ([], [], 2)
    >>> totals.add([("a", 0.5, 1, True)])
    ([1.5], [3], 1)
    """

    def __init__(self) -> None:
        self._partial: dict[str, tuple[float, int]] = {}

    def add(self, chunks: Iterable[tuple[str, float, int, bool]]) -> tuple[list[float], list[int], int]:
        """Adds ``(id, return, length, is_done)`` per chunk; returns the (returns, lengths) of the
        episodes that ended and the chunks' number of steps."""
        returns, lengths, steps = [], [], 0
        for id_, chunk_return, chunk_len, is_done in chunks:
            steps += chunk_len
            prev_return, prev_len = self._partial.pop(id_, (0.0, 0))
            total_return, total_len = prev_return + chunk_return, prev_len + chunk_len
            if is_done:
                returns.append(total_return)
                lengths.append(total_len)
            else:
                self._partial[id_] = (total_return, total_len)
        return returns, lengths, steps

    def forget(self, ids: Iterable[str]) -> None:
        """Drops the sums of episodes that never continue (reset away)."""
        for id_ in ids:
            self._partial.pop(id_, None)

    def clear(self) -> None:
        self._partial.clear()

    @property
    def num_running(self) -> int:
        """Episodes with chunks added and no end yet."""
        return len(self._partial)


def chunk_totals(result: list[SingleAgentEpisode] | ColumnarEpisodes | None) -> Iterable[tuple[str, float, int, bool]]:
    """``(id, return, length, is_done)`` of each chunk of a ``sample()`` result, in order."""
    if isinstance(result, ColumnarEpisodes):
        sums = np.concatenate([[0.0], np.cumsum(result.data.rewards, dtype=np.float64)])
        offsets = result.step_offsets
        return zip(
            result.ids,
            (sums[offsets[1:]] - sums[offsets[:-1]]).tolist(),
            result.lens.tolist(),
            (result.terminated | result.truncated).tolist(),
        )
    return ((ep.id_, ep.get_return(), len(ep), ep.is_done) for ep in result or [])
