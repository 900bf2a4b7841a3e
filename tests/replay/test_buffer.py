"""EpisodeReplayBuffer sampling: next_obs, flags and n-step returns against a plain loop, on runner data."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from replay.buffer import EpisodeReplayBuffer
from tests.helpers import assert_episodes_equal, stamp_creator, stamp_length
from tests.replay.test_storage import episode


def fill_from_runner(buffer: EpisodeReplayBuffer, calls: int, **config: object) -> dict[tuple[int, int], int]:
    """Runner chunks into the buffer; returns, per (vector, episode), the last stored t."""
    runner = EnvRunner(
        EnvRunnerConfig(
            **{
                "env": stamp_creator,
                "num_envs_per_env_runner": 3,
                "rollout_fragment_length": 5,
                "episode_lookback_horizon": 2,
                **config,
            }
        )
    )
    last: dict[tuple[int, int], int] = {}
    for _ in range(calls):
        col, _ = runner.sample_columnar()
        buffer.add(col)
        for row in col.data.observations[col.obs_offsets[1:] - 1].tolist():  # each chunk's last observation
            last[(row[1], row[2])] = max(last.get((row[1], row[2]), 0), row[3])
    return last


@pytest.mark.parametrize("n_step", [1, 3])
def test_sampled_transitions_equal_a_plain_loop(n_step: int) -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=10**6, seed=0)
    last = fill_from_runner(buffer, 6)
    gamma = 0.9
    batch = buffer.sample(3000, n_step=n_step, gamma=gamma)
    for obs, _action, reward, nxt, term, trunc, n, t in zip(
        batch["obs"].tolist(),
        batch["actions"].tolist(),
        batch["rewards"].tolist(),
        batch["next_obs"].tolist(),
        batch["terminateds"].tolist(),
        batch["truncateds"].tolist(),
        batch["n_step"].tolist(),
        batch["t"].tolist(),
        strict=True,
    ):
        _, v, e, t0 = obs
        assert t0 == t
        end = stamp_length(v, e)
        stored_end = last[(v, e)]
        expected_n = min(n_step, stored_end - t0)
        assert n == expected_n
        assert reward == pytest.approx(sum(gamma**i * (t0 + 1 + i) for i in range(expected_n)))
        assert nxt == [obs[0], v, e, t0 + expected_n]  # never across an episode boundary
        assert term == (t0 + expected_n == end) and not trunc


def test_every_stored_step_is_sampled_and_sampling_is_seeded() -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=10**6, seed=3)
    buffer.add([episode("a", 5, terminated=True), episode("b", 4)])
    batch = buffer.sample(2000)
    assert sorted(set(batch["obs"][:, 0].tolist())) == [0, 1, 2, 3, 4]
    counts = np.bincount(batch["obs"][:, 0].astype(int), minlength=5)
    assert counts.min() > 200  # uniform over the 9 stored steps (two episodes share obs values)
    again = EpisodeReplayBuffer(capacity_env_steps=10**6, seed=3)
    again.add([episode("a", 5, terminated=True), episode("b", 4)])
    np.testing.assert_array_equal(again.sample(2000)["obs"], batch["obs"])


def test_terminal_and_truncated_last_steps() -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=100, seed=1)
    truncated = episode("b", 2)
    truncated.is_truncated = True
    buffer.add([episode("a", 2, terminated=True), truncated, episode("c", 2)])
    batch = buffer.sample(600, n_step=5, gamma=1.0)
    last_steps = batch["obs"][:, 0] == 1.0
    flags = set(zip(batch["terminateds"][last_steps].tolist(), batch["truncateds"][last_steps].tolist(), strict=True))
    assert flags == {(True, False), (False, True), (False, False)}  # terminated, truncated, ongoing
    assert (batch["next_obs"][last_steps, 0] == 2.0).all()
    assert not (batch["terminateds"] & batch["truncateds"]).any()


def test_model_outputs_come_with_the_first_step() -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=100, seed=2)
    buffer.add([episode("a", 6)])
    batch = buffer.sample(100, n_step=2, include_extra_model_outputs=True)
    np.testing.assert_array_equal(batch["logp"], -batch["obs"][:, 0])


def test_model_outputs_are_left_out_by_default_as_rllib() -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=100, seed=2)
    buffer.add([episode("a", 6)])
    assert sorted(buffer.sample(4, n_step=2)) == [
        "actions",
        "keys",
        "n_step",
        "next_obs",
        "obs",
        "rewards",
        "t",
        "terminateds",
        "truncateds",
    ]


def test_runner_chunks_join_into_gap_free_stored_episodes() -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=10**6, seed=0)
    fill_from_runner(buffer, 8)
    s = buffer.storage
    assert len(buffer) == 8 * 15
    for id_ in s.episodes:
        stamps = s.gather_observations(s.episode_rows(id_).observations).tolist()
        assert [r[3] for r in stamps] == list(range(len(stamps)))  # every chunk continued its episode
    assert max(len(s.segments_of(id_)) for id_ in s.episodes) > 1  # chunks were joined


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size_B": 0}, "'batch_size_B' must be an int >= 1"),
        ({"batch_size_B": 4, "n_step": 0}, "'n_step'"),
        ({"batch_size_B": 4, "gamma": 1.5}, "'gamma' must be in"),
    ],
    ids=["batch", "n_step", "gamma"],
)
def test_bad_sample_requests_raise(kwargs: dict, match: str) -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=100)
    buffer.add([episode("a", 3)])
    with pytest.raises(ReplayError, match=match):
        buffer.sample(**kwargs)


def test_sampling_an_empty_buffer_raises() -> None:
    with pytest.raises(ReplayError, match="holds no steps"):
        EpisodeReplayBuffer(capacity_env_steps=10).sample(1)


@pytest.mark.parametrize(("length_t", "lookback"), [(1, 0), (4, 2), (20, 3)])
def test_sampled_episode_chunks_equal_the_stored_steps(length_t: int, lookback: int) -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=10**6, seed=5)
    last = fill_from_runner(buffer, 6, episode_lookback_horizon=2)
    for chunk in buffer.sample_episodes(200, length_t, lookback=lookback):
        obs = np.asarray(chunk.get_observations(slice(-chunk.len_lookback_buffer - len(chunk) - 1, None)))
        w, v, e, t0 = obs[0]
        # Consecutive stamps of one episode, lookback first; the chunk starts at t_started.
        assert obs.tolist() == [[w, v, e, t0 + i] for i in range(len(obs))]
        assert obs[chunk.len_lookback_buffer][3] == chunk.t_started
        assert 1 <= len(chunk) <= length_t and chunk.len_lookback_buffer <= lookback
        end = chunk.t_started + len(chunk)
        assert end <= last[(v, e)]
        assert len(chunk) == length_t or end == last[(v, e)]  # shorter only at the last stored step
        assert chunk.is_terminated == (end == stamp_length(v, e))
        assert np.asarray(chunk.get_rewards()).tolist() == [float(t + 1) for t in range(chunk.t_started, end)]
        assert chunk.get_infos(0) == ({"episode": e} if chunk.t_started == 0 else {"t": chunk.t_started})
        if chunk.len_lookback_buffer == lookback:
            continue
        # Less lookback only where the stored episode (with its own lookback) has no more.
        stored = buffer.storage.episodes[chunk.id_]
        first_lb = int(buffer.storage.segment_view().lookback_len[stored.first_segment])
        assert chunk.len_lookback_buffer == chunk.t_started - stored.t_started + first_lb


def test_sample_episodes_rejects_bad_arguments() -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=100)
    buffer.add([episode("a", 3)])
    with pytest.raises(ReplayError, match="'batch_length_T' must be an int >= 1"):
        buffer.sample_episodes(2, 0)


def test_infos_survive_eviction_and_compaction() -> None:
    buffer = EpisodeReplayBuffer(capacity_env_steps=40, seed=0)
    fill_from_runner(buffer, 60)  # 900 steps through a 40-step buffer: most evicted
    s = buffer.storage
    rows_before = s.num_obs_rows
    s.compact()
    assert s.num_obs_rows < rows_before
    col = s.episodes_columnar(list(s.episodes))
    infos = dict(zip(col.data.info_rows.tolist(), col.data.info_values, strict=True))
    for row, (_, _, e, t) in enumerate(col.data.observations.tolist()):
        assert infos.get(row, {}) == ({"episode": e} if t == 0 else {"t": t})
    lb_infos = dict(zip(col.lookback.info_rows.tolist(), col.lookback.info_values, strict=True))
    for row, (_, _, e, t) in enumerate(col.lookback.observations.tolist()):
        assert lb_infos.get(row, {}) == ({"episode": e} if t == 0 else {"t": t})


@pytest.mark.parametrize("prioritized", [False, True])
def test_sample_batches_are_one_draw_split_into_equal_batches(prioritized: bool) -> None:
    from replay.prioritized import PrioritizedEpisodeReplayBuffer

    cls = PrioritizedEpisodeReplayBuffer if prioritized else EpisodeReplayBuffer
    one, split = cls(capacity_env_steps=500, seed=3), cls(capacity_env_steps=500, seed=3)
    fill_from_runner(one, 2)
    fill_from_runner(split, 2)
    whole = one.sample(12, n_step=3)
    batches = split.sample_batches(4, 3, n_step=3)
    assert len(batches) == 3 and [len(b["obs"]) for b in batches] == [4, 4, 4]
    for key, value in whole.items():
        np.testing.assert_array_equal(np.concatenate([b[key] for b in batches]), value)
    assert batches[-1]["t"].tolist() == batches[2]["t"].tolist()
    with pytest.raises(IndexError):
        batches[3]
    with pytest.raises(ReplayError, match="'num_batches' must be an int >= 1"):
        split.sample_batches(4, 0)


def test_sample_batches_split_nested_observations_leaf_by_leaf() -> None:
    from ray_sampler.data.episode import SingleAgentEpisode
    from replay.actor import ReplayActor, ReplayConfig

    def obs(t: int) -> dict:
        return {"pos": np.array([t, -t], np.float32), "deep": (np.float32(t), np.array([t], np.int64))}

    eps = [
        SingleAgentEpisode(
            f"e{k}",
            observations=[obs(t) for t in range(9)],
            actions=list(range(8)),
            rewards=[float(t) for t in range(8)],
        )
        for k in range(2)
    ]
    one, split = EpisodeReplayBuffer(seed=4), EpisodeReplayBuffer(seed=4)
    one.add(eps)
    split.add(eps)
    whole, batches = one.sample(6), split.sample_batches(2, 3)
    assert len(batches) == 3
    for j, batch in enumerate(batches):
        assert batch["obs"]["pos"].shape == (2, 2) and batch["obs"]["deep"][1].shape == (2, 1)
        np.testing.assert_array_equal(batch["obs"]["deep"][0], whole["obs"]["deep"][0][2 * j : 2 * j + 2])
        np.testing.assert_array_equal(batch["obs"]["pos"][:, 0], batch["actions"])  # rows stay aligned
    actor = ReplayActor(ReplayConfig(seed=0))
    actor.add(eps)
    assert actor.sample(3)["obs"]["pos"].shape == (3, 2)
    assert batches[np.int64(1)]["t"].tolist() == batches[1]["t"].tolist()
    with pytest.raises(TypeError, match="not a slice"):
        batches[0:2]


class TestRLlibConstructorNames:
    def test_capacity_is_rllibs_name_of_capacity_env_steps(self) -> None:
        assert EpisodeReplayBuffer(capacity=1000).storage.capacity_env_steps == 1000
        assert EpisodeReplayBuffer(1000).storage.capacity_env_steps == 1000
        assert EpisodeReplayBuffer(capacity=50, capacity_env_steps=50).storage.capacity_env_steps == 50
        assert EpisodeReplayBuffer().storage.capacity_env_steps == 1_000_000

    def test_capacity_and_capacity_env_steps_that_differ_raise_naming_both(self) -> None:
        with pytest.raises(
            ReplayError, match=r"'capacity_env_steps' and 'capacity' name the same setting.*\(got 10 and 20\)"
        ):
            EpisodeReplayBuffer(20, capacity_env_steps=10)

    def test_batch_size_b_of_the_constructor_is_sample_s_default(self) -> None:
        buffer = EpisodeReplayBuffer(capacity=100, batch_size_B=7, seed=0)
        buffer.add(episode("a", 3))
        assert (len(buffer.sample()["obs"]), len(buffer.sample_episodes()), len(buffer.sample(2)["obs"])) == (7, 7, 2)
        assert [len(b["obs"]) for b in buffer.sample_batches(None, 2)] == [7, 7]

    def test_rllib_defaults_are_16_and_64(self) -> None:
        buffer = EpisodeReplayBuffer()
        assert (buffer.batch_size_B, buffer.batch_length_T) == (16, 64)

    def test_batch_length_t_of_the_constructor_is_sample_episodes_default(self) -> None:
        buffer = EpisodeReplayBuffer(capacity=100, batch_size_B=4, batch_length_T=2, seed=0)
        buffer.add(episode("a", 9))
        assert {len(c) for c in buffer.sample_episodes()} <= {1, 2} and 2 in {len(c) for c in buffer.sample_episodes()}

    def test_num_items_is_rllibs_name_of_batch_size_b(self) -> None:
        buffer = EpisodeReplayBuffer(capacity=100, seed=0)
        buffer.add(episode("a", 3))
        assert len(buffer.sample(num_items=5)["obs"]) == 5
        with pytest.raises(ReplayError, match=r"'batch_size_B' and 'num_items' name the same setting.*\(got 4 and 5\)"):
            buffer.sample(4, num_items=5)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"batch_size_B": 0}, "'batch_size_B' must be an int >= 1 \\(got 0\\)"),
            ({"batch_length_T": 0}, "'batch_length_T' must be an int >= 1 \\(got 0\\)"),
        ],
        ids=["B", "T"],
    )
    def test_bad_batch_defaults_raise(self, kwargs: dict, match: str) -> None:
        with pytest.raises(ReplayError, match=match):
            EpisodeReplayBuffer(**kwargs)


class TestCounters:
    """RLlib's get_* counters, exact, through eviction, sampling and get_state/set_state."""

    @pytest.fixture
    def used(self) -> EpisodeReplayBuffer:
        buffer = EpisodeReplayBuffer(capacity=6, seed=0)
        buffer.add([episode("a", 3, terminated=True), episode("b", 2)])
        buffer.add(episode("b", 2, start=2, lookback=1))  # b: 4 steps, joined
        buffer.add(episode("c", 2))  # evicts a (3 steps): 6 stored
        buffer.sample(5, n_step=3)  # 5 transitions, whatever their n
        buffer.sample_episodes(2, 3, lookback=1)  # the chunks' steps
        return buffer

    def test_counts_follow_rllibs_meaning(self, used: EpisodeReplayBuffer) -> None:
        assert used.get_num_episodes() == 2
        assert used.get_num_episodes_evicted() == 1
        assert used.get_num_timesteps() == 6 == len(used)
        assert used.get_added_timesteps() == 9  # 3 + 2 + 2 + 2, the evicted ones too
        assert used.get_sampled_timesteps() == 5 + 3 + 3  # 5 transitions, two 3-step chunks (seed 0: b at t 0)

    def test_counts_survive_get_state_and_set_state(self, used: EpisodeReplayBuffer) -> None:
        other = EpisodeReplayBuffer(capacity=1)
        other.set_state(used.get_state())
        counts = lambda b: (  # noqa: E731
            b.get_num_episodes(),
            b.get_num_episodes_evicted(),
            b.get_num_timesteps(),
            b.get_added_timesteps(),
            b.get_sampled_timesteps(),
        )
        assert counts(other) == counts(used)

    def test_a_sampled_transition_counts_one_whatever_its_n(self) -> None:
        buffer = EpisodeReplayBuffer(capacity=100, seed=0)
        buffer.add(episode("a", 5))
        buffer.sample(4, n_step=(1, 3))
        buffer.sample_batches(2, 3)
        buffer.sample(2, sample_episodes=True, n_step=2)
        assert buffer.get_sampled_timesteps() == 4 + 6 + 2

    def test_resent_steps_skipped_are_not_added(self) -> None:
        buffer = EpisodeReplayBuffer(capacity=100)
        buffer.add(episode("a", 3))
        buffer.add(episode("a", 3))  # the same chunk again: skipped as a duplicate
        assert buffer.get_added_timesteps() == 3


class TestAdd:
    def test_one_episode_is_added_as_a_list_of_one(self) -> None:
        buffer = EpisodeReplayBuffer(capacity=100)
        assert buffer.add(episode("a", 3)) == 3
        assert (buffer.get_num_episodes(), len(buffer)) == (1, 3)

    def test_another_type_raises_saying_what_is_accepted(self) -> None:
        buffer = EpisodeReplayBuffer(capacity=100)
        with pytest.raises(
            ReplayError,
            match=r"^add takes a SingleAgentEpisode, a list \(or tuple\) of them, or a ColumnarEpisodes \(got int\)$",
        ):
            buffer.add(3)  # type: ignore[arg-type]


def with_infos(ep: SingleAgentEpisode) -> SingleAgentEpisode:
    """``ep`` with info {"t": t} at every observation."""
    return SingleAgentEpisode(
        ep.id_,
        observations=ep.get_observations(),
        actions=ep.get_actions(),
        rewards=ep.get_rewards(),
        extra_model_outputs={"logp": ep.get_extra_model_outputs("logp")},
        infos=[{"t": ep.t_started + i} for i in range(len(ep) + 1)],
        terminated=ep.is_terminated,
        t_started=ep.t_started,
    )


class TestSampleOptions:
    @pytest.fixture
    def buffer(self) -> EpisodeReplayBuffer:
        buffer = EpisodeReplayBuffer(capacity=100, seed=0)
        buffer.add(with_infos(episode("a", 8, terminated=True)))
        return buffer

    def test_an_n_step_range_is_drawn_per_transition_low_to_high_inclusive(self, buffer: EpisodeReplayBuffer) -> None:
        batch = buffer.sample(2000, n_step=(2, 4), gamma=1.0)
        t, n = batch["t"], batch["n_step"]
        assert set(n[t <= 4].tolist()) == {2, 3, 4}  # far from the end: the drawn n itself
        np.testing.assert_array_equal(batch["next_obs"][:, 0], t + n)  # obs t
        np.testing.assert_array_equal(batch["rewards"], [sum(range(k + 1, k + m + 1)) for k, m in zip(t, n)])

    def test_an_n_step_range_samples_alike_given_the_seed(self) -> None:
        a, b = (EpisodeReplayBuffer(capacity=100, seed=5) for _ in range(2))
        for buf in (a, b):
            buf.add(episode("a", 8))
        x, y = a.sample(50, n_step=(1, 5)), b.sample(50, n_step=(1, 5))
        assert all(np.array_equal(x[k], y[k]) for k in x)

    def test_infos_at_next_obs_on_request(self, buffer: EpisodeReplayBuffer) -> None:
        batch = buffer.sample(20, n_step=2, include_infos=True)
        assert [i["t"] for i in batch["infos"]] == (batch["t"] + batch["n_step"]).tolist()

    def test_infos_ship_in_batch_lists(self, buffer: EpisodeReplayBuffer) -> None:
        batches = buffer.sample_batches(3, 2, include_infos=True)
        assert [i["t"] for i in batches[1]["infos"]] == (batches[1]["t"] + 1).tolist()

    def test_flag_values_must_be_bools(self, buffer: EpisodeReplayBuffer) -> None:
        with pytest.raises(ReplayError, match=r"^'include_infos' must be True or False \(got 1\)$"):
            buffer.sample(2, include_infos=1)  # type: ignore[call-overload]

    def test_batch_length_t_needs_sample_episodes(self, buffer: EpisodeReplayBuffer) -> None:
        with pytest.raises(ReplayError, match=r"^'batch_length_T' \(got 4\) needs sample_episodes=True"):
            buffer.sample(2, batch_length_T=4)

    def test_beta_on_a_uniform_buffer_raises(self, buffer: EpisodeReplayBuffer) -> None:
        with pytest.raises(ReplayError, match=r"^'beta' \(got 0.4\) applies to a PrioritizedEpisodeReplayBuffer"):
            buffer.sample(2, beta=0.4)


class TestSampleEpisodes:
    """``sample(sample_episodes=True)``: RLlib's 1-step transition episodes, or chunks with a batch_length_T."""

    @pytest.fixture
    def buffer(self) -> EpisodeReplayBuffer:
        buffer = EpisodeReplayBuffer(capacity=100, seed=3)
        buffer.add(with_infos(episode("a", 4, terminated=True)))
        return buffer

    def test_each_is_the_transition_the_flat_batch_gives(self, buffer: EpisodeReplayBuffer) -> None:
        state = buffer.rng.bit_generator.state
        eps = buffer.sample(30, n_step=2, gamma=0.5, sample_episodes=True, include_extra_model_outputs=True)
        buffer.rng.bit_generator.state = state
        batch = buffer.sample(30, n_step=2, gamma=0.5, include_extra_model_outputs=True)
        assert [e.id_ for e in eps] == ["a"] * 30 and all(len(e) == 1 and e.is_numpy for e in eps)
        assert [e.t_started for e in eps] == batch["t"].tolist()
        assert [e.get_observations().tolist() for e in eps] == np.stack([batch["obs"], batch["next_obs"]], 1).tolist()
        assert [float(e.get_rewards()[0]) for e in eps] == batch["rewards"].tolist()
        assert [e.is_terminated for e in eps] == batch["terminateds"].tolist()
        assert [int(e.get_extra_model_outputs("n_step")[0]) for e in eps] == batch["n_step"].tolist()
        assert [float(e.get_extra_model_outputs("logp")[0]) for e in eps] == batch["logp"].tolist()
        assert {float(e.get_extra_model_outputs("weights")[0]) for e in eps} == {1.0}

    def test_exact_transitions_at_the_terminal(self, buffer: EpisodeReplayBuffer) -> None:
        eps = buffer.sample(40, n_step=3, gamma=0.5, sample_episodes=True)
        seen = {
            (e.t_started, tuple(e.get_observations()[:, 0].tolist()), float(e.get_rewards()[0]), e.is_terminated)
            for e in eps
        }
        assert sorted(seen) == [
            (0, (0.0, 3.0), 1 + 0.5 * 2 + 0.25 * 3, False),
            (1, (1.0, 4.0), 2 + 0.5 * 3 + 0.25 * 4, True),
            (2, (2.0, 4.0), 3 + 0.5 * 4, True),
            (3, (3.0, 4.0), 4.0, True),
        ]

    def test_model_outputs_and_infos_only_on_request(self, buffer: EpisodeReplayBuffer) -> None:
        (plain,) = buffer.sample(1, sample_episodes=True)
        assert sorted(plain.extra_model_outputs) == ["n_step", "weights"] and plain.get_infos() == [{}, {}]
        (full,) = buffer.sample(1, n_step=2, sample_episodes=True, include_infos=True)
        t, n = full.t_started, int(full.get_extra_model_outputs("n_step")[0])
        assert full.get_infos() == [{"t": t}, {"t": t + n}]

    def test_samples_alike_given_the_seed(self) -> None:
        a, b = (EpisodeReplayBuffer(capacity=100, seed=9) for _ in range(2))
        for buf in (a, b):
            buf.add(episode("a", 6))
        x = a.sample(10, n_step=(1, 3), sample_episodes=True)
        y = b.sample(10, n_step=(1, 3), sample_episodes=True)
        assert [(e.t_started, e.get_observations().tolist()) for e in x] == [
            (e.t_started, e.get_observations().tolist()) for e in y
        ]

    def test_with_a_batch_length_t_they_are_sample_episodes_chunks(self, buffer: EpisodeReplayBuffer) -> None:
        state = buffer.rng.bit_generator.state
        chunks = buffer.sample(5, batch_length_T=2, sample_episodes=True, lookback=1)
        buffer.rng.bit_generator.state = state
        expected = buffer.sample_episodes(5, 2, lookback=1)
        for c, e in zip(chunks, expected, strict=True):
            assert_episodes_equal(c, e)

    def test_chunks_need_n_step_1(self, buffer: EpisodeReplayBuffer) -> None:
        with pytest.raises(
            ReplayError, match=r"^'n_step' must be 1 when sampling sequences \(batch_length_T\) \(got 3\)$"
        ):
            buffer.sample(2, batch_length_T=2, n_step=3, sample_episodes=True)
