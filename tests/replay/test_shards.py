"""Replay shards without Ray: each shard's config, the draw of a shard per batch in proportion to the
shards' masses, importance weights equal to one buffer's, and priorities back to the right shard."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.errors import ConfigError, ReplayError
from replay.actor import ReplayActor, ReplayConfig
from replay.shards import ShardDraw, check_num_replay_shards, draw_shards, plan_draws, shard_config, shard_path
from tests.replay.checks import episode


def test_each_shard_holds_its_share_and_its_own_file_and_seed() -> None:
    whole = ReplayConfig(
        capacity_env_steps=1001,
        min_size_to_sample=1000,
        checkpoint_path="/runs/a/replay.parquet",
        checkpoint_every_env_steps=300,
        seed=7,
    )
    assert shard_config(whole, 0, 1) is whole
    second = shard_config(whole, 1, 2)
    assert (second.capacity_env_steps, second.min_size_to_sample, second.checkpoint_every_env_steps) == (501, 500, 150)
    assert second.checkpoint_path == "/runs/a/replay.shard-1.parquet" and second.seed == 8
    assert shard_path("/runs/a/replay.parquet", 0, 3) == "/runs/a/replay.shard-0.parquet"
    assert shard_path("/runs/a/replay.parquet", 0, 1) == "/runs/a/replay.parquet"


def test_more_shards_than_runners_is_refused_in_one_line() -> None:
    check_num_replay_shards(2, 2)
    with pytest.raises(ConfigError, match=r"^'num_replay_shards' \(3\) must be <= 'num_env_runners' \(2\)"):
        check_num_replay_shards(3, 2)
    with pytest.raises(ConfigError, match="'num_replay_shards' must be an int >= 1"):
        check_num_replay_shards(0, 2)


def test_batches_come_from_the_shards_in_proportion_to_their_mass() -> None:
    rng = np.random.default_rng(0)
    assignment, scale = draw_shards([(0.0, 0.0), (300.0, 1.0), (100.0, 1.0)], 4000, rng)
    counts = np.bincount(assignment, minlength=3)
    assert counts[0] == 0 and scale == ()  # a shard still warming up is never drawn
    assert counts[1] / 4000 == pytest.approx(0.75, abs=0.03)  # binomial sd 0.007
    with pytest.raises(ReplayError, match="no replay shard can be sampled yet"):
        draw_shards([(0.0, 0.0), (0.0, 0.0)], 1, rng)


def prioritized_shards() -> list[ReplayActor]:
    """Two prioritized shards holding 40 and 20 steps, every step with its own priority."""
    shards = []
    for k, steps in enumerate((40, 20)):
        shard = ReplayActor(ReplayConfig(prioritized=True, alpha=0.6, beta=0.4, seed=k))
        shard.add(episode(f"e{k}", steps))
        keys = shard.sample(200)["keys"]
        unique = np.unique(keys)
        shard.update_priorities(unique, 0.1 + (k + 1) * np.arange(len(unique), dtype=np.float64))
        shards.append(shard)
    return shards


def test_importance_weights_equal_one_buffers_and_priorities_go_back_to_their_shard() -> None:
    shards = prioritized_shards()
    masses = [shard.sampling_mass() for shard in shards]
    assert all(beta == 0.4 for _, _, beta in masses)
    assignment, scale = draw_shards([(m, low) for m, low, _ in masses], 50, np.random.default_rng(1), beta=0.4)
    draw = ShardDraw(tuple(shards), assignment, scale)
    batches = draw.pull(8)
    floor = min(low for _, low, _ in masses)  # the smallest priority ** alpha over every shard
    for k, batch in zip(assignment, batches, strict=True):
        p = shards[k].buffer.get_priorities(batch["keys"])
        np.testing.assert_allclose(batch["weights"], (p / floor) ** -0.4, rtol=1e-5)  # float32 weights
    # Shard 1's priorities (k + 1 = 2 per step) are larger: its share of the draws is its mass's.
    share = masses[1][0] / (masses[0][0] + masses[1][0])
    assert 0 < share < 1 and set(assignment) == {0, 1}
    before = [shard.buffer.get_priorities(np.arange(64)) for shard in shards]
    keys = {j: batch["keys"] for j, batch in enumerate(batches)}
    td = {j: np.full(len(batch["keys"]), 9.0) for j, batch in enumerate(batches)}
    assert draw.push(keys, td) == 50 * 8
    for k, shard in enumerate(shards):
        mine = np.unique(np.concatenate([keys[j] for j in range(50) if assignment[j] == k]))
        np.testing.assert_allclose(shard.buffer.get_priorities(mine), (9.0 + 1e-6) ** 0.6, rtol=1e-9)
        untouched = np.setdiff1d(np.flatnonzero(before[k]), mine)
        assert np.array_equal(shard.buffer.get_priorities(untouched), before[k][untouched])


def test_a_uniform_shard_reports_its_size_and_none_before_its_warm_up() -> None:
    shard = ReplayActor(ReplayConfig(min_size_to_sample=10, seed=0))
    shard.add(episode("a", 6))
    assert shard.sampling_mass() == (0.0, 0.0, None)
    shard.add(episode("b", 6))
    assert shard.sampling_mass() == (12.0, 1.0, None)


def test_each_learners_pull_goes_whole_to_one_shard_drawn_by_size() -> None:
    """One call per pull (a Ray call's fixed cost is paid once), the shard drawn in proportion to
    its stored steps: 30 of 40 here."""
    shards = [ReplayActor(ReplayConfig(seed=k)) for k in range(2)]
    shards[0].add(episode("a", 30))
    shards[1].add(episode("b", 10, start=100))
    rng = np.random.default_rng(0)
    plans = [plan_draws(shards, 2, 5, rng) for _ in range(1000)]
    assert all(len(set(draw.assignment)) == 1 and len(draw.assignment) == 5 for p in plans for draw in p)
    first = np.array([draw.assignment[0] for p in plans for draw in p])
    assert np.mean(first == 0) == pytest.approx(0.75, abs=0.03)  # 2,000 draws: sd 0.01
    for draw in (plans[0][0], next(d for p in plans for d in p if d.assignment[0] == 1)):
        stored = range(0, 31) if draw.assignment[0] == 0 else range(100, 111)  # obs t of the shard's episode
        assert all(set(b["obs"][:, 0].astype(int)) <= set(stored) for b in draw.pull(4))
