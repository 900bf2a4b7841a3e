"""EnvRunner (plain class, no Ray): both batch modes, every autoreset mode, seeding, creators, actions."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError, EnvCreatorError
from ray_sampler.modules import RandomModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from tests.helpers import STAMP_ID, assert_episodes_equal, stamp_creator, stamp_length

MODES = ["sync", "NextStep", "SameStep", "Disabled"]


def stamp_config(mode: str = "sync", **kwargs: Any) -> EnvRunnerConfig:
    """StampEnv through our SyncVectorEnv ("sync") or as a native vector env in an autoreset mode."""
    base: dict[str, Any] = {"num_envs_per_env_runner": 3, "rollout_fragment_length": 5}
    if mode == "sync":
        base["env"] = stamp_creator
    else:
        base.update(env=STAMP_ID, vectorization_mode="vector_entry_point", env_config={"autoreset_mode": mode})
    return EnvRunnerConfig(**{**base, **kwargs})


def stamps(ep: SingleAgentEpisode, indices: Any = None, **kwargs: Any) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in np.asarray(o)) for o in ep.get_observations(indices, **kwargs)]


def join(chunks: list[SingleAgentEpisode]) -> dict[str, SingleAgentEpisode]:
    joined: dict[str, SingleAgentEpisode] = {}
    for chunk in chunks:
        piece = SingleAgentEpisode.from_state(chunk.get_state())
        if chunk.id_ in joined:
            joined[chunk.id_].concat_episode(piece)
        else:
            joined[chunk.id_] = piece
    return joined


def assert_steps_once_and_continuous(chunks: list[SingleAgentEpisode]) -> None:
    """Every env step appears in exactly one chunk, and chunks join into gap-free episodes."""
    step_keys = [s for c in chunks for s in stamps(c)[1:]]
    assert len(step_keys) == len(set(step_keys)), "an env step was returned twice"
    for c in chunks:
        # Each observation carries its own info: the reset's or the step's that led to it.
        infos = c.get_infos(slice(-c.len_lookback_buffer - len(c) - 1, None))
        for (_, _, e, t), info in zip(stamps(c, slice(-c.len_lookback_buffer - len(c) - 1, None)), infos, strict=True):
            assert info == ({"episode": e} if t == 0 else {"t": t})
    for ep in join(chunks).values():
        obs = stamps(ep)
        w, v, e, t0 = obs[0]
        assert obs == [(w, v, e, t0 + k) for k in range(len(obs))]
        if ep.t_started == 0:
            assert t0 == 0
        assert np.asarray(ep.get_rewards()).tolist() == [float(t) for t in range(t0 + 1, t0 + len(ep) + 1)]


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
        assert runner.metrics["num_env_steps"] == 5 * num_envs
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
def test_seeded_rerun_is_identical_and_runners_differ() -> None:
    config = EnvRunnerConfig(env="CartPole-v1", num_envs_per_env_runner=2, rollout_fragment_length=20, seed=7)
    a, b = EnvRunner(config, worker_index=1), EnvRunner(config, worker_index=1)
    for _ in range(2):
        for x, y in zip(a.sample(), b.sample(), strict=True):
            assert_episodes_equal(x, y)
    first_obs = {w: np.asarray(EnvRunner(config, worker_index=w).sample()[0].get_observations(0)) for w in (1, 2, 3)}
    assert len({o.tobytes() for o in first_obs.values()}) == 3


def test_creator_sees_distinct_worker_and_vector_indices() -> None:
    contexts: list[dict] = []

    def creator(ctx: Any) -> gym.Env:
        contexts.append(dict(ctx))
        assert ctx.worker_index == ctx["worker_index"]
        return stamp_creator(ctx)

    EnvRunner(
        EnvRunnerConfig(env=creator, num_envs_per_env_runner=3, env_config={"x": 1}), worker_index=4, num_workers=5
    )
    assert contexts == [{"x": 1, "worker_index": 4, "vector_index": v, "num_workers": 5} for v in range(3)]


def test_registered_env_name_is_used() -> None:
    from ray_sampler.sampling.env_creator import register_env

    register_env("stamp-for-test", stamp_creator)
    out = EnvRunner(EnvRunnerConfig(env="stamp-for-test", rollout_fragment_length=3)).sample()
    assert stamps(out[0])[0] == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("env", "error", "match"),
    [
        (42, ConfigError, "'env' must be a gymnasium id, a registered env name or a callable creator"),
        ("NoSuchEnv-v9", EnvCreatorError, "neither a name given to register_env nor a gymnasium id"),
        (lambda ctx: "not an env", EnvCreatorError, "must return a gymnasium.Env \\(got builtins.str"),
        (lambda ctx: 1 / 0, EnvCreatorError, "env creator failed for worker_index=0, vector_index=0"),
    ],
    ids=["not_callable", "unknown_name", "non_env", "raises"],
)
def test_bad_creators_raise_clear_errors(env: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        EnvRunner(EnvRunnerConfig(env=env))


def test_sub_envs_with_different_spaces_raise() -> None:
    def creator(ctx: Any) -> gym.Env:
        return gym.make("CartPole-v1") if ctx.vector_index == 0 else gym.make("MountainCar-v0")

    with pytest.raises(EnvCreatorError, match="sub-envs must share their observation_space"):
        EnvRunner(EnvRunnerConfig(env=creator, num_envs_per_env_runner=2))


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
        returns += runner.metrics["episode_returns"]
        lengths += runner.metrics["episode_lengths"]
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
    assert b.metrics["weights_version"] == 5


def test_drain_returns_unfinished_steps_only() -> None:
    runner = EnvRunner(stamp_config(batch_mode="complete_episodes"))
    returned = runner.sample()
    running = sum(1 for ep in runner._episodes if len(ep) and not ep.is_done)
    drained, dropped = runner.drain()
    # Complete mode ships whole episodes only: running ones are dropped and counted.
    assert drained == [] and dropped == running >= 1
    truncating = EnvRunner(stamp_config(num_envs_per_env_runner=3))
    returned = truncating.sample(num_episodes=1)
    drained, dropped = truncating.drain()
    assert dropped == 0 and drained and all(len(ep) for ep in drained)
    assert_steps_once_and_continuous(returned + drained)


# ------------------------------------------------------------------ differential: columnar path == episode path
def _by_first_step(chunks: list[SingleAgentEpisode]) -> dict[tuple, dict]:
    """Chunks keyed by their first data observation's stamp, compared on everything but the id."""
    from tests.helpers import full_state

    out = {}
    for c in chunks:
        state = full_state(c)
        del state["id_"]
        out[stamps(c)[0]] = state
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("h", [0, 2])
def test_columnar_path_equals_episode_path(mode: str, num_envs: int, h: int) -> None:
    runners = [
        EnvRunner(
            stamp_config(mode, num_envs_per_env_runner=num_envs, episode_lookback_horizon=h, columnar_sampling=columnar)
        )
        for columnar in (True, False)
    ]
    assert runners[0]._columnar and not runners[1]._columnar
    calls: list[dict] = [{}, {}, {"num_timesteps": 7}, {}, {"force_reset": True}, {}, {"random_actions": True}, {}]
    for kwargs in calls:
        fast, slow = (r.sample(**kwargs) for r in runners)
        assert sum(len(c) for c in fast) == sum(len(c) for c in slow)
        a, b = _by_first_step(fast), _by_first_step(slow)
        assert a.keys() == b.keys()
        for key in a:
            for field in a[key]:
                if field in ("observations", "actions", "rewards"):
                    np.testing.assert_array_equal(a[key][field], b[key][field], err_msg=f"{key} {field}")
                elif field == "extra_model_outputs":
                    for k in a[key][field]:
                        np.testing.assert_array_equal(a[key][field][k], b[key][field][k], err_msg=f"{key} {k}")
                else:
                    assert a[key][field] == b[key][field], (key, field)
        assert sorted(runners[0].metrics["episode_lengths"]) == sorted(runners[1].metrics["episode_lengths"])
        assert sorted(runners[0].metrics["episode_returns"]) == sorted(runners[1].metrics["episode_returns"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "episodes"])
def test_num_episodes_calls_between_truncate_calls_keep_every_step_once(mode: str, columnar: bool) -> None:
    # num_episodes takes the episode path; plain calls the columnar one (unless switched off). The
    # steps num_episodes leaves in running episodes make the next call overshoot in every mode.
    runner = EnvRunner(stamp_config(mode, episode_lookback_horizon=2, columnar_sampling=columnar))
    chunks = []
    for kwargs in ({}, {"num_episodes": 2}, {}, {"num_timesteps": 4}, {"num_episodes": 1}, {}, {}):
        out = runner.sample(**kwargs)
        if "num_episodes" not in kwargs:
            assert sum(len(c) for c in out) == (6 if "num_timesteps" in kwargs else 15)
        chunks += out
    drained, dropped = runner.drain()
    assert dropped == 0
    chunks += drained
    assert_steps_once_and_continuous(chunks)


def test_columnar_path_on_cartpole_equals_episode_path() -> None:
    configs = [
        EnvRunnerConfig(
            env="CartPole-v1", num_envs_per_env_runner=4, rollout_fragment_length=30, seed=5, columnar_sampling=c
        )
        for c in (True, False)
    ]
    fast_runner, slow_runner = EnvRunner(configs[0]), EnvRunner(configs[1])
    for _ in range(3):
        fast, slow = fast_runner.sample(), slow_runner.sample()
        assert len(fast) == len(slow)
        key = lambda ep: (float(np.asarray(ep.get_observations(0))[0]), ep.t_started)  # noqa: E731
        for x, y in zip(sorted(fast, key=key), sorted(slow, key=key), strict=True):
            y.id_ = x.id_
            assert_episodes_equal(x, y)


# ------------------------------------------------------------------ regressions from the review of issue #3
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "episodes"])
def test_leftovers_larger_than_a_call_are_returned_over_several_calls(mode: str, columnar: bool) -> None:
    runner = EnvRunner(
        stamp_config(
            mode,
            num_envs_per_env_runner=3,
            rollout_fragment_length=1,
            episode_lookback_horizon=1,
            columnar_sampling=columnar,
        )
    )
    chunks = runner.sample(num_episodes=2)  # leaves several steps in the running episodes
    for kwargs in ({}, {}, {"force_reset": True}, {}, {"num_timesteps": 2}, {}):
        out = runner.sample(**kwargs)
        assert sum(len(c) for c in out) == 3
        chunks += out
    chunks += runner.drain()[0]
    assert_steps_once_and_continuous(chunks)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "episodes"])
def test_random_call_sequences_keep_every_step_once(seed: int, mode: str, columnar: bool) -> None:
    rng = np.random.default_rng(seed)
    num_envs = int(rng.integers(1, 5))
    runner = EnvRunner(
        stamp_config(
            mode,
            num_envs_per_env_runner=num_envs,
            columnar_sampling=columnar,
            rollout_fragment_length=int(rng.integers(1, 5)),
            episode_lookback_horizon=int(rng.integers(0, 4)),
        )
    )
    chunks = []
    for _ in range(12):
        kind = rng.integers(0, 5)
        kwargs = [
            {},
            {"num_timesteps": int(rng.integers(1, 12))},
            {"num_episodes": int(rng.integers(1, 4))},
            {"force_reset": True},
            {"random_actions": True, "explore": False},
        ][kind]
        out = runner.sample(**kwargs)
        if "num_episodes" in kwargs:
            assert len(out) == kwargs["num_episodes"] and all(e.t_started == 0 and e.is_done for e in out)
        else:
            per_env = -(-kwargs.get("num_timesteps", runner.config.rollout_fragment_length * num_envs) // num_envs)
            assert sum(len(c) for c in out) == per_env * num_envs
        chunks += out
    chunks += runner.drain()[0]
    assert_steps_once_and_continuous(chunks)
    made = sum(len(e.unwrapped.actions_seen) for e in getattr(runner.env, "envs", []))
    if made:  # every step the envs made was returned
        assert made == sum(len(c) for c in chunks)


def test_num_episodes_counts_whole_episodes_only() -> None:
    runner = EnvRunner(stamp_config(num_envs_per_env_runner=1, rollout_fragment_length=3, episode_lookback_horizon=2))
    first = runner.sample(num_timesteps=1)
    (ep,) = runner.sample(num_episodes=1)
    assert ep.t_started == 0 and ep.len_lookback_buffer == 0 and ep.is_done
    rest = runner.sample()  # the tail of the episode the first call began comes now
    assert_steps_once_and_continuous(first + [ep] + rest)


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
    ],
    ids=["columnar", "normalize"],
)
def test_bool_fields_are_checked(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EnvRunnerConfig(env="CartPole-v1", **kwargs)


def test_bad_module_class_or_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="'module_class' 'int'"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_class=int))
    with pytest.raises(ConfigError, match="'module_config'.*unexpected keyword"):
        EnvRunner(EnvRunnerConfig(env="CartPole-v1", module_config={"hidden": 3}))


def test_random_module_leaves_the_runner_action_space_alone() -> None:
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    before = space.np_random.bit_generator.state
    RandomModule(space, space, seed=3).forward_inference({"obs": np.zeros((4, 1))})
    assert space.np_random.bit_generator.state == before
