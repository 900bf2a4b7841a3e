"""PrioritizedEpisodeReplayBuffer: proportional draws, importance weights, priorities that
follow steps through eviction and compaction."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.errors import ReplayError
from replay.prioritized import PrioritizedEpisodeReplayBuffer
from tests.replay.test_buffer import fill_from_runner
from tests.replay.test_storage import episode


def all_keys(buffer: PrioritizedEpisodeReplayBuffer) -> dict[float, int]:
    """obs value -> key, from enough samples to see every stored step."""
    batch = buffer.sample(2000)
    return dict(zip(batch["obs"][:, 0].tolist(), batch["keys"].tolist(), strict=True))


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_draws_are_proportional_to_priority_to_the_alpha(alpha: float) -> None:
    buffer = PrioritizedEpisodeReplayBuffer(capacity_env_steps=100, alpha=alpha, seed=1)
    buffer.add([episode("a", 4)])
    keys = all_keys(buffer)
    priorities = {0.0: 1.0, 1.0: 2.0, 2.0: 3.0, 3.0: 4.0}
    buffer.update_priorities([keys[o] for o in priorities], list(priorities.values()))
    counts = np.bincount(buffer.sample(40000)["obs"][:, 0].astype(int), minlength=4) / 40000
    expected = np.array([p**alpha for p in priorities.values()])
    np.testing.assert_allclose(counts, expected / expected.sum(), atol=0.01)


def test_importance_weights() -> None:
    buffer = PrioritizedEpisodeReplayBuffer(capacity_env_steps=100, alpha=1.0, beta=0.5, epsilon=1e-9, seed=2)
    buffer.add([episode("a", 2)])
    keys = all_keys(buffer)
    buffer.update_priorities([keys[0.0], keys[1.0]], [1.0, 3.0])
    batch = buffer.sample(200, beta=0.5)
    expected = {0.0: 1.0, 1.0: np.sqrt(0.5 / 1.5)}  # (N P)^-beta over its largest value
    for o, w in zip(batch["obs"][:, 0].tolist(), batch["weights"].tolist(), strict=True):
        assert w == pytest.approx(expected[o])


def test_new_steps_get_the_largest_priority_seen() -> None:
    buffer = PrioritizedEpisodeReplayBuffer(capacity_env_steps=100, alpha=1.0, seed=3)
    buffer.add([episode("a", 2)])
    keys = all_keys(buffer)
    buffer.update_priorities([keys[0.0], keys[1.0]], [10.0, 0.0])
    buffer.add([episode("b", 1, start=0)])
    key = buffer.storage.episodes["b"].order << 32
    assert buffer.get_priorities([key])[0] == pytest.approx(10.0, rel=1e-6)


def test_evicted_steps_are_never_drawn_and_their_keys_are_skipped() -> None:
    buffer = PrioritizedEpisodeReplayBuffer(capacity_env_steps=4, seed=4)
    buffer.add([episode("a", 3, terminated=True)])
    old_keys = buffer.sample(50)["keys"]
    buffer.add([episode("b", 4, terminated=True)])  # evicts "a"
    assert list(buffer.storage.episodes) == ["b"]
    batch = buffer.sample(500)
    assert set(batch["keys"].tolist()).isdisjoint(old_keys.tolist())
    before = buffer.get_priorities(buffer.storage.keys())
    buffer.update_priorities(old_keys, np.ones(len(old_keys)))  # no error, nothing changes
    assert (buffer.get_priorities(old_keys) == 0).all()
    np.testing.assert_array_equal(buffer.get_priorities(buffer.storage.keys()), before)
    assert (before > 0).all()


def test_priorities_follow_steps_through_compaction() -> None:
    buffer = PrioritizedEpisodeReplayBuffer(capacity_env_steps=40, alpha=1.0, seed=5)
    fill_from_runner(buffer, 10)
    batch = buffer.sample(500)
    target = int(batch["keys"][0])
    target_obs = batch["obs"][0].tolist()
    buffer.update_priorities([target], [1e6])
    buffer.storage.compact()  # rows move: the sampler follows them and rebuilds its tree
    again = buffer.sample(1000)
    share = float(np.mean([o == target_obs for o in again["obs"].tolist()]))
    assert share > 0.95 and int(again["keys"][0]) == target


def test_prioritized_transitions_keep_the_n_step_contract() -> None:
    buffer = PrioritizedEpisodeReplayBuffer(capacity_env_steps=10**6, seed=6)
    last = fill_from_runner(buffer, 5)
    batch = buffer.sample(1000, n_step=3, gamma=1.0)
    for obs, nxt, n, reward in zip(
        batch["obs"].tolist(),
        batch["next_obs"].tolist(),
        batch["n_step"].tolist(),
        batch["rewards"].tolist(),
        strict=True,
    ):
        _, v, e, t = obs
        assert n == min(3, last[(v, e)] - t) and nxt[3] == t + n and nxt[:3] == obs[:3]
        assert reward == sum(range(t + 1, t + n + 1))


def test_bad_arguments_raise() -> None:
    with pytest.raises(ReplayError, match="'alpha' must be in"):
        PrioritizedEpisodeReplayBuffer(alpha=2.0)
    buffer = PrioritizedEpisodeReplayBuffer(capacity_env_steps=10)
    buffer.add([episode("a", 2)])
    with pytest.raises(ReplayError, match="'keys' and 'priorities' must have the same shape"):
        buffer.update_priorities([1, 2], [1.0])


def test_set_state_gives_every_stored_step_one_equal_priority() -> None:
    source = PrioritizedEpisodeReplayBuffer(capacity_env_steps=12, alpha=1.0, seed=0)
    for k in range(4):  # 4 x 5 steps into 12: the oldest episodes were evicted (dead rows in the source)
        source.add([episode(f"e{k}", 5, terminated=True)])
    source.update_priorities(source.sample(4)["keys"], [7.0] * 4)
    target = PrioritizedEpisodeReplayBuffer(capacity_env_steps=12, alpha=1.0, seed=1)
    target.add([episode("old", 3)])
    target.sample(2)  # builds the sum tree that set_state must drop
    target.set_state(source.get_state())
    s = target.storage
    assert len(target) == 10 and s.num_step_rows == 10  # no dead rows left
    assert target.get_priorities(s.keys()).tolist() == [1.0] * 10
    batch = target.sample(200)
    assert set(batch["obs"][:, 0].tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0} and np.allclose(batch["weights"], 1.0)
    target.update_priorities(batch["keys"][:1], [3.0])
    assert target.max_priority == pytest.approx(3.0 + target.epsilon)


def test_non_finite_priorities_raise_and_change_nothing() -> None:
    buf = PrioritizedEpisodeReplayBuffer(capacity_env_steps=10, seed=0)
    buf.add([episode("a", 3)])
    keys = buf.sample(2)["keys"]
    before = buf.get_priorities(buf.storage.keys())
    for bad in (np.nan, np.inf, 1e308):  # 1e308 is finite, but sums of it are not
        with pytest.raises(ReplayError, match="'priorities' must be finite and at most 1e\\+30"):
            buf.update_priorities(keys, [1.0, bad])
    np.testing.assert_array_equal(buf.get_priorities(buf.storage.keys()), before)
    assert np.isfinite(buf.sample(5)["weights"]).all()


class TestRLlibNames:
    def test_capacity_and_batch_defaults(self) -> None:
        buffer = PrioritizedEpisodeReplayBuffer(capacity=50)
        assert (buffer.storage.capacity_env_steps, buffer.batch_size_B, buffer.batch_length_T) == (50, 16, 1)

    def test_alpha_and_beta_defaults_are_rllib_dqns(self) -> None:
        buffer = PrioritizedEpisodeReplayBuffer()
        assert (buffer.alpha, buffer.beta) == (0.6, 0.4)


class TestUpdatePrioritiesOfTheLastBatch:
    """``update_priorities(priorities)``: the last sampled batch, in its order, once (as RLlib)."""

    @pytest.fixture
    def buffer(self) -> PrioritizedEpisodeReplayBuffer:
        buffer = PrioritizedEpisodeReplayBuffer(capacity=100, alpha=1.0, epsilon=1e-9, seed=0)
        buffer.add(episode("a", 4))
        return buffer

    def test_priorities_go_to_the_last_batch_in_order(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        batch = buffer.sample(3)
        buffer.update_priorities([2.0, 3.0, 5.0])
        expected = {
            k: p for k, p in zip(batch["keys"].tolist(), [2.0, 3.0, 5.0], strict=True)
        }  # a repeat: the last wins
        np.testing.assert_allclose(buffer.get_priorities(list(expected)), list(expected.values()))

    def test_keys_and_priorities_still_work_by_position_and_keyword(
        self, buffer: PrioritizedEpisodeReplayBuffer
    ) -> None:
        keys = buffer.sample(4)["keys"]
        buffer.update_priorities(keys[:1], [7.0])
        buffer.update_priorities(keys=keys[1:2], priorities=[8.0])
        buffer.update_priorities(keys[2:3], priorities=[9.0])
        np.testing.assert_allclose(buffer.get_priorities(keys[:3]), [7.0, 8.0, 9.0])

    def test_priorities_by_keyword_alone_go_to_the_last_batch(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        keys = buffer.sample(1)["keys"]
        buffer.update_priorities(priorities=[6.0])
        np.testing.assert_allclose(buffer.get_priorities(keys), [6.0])

    def test_batch_lists_are_the_last_batch_too(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        batches = buffer.sample_batches(2, 2)
        buffer.update_priorities([1.0, 2.0, 3.0, 4.0])
        keys = np.concatenate([b["keys"] for b in batches])
        np.testing.assert_allclose(buffer.get_priorities(keys[-1:]), [4.0])

    def test_without_a_sample_it_raises(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        with pytest.raises(ReplayError, match=r"^update_priorities\(priorities\) needs a sampled batch of transitions"):
            buffer.update_priorities([1.0])

    def test_the_last_batch_takes_priorities_once(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        buffer.sample(1)
        buffer.update_priorities([1.0])
        with pytest.raises(ReplayError, match=r"needs a sampled batch of transitions since the last such update"):
            buffer.update_priorities([1.0])

    def test_episode_chunks_leave_no_last_batch(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        buffer.sample(1)
        buffer.sample_episodes(1, 2)
        with pytest.raises(ReplayError, match=r"needs a sampled batch of transitions"):
            buffer.update_priorities([1.0])

    def test_a_length_other_than_the_batch_s_raises(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        buffer.sample(3)
        with pytest.raises(
            ReplayError,
            match=r"^'priorities' must have one value per transition of the last sampled batch \(3\) \(got 2\)$",
        ):
            buffer.update_priorities([1.0, 2.0])

    def test_rllibs_module_id_argument_raises_clearly(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        buffer.sample(1)
        with pytest.raises(
            ReplayError, match=r"this single-agent buffer has no module_id \(got 'default_policy' second\)$"
        ):
            buffer.update_priorities([1.0], "default_policy")

    def test_three_arguments_raise(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        with pytest.raises(ReplayError, match=r"\(keys, priorities\) \(got 3 positional arguments\)$"):
            buffer.update_priorities([0], [1.0], [2.0])  # type: ignore[call-overload]


class TestBetaPerSample:
    @pytest.fixture
    def buffer(self) -> PrioritizedEpisodeReplayBuffer:
        buffer = PrioritizedEpisodeReplayBuffer(capacity=100, alpha=1.0, beta=0.5, epsilon=1e-9, seed=2)
        buffer.add(episode("a", 2))
        keys = all_keys(buffer)
        buffer.update_priorities([keys[0.0], keys[1.0]], [1.0, 3.0])
        return buffer

    @pytest.mark.parametrize(("beta", "weight_of_1"), [(0.0, 1.0), (1.0, 0.5 / 1.5), (None, np.sqrt(0.5 / 1.5))])
    def test_weights_follow_the_calls_beta_else_the_buffers(
        self, buffer: PrioritizedEpisodeReplayBuffer, beta: float | None, weight_of_1: float
    ) -> None:
        batch = buffer.sample(200, beta=beta)
        weights = dict(zip(batch["obs"][:, 0].tolist(), batch["weights"].tolist()))
        assert weights == {0.0: pytest.approx(1.0), 1.0: pytest.approx(weight_of_1)}

    def test_weights_ride_in_transition_episodes(self, buffer: PrioritizedEpisodeReplayBuffer) -> None:
        eps = buffer.sample(100, beta=1.0, sample_episodes=True)
        weights = {float(e.get_observations()[0, 0]): float(e.get_extra_model_outputs("weights")[0]) for e in eps}
        assert weights == {0.0: 1.0, 1.0: pytest.approx(0.5 / 1.5)}
