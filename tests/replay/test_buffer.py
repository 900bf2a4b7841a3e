"""EpisodeReplayBuffer sampling: next_obs, flags and n-step returns against a plain loop, on runner data."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.errors import ReplayError
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner
from replay.buffer import EpisodeReplayBuffer
from tests.helpers import stamp_creator, stamp_length
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
    batch = buffer.sample(100, n_step=2)
    np.testing.assert_array_equal(batch["logp"], -batch["obs"][:, 0])


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
