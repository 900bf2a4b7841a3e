"""EpisodeStorage's capacity: eviction order, capacity in bytes, compaction and the rows reserved."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.data.columnar import episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ReplayError
from replay.storage import EpisodeStorage
from tests.replay.checks import episode, stored_obs


def test_capacity_counts_steps_and_evicts_oldest_whole_episodes() -> None:
    storage = EpisodeStorage(capacity_env_steps=10)
    for name in "abc":
        storage.add(episodes_to_columnar([episode(name, 4, terminated=True)]))
    assert list(storage.episodes) == ["b", "c"] and storage.num_steps == 8
    assert storage.num_evicted_episodes == 1 and storage.num_evicted_steps == 4


def test_capacity_in_bytes() -> None:
    storage = EpisodeStorage(capacity_env_steps=10**6, capacity_bytes=10 * (4 + 8 + 8 + 4))
    for name in "abcd":
        storage.add(episodes_to_columnar([episode(name, 4, terminated=True)]))
    assert storage.step_nbytes() == 24 and storage.num_steps == 8 and list(storage.episodes) == ["c", "d"]


def test_compaction_keeps_every_live_episode_intact() -> None:
    storage = EpisodeStorage(capacity_env_steps=30)
    for k in range(400):
        storage.add(episodes_to_columnar([episode(f"e{k}", 10 + k % 5, terminated=True)]))
    assert storage.num_obs_rows < 4 * 30 + 4096 and storage.num_compactions > 0  # dead rows were reclaimed
    for id_, ep in storage.episodes.items():
        assert stored_obs(storage, id_) == [float(t) for t in range(ep.num_steps + 1)]
    assert storage.num_steps <= 30


# ------------------------------------------------------------------ regressions from the review of issue #4
def test_an_episode_larger_than_capacity_stays_until_the_next_one_then_normal_adds() -> None:
    storage = EpisodeStorage(capacity_env_steps=1000)
    assert storage.add(episodes_to_columnar([episode("huge", 5000)])) == 5000  # the newest episode stays, whole
    assert storage.num_steps == 5000 and stored_obs(storage, "huge") == [float(t) for t in range(5001)]
    storage.add(episodes_to_columnar([episode("b", 3), episode("c", 2)]))
    assert list(storage.episodes) == ["b", "c"] and storage.num_evicted_steps == 5000
    assert stored_obs(storage, "b") == [0.0, 1.0, 2.0, 3.0] and stored_obs(storage, "c") == [0.0, 1.0, 2.0]
    storage.compact()  # compacting again is harmless
    assert stored_obs(storage, "c") == [0.0, 1.0, 2.0]
    empty = EpisodeStorage(capacity_env_steps=10)
    empty.compact()
    empty.add(episodes_to_columnar([episode("d", 2)]))
    assert stored_obs(empty, "d") == [0.0, 1.0, 2.0]


def test_capacity_bytes_also_triggers_compaction() -> None:
    storage = EpisodeStorage(capacity_env_steps=10**6, capacity_bytes=20 * 24)
    for k in range(200):
        storage.add(episodes_to_columnar([episode(f"e{k}", 10, terminated=True)]))
    assert storage.num_steps * storage.step_nbytes() <= 20 * 24
    assert storage.num_obs_rows <= 4 * 11  # dead rows do not pile up past a quarter of the byte capacity


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"capacity_env_steps": 0}, "'capacity_env_steps' must be an int >= 1"),
        ({"capacity_env_steps": 1.5}, "'capacity_env_steps' must be an int >= 1"),
        ({"capacity_env_steps": 10, "capacity_bytes": False}, "'capacity_bytes' must be an int >= 1 or None"),
    ],
    ids=["zero", "float", "bool_bytes"],
)
def test_bad_capacities_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ReplayError, match=match):
        EpisodeStorage(**kwargs)


def test_row_and_segment_counts_stay_bounded_over_many_adds_with_eviction() -> None:
    storage = EpisodeStorage(capacity_env_steps=200)

    def sizes() -> tuple[int, int, int, int]:
        return storage.num_obs_rows, storage.num_step_rows, len(storage.segment_view().num_steps), storage.nbytes()

    peaks: list[tuple[int, ...]] = []
    for half in range(2):
        peak = (0, 0, 0, 0)
        for k in range(800 * half, 800 * (half + 1)):  # 10-step episodes sent as two 5-step chunks
            storage.add(episodes_to_columnar([episode(f"e{k}", 5)]))
            storage.add(episodes_to_columnar([episode(f"e{k}", 5, start=5, terminated=True)]))
            peak = tuple(max(p, s) for p, s in zip(peak, sizes()))
        peaks.append(peak)
    assert storage.num_evicted_episodes == 1600 - storage.num_episodes and storage.num_episodes == 20
    assert all(late <= early for late, early in zip(peaks[1], peaks[0]))  # no growth once the capacity is reached


# ------------------------------------------------------------------ large observations: reserve, in-place compaction
FRAME_BYTES = 84 * 84


def frames(id_: str, steps: int, first: int) -> SingleAgentEpisode:
    """84x84 uint8 frames filled with ``first + t`` (mod 256), ended."""
    return SingleAgentEpisode(
        id_,
        observations=[np.full((84, 84), (first + t) % 256, np.uint8) for t in range(steps + 1)],
        actions=[0] * steps,
        rewards=[1.0] * steps,
        terminated=True,
    )


@pytest.mark.parametrize("num_episodes", [20, 60], ids=["full", "evicting"])
def test_frames_take_about_one_frame_per_stored_step(num_episodes: int) -> None:
    from replay.buffer import EpisodeReplayBuffer

    buf = EpisodeReplayBuffer(capacity_env_steps=2000, seed=0)
    for k in range(num_episodes):
        buf.add([frames(f"e{k}", 100, first=k)])
    metrics = buf.get_metrics()
    assert metrics.num_env_steps == 2000
    # next_obs is the next observation row (never a second copy); room: capacity / 16 + 1 rows.
    assert metrics.nbytes / metrics.num_env_steps / FRAME_BYTES <= 1.1
    batch = buf.sample(64)
    assert (batch["next_obs"][:, 0, 0].astype(int) == (batch["obs"][:, 0, 0].astype(int) + 1) % 256).all()


def test_columns_are_allocated_once_for_the_capacity_and_compacted_in_place() -> None:
    storage = EpisodeStorage(capacity_env_steps=2000)  # reserve: 2000 + 2000 // 16 + 1 = 2126 rows
    nbytes = []
    for k in range(60):
        storage.add(episodes_to_columnar([episode(f"e{k}", 100, terminated=True, logp=False)]))
        nbytes.append(storage.nbytes())
    # From e21 on, 101 more rows do not fit beside the dead ones: one in-place compaction per add.
    assert storage.num_compactions == 39 and storage.num_steps == 2000
    assert (storage.num_obs_rows, storage.num_step_rows) == (2121, 2100)
    assert list(storage.episodes) == [f"e{k}" for k in range(40, 60)]
    assert all(stored_obs(storage, id_) == [float(t) for t in range(101)] for id_ in storage.episodes)
    assert len(set(nbytes[25:])) == 1 and nbytes[0] >= 2126 * (4 + 8 + 8)  # never reallocated


def test_capacity_bytes_sizes_the_reserve() -> None:
    storage = EpisodeStorage(capacity_env_steps=10**6, capacity_bytes=3000 * 20)  # 20 B a step: 3001 steps
    storage.add(episodes_to_columnar([episode("a", 10, logp=False)]))
    assert 3189 * 20 <= storage.nbytes() < 3189 * 20 + 4096  # 3001 + 3001 // 16 + 1 rows, then the segments


def test_a_smaller_capacity_gives_the_room_back() -> None:
    storage = EpisodeStorage(capacity_env_steps=20000)
    for k in range(4):
        storage.add(episodes_to_columnar([episode(f"e{k}", 100, terminated=True, logp=False)]))
    storage.set_capacity(200)
    assert list(storage.episodes) == ["e2", "e3"]
    assert all(stored_obs(storage, id_) == [float(t) for t in range(101)] for id_ in storage.episodes)
    assert (storage.num_obs_rows, storage.num_step_rows) == (202, 200)
    storage.add(episodes_to_columnar([episode("e4", 100, terminated=True, logp=False)]))
    assert list(storage.episodes) == ["e3", "e4"]


def test_an_add_larger_than_the_room_evicts_first_instead_of_growing_the_columns() -> None:
    storage = EpisodeStorage(capacity_env_steps=2000)  # reserve 2126 rows: room for 126 past capacity
    nbytes = []
    for k in range(30):  # 201 observation rows per add: more than the room once full
        storage.add(episodes_to_columnar([episode(f"e{k}", 200, terminated=True, logp=False)]))
        nbytes.append(storage.nbytes())
    # Growing would copy every column (a peak of twice the stored bytes) and keep 1.25x the rows.
    assert max(nbytes) - nbytes[0] < 1024 and nbytes[0] < 2126 * (4 + 8 + 8) + 1024  # the segment table aside
    assert (storage.num_steps, storage.num_evicted_episodes, storage.num_evicted_steps) == (2000, 20, 4000)
    assert list(storage.episodes) == [f"e{k}" for k in range(20, 30)]
    assert all(stored_obs(storage, id_) == [float(t) for t in range(201)] for id_ in storage.episodes)
