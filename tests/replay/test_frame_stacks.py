"""Stacked frames sampled straight from the replay: equal to the episode getters (the learner's
FrameStacking rule) across segments of one episode, its stored lookback and n-step next
observations; each frame stored once."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay import EpisodeReplayBuffer

K = 4


def frame(e: int, t: int) -> np.ndarray:
    """Episode ``e``'s observation at ``t``: a 2x2 uint8 frame naming both (never 0)."""
    return np.array([[e + 1, t + 1], [e + 1, t + 1]], np.uint8)


def episode(e: int, length: int, *, terminated: bool = True) -> SingleAgentEpisode:
    return SingleAgentEpisode(
        f"ep{e}",
        observations=[frame(e, t) for t in range(length + 1)],
        actions=[np.int64(t % 2) for t in range(length)],
        rewards=[1.0] * length,
        terminated=terminated,
    )


def chunks_of(ep: SingleAgentEpisode, cuts: list[int], lookback: int) -> list[SingleAgentEpisode]:
    """``ep`` as continuation chunks cut at ``cuts``, each with up to ``lookback`` steps before it."""
    bounds = [0, *cuts, len(ep)]
    return [ep.slice(slice(a, b), len_lookback_buffer=lookback) for a, b in itertools.pairwise(bounds)]


def expected_stack(e: int, t: int, first_t: int) -> np.ndarray:
    """Frames t-K+1 .. t, zero where before ``first_t`` (the first frame the buffer holds)."""
    return np.stack([frame(e, s) if s >= first_t else np.zeros((2, 2), np.uint8) for s in range(t - K + 1, t + 1)])


def check(batch: dict, first_t: dict[int, int]) -> None:
    assert batch["obs"].shape == (len(batch["t"]), K, 2, 2) and batch["obs"].dtype == np.uint8
    for obs, nxt, t, n in zip(batch["obs"], batch["next_obs"], batch["t"], batch["n_step"], strict=True):
        e = int(obs[-1, 0, 0]) - 1
        assert int(obs[-1, 0, 1]) - 1 == t
        assert np.array_equal(obs, expected_stack(e, int(t), first_t[e]))
        assert np.array_equal(nxt, expected_stack(e, int(t + n), first_t[e]))


@pytest.mark.parametrize("n_step", [1, 3])
def test_stacks_cross_segments_and_use_the_stored_lookback(n_step: int) -> None:
    buffer = EpisodeReplayBuffer(capacity=10_000, seed=0)
    # Episode 0 whole from t=0 in three chunks; episode 1's first stored chunk starts at t=5 with 2
    # steps of lookback (its steps before t=3 were never stored: zeros there).
    for c in chunks_of(episode(0, 20), [6, 7], lookback=3):
        buffer.add(c)
    for c in chunks_of(episode(1, 15), [5, 11], lookback=2)[1:]:
        buffer.add(c)
    # One frame row per stored step plus each segment's first observation (episode 1's lookback
    # frames are kept apart): never K frames per step.
    assert buffer.storage.num_obs_rows == len(buffer) + 3 + 2
    batch = buffer.sample(batch_size_B=400, n_step=n_step, frame_stack=K)
    check(batch, first_t={0: 0, 1: 3})
    assert {int(t) for t, o in zip(batch["t"], batch["obs"]) if o[-1, 0, 0] == 2} >= {5, 6, 11}  # crossed cuts


def test_stacks_equal_the_learners_frame_stacking_on_sampled_episodes() -> None:
    from connectors.learner import FrameStacking

    buffer = EpisodeReplayBuffer(capacity=10_000, seed=1)
    for c in chunks_of(episode(0, 30), [4, 9, 10, 22], lookback=3):
        buffer.add(c)
    batch = buffer.sample(batch_size_B=64, frame_stack=K)
    chunks = buffer.sample_episodes(batch_size_B=64, batch_length_T=1, lookback=K - 1)
    learner = FrameStacking(num_frames=K)(rl_module=None, batch={}, episodes=chunks)["default_policy"]["obs"]
    by_step = {int(s[-1, 0, 1]) - 1: s for s in learner}
    compared = 0
    for o in batch["obs"]:  # each sampled stack is the one the learner builds for the same step
        t = int(o[-1, 0, 1]) - 1
        if t in by_step:
            assert np.array_equal(o, by_step[t])
            compared += 1
    assert compared > 30


def test_an_evicting_buffer_stacks_the_episodes_it_keeps() -> None:
    buffer = EpisodeReplayBuffer(capacity=60, seed=0)
    for e in range(8):  # whole episodes are evicted, oldest first
        for c in chunks_of(episode(e, 20), [5, 10, 15], lookback=K - 1):
            buffer.add(c)
    kept = {int(o[-1, 0, 0]) - 1 for o in buffer.sample(batch_size_B=200, frame_stack=K)["obs"]}
    assert len(kept) < 8 and 7 in kept
    check(buffer.sample(batch_size_B=200, n_step=2, frame_stack=K), first_t=dict.fromkeys(kept, 0))


def test_frame_stack_is_checked() -> None:
    buffer = EpisodeReplayBuffer(capacity=100)
    buffer.add(episode(0, 5))
    with pytest.raises(ReplayError, match=r"'frame_stack' must be an int >= 1 \(got 0\)"):
        buffer.sample(batch_size_B=2, frame_stack=0)
    with pytest.raises(ReplayError, match="it takes no sample_episodes"):
        buffer.sample(batch_size_B=2, frame_stack=2, sample_episodes=True)  # type: ignore[call-overload]


def test_sample_batches_stack_every_batch() -> None:
    buffer = EpisodeReplayBuffer(capacity=1000, seed=0)
    for c in chunks_of(episode(0, 25), [10], lookback=K - 1):
        buffer.add(c)
    batches = buffer.sample_batches(16, 3, frame_stack=K)
    assert len(batches) == 3
    for batch in batches:
        check(batch, first_t={0: 0})


class TestAgainstEpisodeFrames:
    """Differential: every sampled stack equals one built straight from its stored episode's frames
    (lookback first, zeros before them), over random chunkings, lookbacks, interleaved episodes,
    evictions, compactions, n-steps and stacks longer than whole episodes; sampled after every add,
    so each storage state (and what is kept across samples of one state) is checked."""

    @staticmethod
    def reference(buffer: EpisodeReplayBuffer, keys: np.ndarray, ts: np.ndarray, k: int) -> np.ndarray:
        storage = buffer.storage
        by_order = {ep.order: id_ for id_, ep in storage.episodes.items()}
        stacks = []
        for key, t in zip(keys.tolist(), ts.tolist(), strict=True):
            col = storage.episodes_columnar([by_order[key >> 32]])
            frames = np.concatenate([col.lookback.observations, col.data.observations])
            first = int(col.t_started[0]) - int(col.lookback_lens[0])  # the first frame stored
            zeros = np.zeros_like(frames[0])
            stacks.append(np.stack([frames[s - first] if s >= first else zeros for s in range(t - k + 1, t + 1)]))
        return np.stack(stacks)

    @staticmethod
    def chunks(rng: np.random.Generator, num_episodes: int) -> list[SingleAgentEpisode]:
        """Every episode cut at random points (a random first stored step and lookback per chunk),
        the chunks of all episodes interleaved as runners ship them."""
        queues = []
        for e in range(num_episodes):
            ep = episode(e, int(rng.integers(1, 30)), terminated=bool(rng.integers(2)))
            start = int(rng.integers(0, min(len(ep), 5)))
            cuts = rng.integers(start + 1, len(ep), int(rng.integers(0, 4))) if len(ep) - start > 1 else []
            bounds = [start, *sorted(set(int(c) for c in cuts)), len(ep)]
            queues.append(
                [
                    ep.slice(slice(a, b), len_lookback_buffer=int(rng.integers(0, K + 2)))
                    for a, b in itertools.pairwise(bounds)
                ]
            )
        out = []
        while any(queues):
            queue = queues[int(rng.choice([i for i, q in enumerate(queues) if q]))]
            out.append(queue.pop(0))
        return out

    @pytest.mark.parametrize("seed", range(12))
    @pytest.mark.parametrize("n_step", [1, 3, (1, 3)], ids=["n1", "n3", "n1to3"])
    def test_stacks_equal_the_episodes_own_frames(self, seed: int, n_step: int | tuple[int, int]) -> None:
        rng = np.random.default_rng(seed)
        buffer = EpisodeReplayBuffer(capacity=int(rng.integers(10, 40)), seed=seed)
        for i, chunk in enumerate(self.chunks(rng, num_episodes=8)):
            buffer.add(chunk)
            if i % 7 == 6:
                buffer.storage.compact()
            for k in rng.permutation([1, 2, K, 7])[:2].tolist():  # stacks of several sizes from one state
                batch = buffer.sample(batch_size_B=24, n_step=n_step, frame_stack=k)
                assert batch["obs"].dtype == batch["next_obs"].dtype == np.uint8
                assert np.array_equal(batch["obs"], self.reference(buffer, batch["keys"], batch["t"], k))
                next_keys, next_t = batch["keys"] + batch["n_step"], batch["t"] + batch["n_step"]
                assert np.array_equal(batch["next_obs"], self.reference(buffer, next_keys, next_t, k))
        assert buffer.storage.num_evicted_episodes > 0


def test_obs_and_next_obs_are_separate_writable_arrays() -> None:
    buffer = EpisodeReplayBuffer(capacity=1000, seed=0)
    for c in chunks_of(episode(0, 25), [10], lookback=K - 1):
        buffer.add(c)
    for n_step in (1, 2):
        batch = buffer.sample(batch_size_B=64, n_step=n_step, frame_stack=K)
        assert batch["obs"].flags.writeable and batch["next_obs"].flags.writeable
        assert not np.shares_memory(batch["obs"], batch["next_obs"])
        batch["obs"][:] = 0
        batch["next_obs"][:] = 0
    check(buffer.sample(batch_size_B=64, frame_stack=K), first_t={0: 0})  # nothing stored was changed


def test_a_fill_outside_the_dtype_widens_the_stacks() -> None:
    from ray_sampler.data.columnar import episodes_to_columnar
    from replay.frame_stacks import stacked_observations
    from replay.storage import EpisodeStorage

    storage = EpisodeStorage(capacity_env_steps=100)
    storage.add(episodes_to_columnar([episode(0, 5).slice(slice(2, 5), len_lookback_buffer=1)]))
    out = stacked_observations(storage, np.array([0, 0]), np.array([0, 3]), 4, fill=-1)
    assert out.dtype == np.int64  # connectors.history.fill_dtype: uint8 and a fill of -1
    assert out[:, :, 0, 1].tolist() == [[-1, -1, 2, 3], [3, 4, 5, 6]]  # t + 1, the fill before t=1
