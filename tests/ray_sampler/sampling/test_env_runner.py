"""EnvRunner (plain class, no Ray): both batch modes, every autoreset mode, seeding, actions, metrics, state."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from connectors.env_to_module import EnvToModulePiece
from ray_sampler.data.columnar import columnar_to_episodes
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError, EnvError
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from replay.actor import ReplayActor, ReplayConfig
from tests.helpers import assert_episodes_equal, stamp_length
from tests.ray_sampler.sampling.checks import MODES, assert_steps_once_and_continuous, stamp_config, stamps
from tests.ray_sampler.sampling.faults import FAULTY_STAMP_ID, EnvBoom, FaultPlan, faulty_creator


# ------------------------------------------------------------------ truncate_episodes
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("h", [0, 2])
def test_truncate_returns_exactly_fragment_times_envs_and_loses_nothing(mode: str, num_envs: int, h: int) -> None:
    runner = EnvRunner(stamp_config(mode, num_envs_per_env_runner=num_envs, episode_lookback_horizon=h))
    chunks = []
    for _ in range(8):
        out = runner.sample()
        assert sum(len(c) for c in out) == 5 * num_envs
        assert runner.metrics.num_env_steps == 5 * num_envs
        chunks += out
    assert_steps_once_and_continuous(chunks)
    # Nothing is held back beyond what the next call returns: the env steps made so far,
    # minus the ones in the ongoing continuations, were all returned.
    assert sum(len(c) for c in chunks) == 8 * 5 * num_envs


@pytest.mark.parametrize("mode", MODES)
def test_continuation_lookback_equals_previous_chunk_tail(mode: str) -> None:
    runner = EnvRunner(stamp_config(mode, episode_lookback_horizon=2, num_envs_per_env_runner=2))
    previous: dict[str, SingleAgentEpisode] = {}
    for _ in range(6):
        for chunk in runner.sample():
            if chunk.id_ in previous:
                prev, lb = previous[chunk.id_], chunk.len_lookback_buffer
                assert lb == min(2, prev.len_lookback_buffer + len(prev))
                assert stamps(chunk, slice(-lb, 1), neg_index_as_lookback=True) == stamps(prev, slice(-lb - 1, None))
                assert (
                    np.asarray(chunk.get_actions(slice(-lb, 0), neg_index_as_lookback=True)).tolist()
                    == np.asarray(prev.get_actions(slice(len(prev) - lb, len(prev)))).tolist()
                )
            previous[chunk.id_] = chunk


def test_num_timesteps_is_rounded_up_to_a_multiple_of_num_envs() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=4))
    assert sum(len(c) for c in runner.sample(num_timesteps=10)) == 12
    assert sum(len(c) for c in runner.sample(num_timesteps=12)) == 12


# ------------------------------------------------------------------ complete_episodes
@pytest.mark.parametrize("mode", MODES)
def test_complete_returns_only_finished_whole_episodes_and_drops_none(mode: str) -> None:
    runner = EnvRunner(stamp_config(mode, batch_mode="complete_episodes", num_envs_per_env_runner=3))
    seen: dict[int, list[int]] = {}
    for _ in range(10):
        out = runner.sample()
        assert sum(len(e) for e in out) >= 15
        for ep in out:
            assert ep.is_terminated and ep.t_started == 0 and ep.len_lookback_buffer == 0
            (_, v, e, t0), *_ = stamps(ep)
            assert t0 == 0 and len(ep) == stamp_length(v, e)
            seen.setdefault(v, []).append(e)
    # Per sub-env, episodes come in order with no gap: none was thrown away, long ones included.
    for v, episodes in seen.items():
        assert episodes == list(range(len(episodes))), (v, episodes)


def test_complete_mode_keeps_episode_length_distribution() -> None:
    runner = EnvRunner(
        stamp_config(batch_mode="complete_episodes", num_envs_per_env_runner=1, rollout_fragment_length=3)
    )
    lengths = [len(ep) for _ in range(30) for ep in runner.sample()]
    assert lengths == [stamp_length(0, k) for k in range(len(lengths))]


def test_num_episodes_returns_exactly_that_many_and_keeps_the_rest() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=3))
    first = runner.sample(num_episodes=2)
    second = runner.sample(num_episodes=4)
    assert len(first) == 2 and len(second) == 4
    keys = [stamps(ep)[0][1:3] for ep in first + second]
    assert len(set(keys)) == 6 and all(ep.is_done and ep.t_started == 0 for ep in first + second)


# ------------------------------------------------------------------ seeding, creators, spaces
def test_seeded_rerun_is_identical_but_for_ids_and_runners_differ() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=20, seed=7)
    a, b = EnvRunner(config, worker_index=1), EnvRunner(config, worker_index=1)
    for _ in range(2):
        for x, y in zip(a.sample(), b.sample(), strict=True):
            assert x.id_ != y.id_
            assert_episodes_equal(x, y, compare_ids=False)
    first_obs = {w: np.asarray(EnvRunner(config, worker_index=w).sample()[0].get_observations(0)) for w in (1, 2, 3)}
    assert len({o.tobytes() for o in first_obs.values()}) == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rollout_fragment_length": -5}, r"'rollout_fragment_length' must be an int >= 1 \(got -5\)"),
        (
            {"batch_mode": "bogus"},
            r"'batch_mode' must be one of 'truncate_episodes', 'complete_episodes' \(got 'bogus'\)",
        ),
        ({"num_envs_per_env_runner": 0}, "'num_envs_per_env_runner' must be an int >= 1"),
        ({"count_steps_by": "steps"}, "'count_steps_by' must be one of"),
        ({"episode_lookback_horizon": -1}, "'episode_lookback_horizon' must be an int >= 0"),
        ({"max_episode_steps": 0}, "'max_episode_steps' must be an int >= 1"),
        ({"vectorization_mode": "async"}, "'vectorization_mode' must be one of 'sync', 'vector_entry_point'"),
        ({"env_to_module_connectors": (1,)}, "'env_to_module_connectors' must be a tuple of ConnectorV2 pieces"),
    ],
    ids=["fragment", "batch_mode", "num_envs", "count_by", "lookback", "horizon", "vectorization", "connectors"],
)
def test_bad_config_values_raise_config_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EnvRunnerConfig(env="CartPole-v1", **kwargs)


def test_bad_sample_arguments_raise() -> None:
    runner = EnvRunner(stamp_config())
    with pytest.raises(ConfigError, match="not both"):
        runner.sample(num_timesteps=5, num_episodes=1)
    with pytest.raises(ConfigError, match="'num_timesteps' must be an int >= 1"):
        runner.sample(num_timesteps=0)


# ------------------------------------------------------------------ horizon, actions, model outputs
@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_max_episode_steps_truncates(mode: str) -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        vectorization_mode=mode,
        num_envs_per_env_runner=2,
        max_episode_steps=4,
        batch_mode="complete_episodes",
        rollout_fragment_length=8,
    )
    out = EnvRunner(config).sample(random_actions=True)
    assert out and all(len(ep) <= 4 for ep in out)
    assert any(ep.is_truncated and len(ep) == 4 for ep in out)


def test_model_outputs_are_recorded_and_logp_matches_the_distribution() -> None:
    runner = EnvRunner(EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=10))
    ep = runner.sample()[0]
    assert set(ep.extra_model_outputs) == {Columns.ACTION_DIST_INPUTS, Columns.VF_PREDS, Columns.ACTION_LOGP}
    logits = np.asarray(ep.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS))
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = log_probs[np.arange(len(ep)), np.asarray(ep.get_actions())]
    np.testing.assert_allclose(np.asarray(ep.get_extra_model_outputs(Columns.ACTION_LOGP)), expected, rtol=1e-5)


def test_explore_false_takes_the_most_likely_action() -> None:
    runner = EnvRunner(EnvRunnerConfig(env="CartPole-v1", rollout_fragment_length=10))
    ep = runner.sample(explore=False)[0]
    logits = np.asarray(ep.get_extra_model_outputs(Columns.ACTION_DIST_INPUTS))
    assert np.asarray(ep.get_actions()).tolist() == logits.argmax(-1).tolist()


def test_random_actions_keep_the_same_model_outputs_across_calls() -> None:
    runner = EnvRunner(stamp_config(episode_lookback_horizon=1))
    runner.sample()
    chunks = runner.sample(random_actions=True) + runner.sample()
    assert all(set(c.extra_model_outputs) == {"action_dist_inputs", "vf_preds", "action_logp"} for c in chunks)
    assert_steps_once_and_continuous(chunks)


class _RecordBoxEnv(gym.Env):
    """1-D Box actions in [-2, 2]; remembers what the env received."""

    def __init__(self, ctx: Any = None) -> None:
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self.received: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(2, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.received.append(np.array(action))
        return np.zeros(2, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("normalize", [False, True])
def test_box_actions_are_fitted_for_the_env_but_kept_raw_in_the_episode(normalize: bool) -> None:
    runner = EnvRunner(
        EnvRunnerConfig(
            env=_RecordBoxEnv,
            rollout_fragment_length=200,
            normalize_actions=normalize,
            module_config={"initial_log_std": 1.5},
        )
    )
    ep = runner.sample()[0]
    raw = np.asarray(ep.get_actions())[:, 0]
    sent = np.array([a[0] for a in runner.env.envs[0].unwrapped.received])
    assert (np.abs(raw) > 2.0).any()  # the module's samples do leave the bounds
    expected = -2.0 + (np.clip(raw, -1, 1) + 1.0) * 2.0 if normalize else np.clip(raw, -2.0, 2.0)
    np.testing.assert_allclose(sent, expected, rtol=1e-5)


def test_user_env_to_module_piece_runs_before_defaults() -> None:
    calls: list[int] = []

    def count_episodes(*, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        calls.append(len(episodes))
        assert "obs" not in batch  # runs before the default observation piece
        return batch

    EnvRunner(stamp_config(env_to_module_connectors=(count_episodes,), rollout_fragment_length=2)).sample()
    assert calls == [3, 3]


def test_random_module_class_samples_valid_actions() -> None:
    runner = EnvRunner(stamp_config(module_class=RandomModule))
    eps = runner.sample()
    actions = np.concatenate([np.asarray(e.get_actions()) for e in eps if len(e)])
    assert set(actions.tolist()) <= {0, 1} and not eps[0].extra_model_outputs


def test_metrics_aggregate_returns_across_chunks() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=1, rollout_fragment_length=3))
    returns, lengths = [], []
    for _ in range(6):
        runner.sample()
        returns += runner.metrics.episode_returns
        lengths += runner.metrics.episode_lengths
    assert lengths == [stamp_length(0, k) for k in range(len(lengths))]
    assert returns == [float(sum(range(1, n + 1))) for n in lengths]


def test_state_round_trip_and_weights_version() -> None:
    a = EnvRunner(EnvRunnerConfig(env="CartPole-v1", seed=1))
    b = EnvRunner(EnvRunnerConfig(env="CartPole-v1", seed=2))
    state = a.get_state()
    state["weights_version"] = 5
    assert b.set_state(state) == 5
    for k, v in a.module.get_state().items():
        np.testing.assert_array_equal(b.module.get_state()[k], v)
    b.sample(num_timesteps=2)
    assert b.metrics.weights_version == 5


def test_drain_returns_unfinished_steps_only() -> None:
    runner = EnvRunner(stamp_config(batch_mode="complete_episodes"))
    returned = runner.sample()
    running = sum(1 for ep in runner.ongoing.as_episodes() if len(ep) and not ep.is_done)
    drained, dropped = runner.drain()
    # Complete mode ships whole episodes only: running ones are dropped and counted.
    assert drained == [] and dropped == running >= 1
    truncating = EnvRunner(stamp_config(num_envs_per_env_runner=3))
    returned = truncating.sample(num_episodes=1)
    drained, dropped = truncating.drain()
    assert dropped == 0 and drained and all(len(ep) for ep in drained)
    assert_steps_once_and_continuous(returned + drained)


def test_num_episodes_counts_whole_episodes_only() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=1, rollout_fragment_length=3, episode_lookback_horizon=2))
    first = runner.sample(num_timesteps=1)
    (ep,) = runner.sample(num_episodes=1)
    assert ep.t_started == 0 and ep.len_lookback_buffer == 0 and ep.is_done
    rest = runner.sample()  # the tail of the episode the first call began comes now
    assert_steps_once_and_continuous([*first, ep, *rest])


def test_box_actions_keep_the_space_dtype_on_both_paths() -> None:
    for columnar in (True, False):
        runner = EnvRunner(EnvRunnerConfig(env=_RecordBoxEnv, rollout_fragment_length=4, columnar_sampling=columnar))
        eps = runner.sample() + runner.sample(random_actions=True)
        assert {np.asarray(e.get_actions()).dtype for e in eps} == {np.dtype(np.float32)}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"columnar_sampling": "no"}, "'columnar_sampling' must be True or False"),
        ({"normalize_actions": 1}, "'normalize_actions' must be True or False"),
        (
            {"restart_failed_sub_environments": "yes"},
            r"'restart_failed_sub_environments' must be True or False \(got 'yes'\)",
        ),
    ],
    ids=["columnar", "normalize", "restart_sub_envs"],
)
def test_bool_fields_are_checked(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EnvRunnerConfig(env="CartPole-v1", **kwargs)


def test_bad_module_class_or_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="'module_class' 'int'"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_class=int))
    with pytest.raises(ConfigError, match=r"'module_config'.*unexpected keyword"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_config={"hidden": 3}))


# ---------------------------------------------------------------- sub-env failures and episode ids
ENGINES = [("truncate_episodes", True), ("truncate_episodes", False), ("complete_episodes", False)]
ENGINE_IDS = ["truncate-vectorized", "truncate-per_step", "complete-per_step"]


def _faulty_config(plan: FaultPlan, batch_mode: str, columnar: bool, **kwargs: Any) -> EnvRunnerConfig:
    base: dict[str, Any] = {
        "env": faulty_creator,
        "env_config": {"plan": plan},
        "num_envs_per_env_runner": 3,
        "rollout_fragment_length": 5,
        "batch_mode": batch_mode,
        "columnar_sampling": columnar,
        "restart_failed_sub_environments": True,
    }
    return EnvRunnerConfig(**{**base, **kwargs})


def _sample(runner: EnvRunner, calls: int) -> tuple[list[SingleAgentEpisode], list[Any]]:
    chunks, metrics = [], []
    for _ in range(calls):
        chunks += runner.sample()
        metrics.append(runner.get_metrics())
    return chunks, metrics


def _expected_dropped_steps(chunks: list[SingleAgentEpisode], ended: list[tuple[int, int, int]]) -> int:
    """Each ended episode (vector, episode, t when it ended) loses its steps after its last shipped one."""
    shipped: dict[tuple[int, int], int] = {}
    for c in chunks:
        for _, v, e, t in stamps(c):
            shipped[(v, e)] = max(shipped.get((v, e), 0), t)
    return sum(t - shipped.get((v, e), 0) for v, e, t in ended)


class TestSubEnvFailures:
    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_restarted_sub_env_drops_exactly_its_unshipped_steps(self, batch_mode: str, columnar: bool) -> None:
        # Sub-env 0 fails in steps 3 and 17, sub-env 1 in its first reset, step 10 and an autoreset;
        # sub-env 2 never fails.
        plan = FaultPlan(steps={(0, 3), (1, 10), (0, 17)}, resets={(1, 1), (1, 3)})
        runner = EnvRunner(_faulty_config(plan, batch_mode, columnar), worker_index=1)
        chunks, metrics = _sample(runner, 8)
        assert_steps_once_and_continuous(chunks)
        assert [(v, e) for v, e, _ in plan.step_faults] == [(0, 1), (1, 200), (0, 102)]
        assert plan.num_reset_faults == 2
        assert sum(m.num_sub_env_restarts for m in metrics) == 5
        assert sum(m.num_episodes_dropped_env_error for m in metrics) == 3
        dropped = sum(m.num_env_steps_dropped for m in metrics)
        assert dropped == _expected_dropped_steps(chunks, plan.step_faults) > 0
        held = sum(len(c) for c in runner.drain()[0])
        if batch_mode == "truncate_episodes":
            assert [m.num_env_steps for m in metrics] == [15] * 8
            assert plan.num_ok_steps == 15 * 8 + dropped + held  # every step made: shipped, dropped or held
        for v, e, _ in plan.step_faults:  # a failed episode never ends: it is never shipped as done
            assert not any(c.is_done for c in chunks if stamps(c)[0][1:3] == (v, e))
        # The sub-env that never failed went on untouched: consecutive episodes, all steps there.
        joined = [c for c in chunks if stamps(c)[0][1] == 2]
        episodes = sorted({stamps(c)[0][2] for c in joined})
        assert episodes == list(range(len(episodes))) and len(episodes) > 3

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_randomized_faults_in_one_percent_of_steps(self, batch_mode: str, columnar: bool) -> None:
        plan = FaultPlan(p=0.01, seed=5)
        config = _faulty_config(plan, batch_mode, columnar, num_envs_per_env_runner=4, rollout_fragment_length=25)
        runner = EnvRunner(config, worker_index=1)
        chunks, metrics = _sample(runner, 25)
        assert_steps_once_and_continuous(chunks)
        assert len(plan.step_faults) >= 10 and plan.num_reset_faults >= 1
        assert sum(m.num_sub_env_restarts for m in metrics) == len(plan.step_faults) + plan.num_reset_faults
        assert sum(m.num_episodes_dropped_env_error for m in metrics) == len(plan.step_faults)
        dropped = sum(m.num_env_steps_dropped for m in metrics)
        assert dropped == _expected_dropped_steps(chunks, plan.step_faults)
        held = sum(len(c) for c in runner.drain()[0])
        if batch_mode == "truncate_episodes":
            assert [m.num_env_steps for m in metrics] == [100] * 25
            assert plan.num_ok_steps == 100 * 25 + dropped + held

    @pytest.mark.parametrize("mode", ["SameStep", "NextStep", "Disabled"])
    def test_native_vector_env_is_rebuilt_whole(self, mode: str) -> None:
        plan = FaultPlan(steps={(0, 7)})
        config = _faulty_config(
            plan,
            "truncate_episodes",
            False,
            env=FAULTY_STAMP_ID,
            vectorization_mode="vector_entry_point",
            env_config={"plan": plan, "autoreset_mode": mode},
        )
        runner = EnvRunner(config, worker_index=1)
        chunks, metrics = _sample(runner, 6)
        assert_steps_once_and_continuous(chunks)
        assert sum(m.num_sub_env_restarts for m in metrics) == 1
        assert [m.num_env_steps for m in metrics] == [15] * 6
        after = [c for c in chunks if stamps(c)[0][2] >= 100]
        assert {stamps(c)[0][1] for c in after} == {0, 1, 2}  # every sub-env is a new instance
        if mode == "SameStep":  # each sub-env had a running episode; sub-env 0 raised first, none had stepped
            assert sum(m.num_episodes_dropped_env_error for m in metrics) == 3
            running = [(v, e, t) for v, (e, t) in plan.snapshots[0].items()]
            assert sum(m.num_env_steps_dropped for m in metrics) == _expected_dropped_steps(chunks, running) > 0

    @pytest.mark.parametrize("columnar", [True, False])
    def test_native_masked_reset_failure_keeps_the_ended_episode(self, columnar: bool) -> None:
        plan = FaultPlan(resets={(0, 2)})  # sub-env 0's first masked reset, after its 2-step episode
        config = _faulty_config(
            plan,
            "truncate_episodes",
            columnar,
            env=FAULTY_STAMP_ID,
            vectorization_mode="vector_entry_point",
            env_config={"plan": plan, "autoreset_mode": "Disabled"},
        )
        runner = EnvRunner(config, worker_index=1)
        chunks, metrics = _sample(runner, 3)
        assert_steps_once_and_continuous(chunks)
        assert [m.num_env_steps for m in metrics] == [15] * 3
        assert sum(m.num_sub_env_restarts for m in metrics) == 1
        assert sum(m.num_episodes_dropped_env_error for m in metrics) == 2  # sub-envs 1 and 2 were running
        assert any(c.is_done and stamps(c)[-1] == (0, 0, 0, 2) for c in chunks)  # sub-env 0's episode ended
        # Sub-envs 1 and 2 lose their two steps each (the 2nd step was made, then the env was rebuilt).
        assert sum(m.num_env_steps_dropped for m in metrics) == 4

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_env_error_names_the_sub_env_and_keeps_the_cause(self, batch_mode: str, columnar: bool) -> None:
        plan = FaultPlan(steps={(1, 7)})
        runner = EnvRunner(
            _faulty_config(plan, batch_mode, columnar, restart_failed_sub_environments=False), worker_index=4
        )
        with pytest.raises(
            EnvError,
            match=r"^sub-env worker_index=4, vector_index=1 raised in step\(\): EnvBoom\('step 7 of sub-env 1'\)$",
        ) as info:
            _sample(runner, 3)
        assert isinstance(info.value.__cause__, EnvBoom)
        assert info.value.__cause__.__traceback__ is not None

    @pytest.mark.parametrize(("batch_mode", "columnar"), ENGINES, ids=ENGINE_IDS)
    def test_after_env_error_only_fresh_episodes_are_shipped(self, batch_mode: str, columnar: bool) -> None:
        plan = FaultPlan(steps={(1, 12)})
        runner = EnvRunner(
            _faulty_config(plan, batch_mode, columnar, restart_failed_sub_environments=False), worker_index=1
        )
        before: list[SingleAgentEpisode] = []
        with pytest.raises(EnvError):
            for _ in range(10):
                before += runner.sample()
        made_before = plan.num_ok_steps
        after, metrics = _sample(runner, 4)
        assert_steps_once_and_continuous(before + after)
        assert not {c.id_ for c in before} & {c.id_ for c in after}
        assert all(stamps(c)[0][2] >= 100 for c in after)  # every sub-env was rebuilt and reset
        assert {stamps(c)[0][1] for c in after} == {0, 1, 2}
        assert metrics[0].num_env_steps_dropped == made_before - sum(len(c) for c in before)
        assert metrics[0].num_episodes_dropped_env_error == 3
        assert [m.num_env_steps_dropped for m in metrics[1:]] == [0, 0, 0]

    @pytest.mark.parametrize("seed", [0, None])
    def test_failed_first_reset_without_restarts_raises_then_recovers(self, seed: int | None) -> None:
        plan = FaultPlan(resets={(0, 1)})
        config = _faulty_config(plan, "truncate_episodes", True, restart_failed_sub_environments=False, seed=seed)
        runner = EnvRunner(config, worker_index=2)
        with pytest.raises(EnvError, match=r"^sub-env worker_index=2, vector_index=0 raised in reset\(\): EnvBoom"):
            runner.sample()
        chunks, metrics = _sample(runner, 2)
        assert_steps_once_and_continuous(chunks)
        assert {stamps(c)[0][1:3] for c in chunks if c.t_started == 0} >= {(0, 100), (1, 100), (2, 100)}
        assert [(m.num_sub_env_restarts, m.num_env_steps_dropped, m.num_env_steps) for m in metrics] == [
            (1, 0, 15),
            (0, 0, 15),
        ]


def test_same_seed_runners_give_equal_data_under_disjoint_ids() -> None:
    config = stamp_config(seed=3)
    a, b = EnvRunner(config, worker_index=1), EnvRunner(config, worker_index=1)
    chunks_a, chunks_b = a.sample() + a.sample(), b.sample() + b.sample()
    assert not {c.id_ for c in chunks_a} & {c.id_ for c in chunks_b}
    for x, y in zip(chunks_a, chunks_b, strict=True):
        assert_episodes_equal(x, y, compare_ids=False)


_RUN_IN_PROCESS = """
import json, numpy as np
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
runner = EnvRunner(EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=30, seed=9))
chunks = runner.sample() + runner.sample()
print(json.dumps({"ids": [c.id_ for c in chunks],
                  "obs": [np.asarray(c.get_observations()).tolist() for c in chunks],
                  "actions": [np.asarray(c.get_actions()).tolist() for c in chunks]}))
"""


def test_two_processes_with_the_same_seed_give_equal_data_under_disjoint_ids() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _RUN_IN_PROCESS], cwd=root, capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert not set(runs[0]["ids"]) & set(runs[1]["ids"])
    assert runs[0]["obs"] == runs[1]["obs"] and runs[0]["actions"] == runs[1]["actions"]
    assert len(runs[0]["ids"]) > 2


class DeadReplay:
    """A replay whose actor has died: every ``add`` raises Ray's ``RayActorError``."""

    def add(self, data: Any) -> Any:
        import ray

        raise ray.exceptions.RayActorError()


def test_drain_returns_chunks_held_for_a_dead_replay_before_the_running_steps() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=2, rollout_fragment_length=2))
    assert runner.sample_to(DeadReplay()).num_env_steps_held_for_replay == 4
    runner.sample(num_episodes=1)  # sub-env 0's whole second episode; sub-env 1's steps stay with the runner
    drained, dropped = runner.drain()
    assert dropped == 0
    assert [stamps(ep) for ep in drained] == [
        [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2)],  # held for the replay: first, in order
        [(0, 1, 0, 0), (0, 1, 0, 1), (0, 1, 0, 2)],
        [(0, 1, 0, 2), (0, 1, 0, 3)],  # then what the runner kept: the pending end of an episode
        [(0, 1, 1, 0), (0, 1, 1, 1), (0, 1, 1, 2), (0, 1, 1, 3), (0, 1, 1, 4)],  # and the running one
    ]


@pytest.mark.parametrize("mode", MODES)
def test_sample_to_reports_the_episodes_it_shipped_unfinished_that_still_run(mode: str) -> None:
    runner = EnvRunner(stamp_config(mode, num_envs_per_env_runner=2, rollout_fragment_length=4))
    replay = ReplayActor(ReplayConfig(capacity_env_steps=1_000))
    for _ in range(3):  # episodes of 2..8 steps: some end on the way
        reported = runner.sample_to(replay).running_episode_ids
        stored = columnar_to_episodes(replay.get_state().episodes)
        assert reported == sorted(ep.id_ for ep in stored if not ep.is_done)


def test_sample_to_does_not_report_the_episodes_a_force_reset_ended() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=2, rollout_fragment_length=4))
    replay = ReplayActor(ReplayConfig(capacity_env_steps=1_000))
    before = runner.sample_to(replay).running_episode_ids
    assert before is not None and len(before) == 2
    after = runner.sample_to(replay, force_reset=True).running_episode_ids
    stored = columnar_to_episodes(replay.get_state().episodes)  # the reset-away episodes' last chunks too
    assert after == sorted(ep.id_ for ep in stored if not ep.is_done and ep.id_ not in before)
    assert len(after) == 2


def test_sample_columnar_reports_no_running_episode_ids() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=2, rollout_fragment_length=4))
    _, metrics = runner.sample_columnar()
    assert metrics.running_episode_ids is None


class TestVectorizedFallback:
    def test_pieces_outside_the_contract_fall_back_to_the_per_step_engine_and_say_so(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        def plain_piece(*, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
            assert episodes, "a plain piece may read the episodes: it gets them on the per-step engine"
            return batch

        with caplog.at_level("WARNING", logger="ray_sampler.sampling.env_runner"):
            runner = EnvRunner(stamp_config(env_to_module_connectors=(plain_piece,), rollout_fragment_length=2))
        assert not runner.is_vectorized
        assert runner.vectorized_fallback is not None and "['plain_piece']" in runner.vectorized_fallback
        assert "falls back to the per-step engine" in caplog.text
        runner.sample()
        assert runner.get_metrics().vectorized_fallback == runner.vectorized_fallback
        runner.sample(num_episodes=1)  # the vectorized engine takes no num_episodes request: no fallback
        assert runner.get_metrics().vectorized_fallback is None
        runner.sample()
        assert runner.num_fallback_calls == 2

    def test_env_to_module_pieces_keeping_the_contract_stay_on_the_vectorized_engine(self) -> None:
        class Scale(EnvToModulePiece):
            def __call__(self, *, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
                batch["obs"] = self.running(episodes, kwargs.get("shared_data")).get_observations(1)[:, 0] * 2
                return batch

        runner = EnvRunner(stamp_config(env_to_module_connectors=(Scale(),), rollout_fragment_length=2))
        assert runner.is_vectorized and runner.vectorized_fallback is None
        assert sum(len(c) for c in runner.sample()) == 2 * runner.num_envs
        assert runner.num_fallback_calls == 0 and runner.get_metrics().vectorized_fallback is None
