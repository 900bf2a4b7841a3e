"""sample_sequences: replay sequences for a stateful module, each with the state its runner held before it.

CounterModule's state counts an episode's steps (state_out at step t is t + 1, initial 0) and
StampEnv's observation [worker, vector, episode, t] carries t, so a sequence whose first
observation is at episode step t must have ``state_in`` t.
"""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

from learner.replay_sequences import sample_sequences
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import ConfigError
from ray_sampler.sampling.env_runner import EnvRunner
from replay.buffer import EpisodeReplayBuffer
from tests.ray_sampler.sampling.checks import stamp_config, stamps
from tests.ray_sampler.sampling.counter_module import CounterModule


class Filled:
    """A buffer filled by a truncate-mode CounterModule runner, and what was added to it."""

    def __init__(self, runner: EnvRunner) -> None:
        self.module = runner.module
        self.buffer = EpisodeReplayBuffer(capacity_env_steps=10_000, seed=0)
        runner.sample()  # never stored: the first stored chunks of these episodes continue them
        self.added: list[SingleAgentEpisode] = []
        for _ in range(4):
            chunks = runner.sample()
            self.buffer.add(chunks)
            self.added += chunks

    def continuation_starts(self) -> set[tuple[int, ...]]:
        """Stamps of the first steps of stored episodes that began mid-episode (their state_in comes
        from the stored episode's own lookback)."""
        first: dict[str, SingleAgentEpisode] = {}
        for c in self.added:
            first.setdefault(c.id_, c)
        return {stamps(c)[0] for c in first.values() if c.t_started > 0}


@pytest.fixture(scope="module")
def filled() -> Iterator[Filled]:
    runner = EnvRunner(stamp_config("sync", module_class=CounterModule, batch_mode="truncate_episodes"))
    try:
        yield Filled(runner)
    finally:
        runner.stop()


def _assert_sequences(batch: dict, num_sequences: int, max_seq_len: int) -> None:
    """Each sequence: consecutive steps of one episode, state_in = its first step t, zero padding
    after its real steps, loss_mask and seq_lens agreeing."""
    obs_ST = batch[Columns.OBS]
    seq_lens_S, mask_ST = batch[Columns.SEQ_LENS], batch[Columns.LOSS_MASK]
    assert obs_ST.shape == (num_sequences, max_seq_len, 4)
    assert mask_ST.shape == (num_sequences, max_seq_len)
    assert ((seq_lens_S >= 1) & (seq_lens_S <= max_seq_len)).all()
    assert (mask_ST == (np.arange(max_seq_len)[None, :] < seq_lens_S[:, None])).all()
    assert batch[Columns.STATE_IN]["count"].shape == (num_sequences, 1)
    assert batch[Columns.STATE_IN]["count"][:, 0].tolist() == obs_ST[:, 0, 3].tolist()
    for obs_T, n in zip(obs_ST, seq_lens_S.tolist()):
        w, v, e, t0 = obs_T[0].tolist()
        assert obs_T[:n].tolist() == [[w, v, e, t0 + i] for i in range(n)]
        assert (obs_T[n:] == 0).all()
    assert (batch[Columns.ACTIONS][~mask_ST] == 0).all()


class TestSampleEpisodesKeepStates:
    def test_chunks_and_their_lookback_hold_state_out_of_every_step(self, filled: Filled) -> None:
        chunks = filled.buffer.sample_episodes(300, 4, lookback=1)
        starts_with_lookback = set()
        for c in chunks:
            n = c.len_lookback_buffer + len(c)
            t_obs = [s[3] for s in stamps(c, slice(-n - 1, None))]
            counts = np.asarray(c.get_extra_model_outputs(Columns.STATE_OUT, slice(-n, None))["count"])[:, 0]
            assert counts.tolist() == [t + 1 for t in t_obs[:-1]]  # state_out of the step from obs t is t + 1
            if c.len_lookback_buffer:
                starts_with_lookback.add(stamps(c)[0])
        # Stored continuations' first steps are drawn too: their lookback is the stored lookback.
        assert filled.continuation_starts() & starts_with_lookback

    def test_a_chunk_at_an_episode_start_has_no_lookback(self, filled: Filled) -> None:
        chunks = [c for c in filled.buffer.sample_episodes(100, 4, lookback=1) if c.t_started == 0]
        assert chunks
        assert all(c.len_lookback_buffer == 0 and stamps(c)[0][3] == 0 for c in chunks)


class TestSampleSequences:
    def test_every_sequence_starts_from_the_state_of_the_step_before_it(self, filled: Filled) -> None:
        batch = sample_sequences(filled.buffer, filled.module, 200, 3)
        _assert_sequences(batch, 200, 3)
        first = {tuple(o) for o in batch[Columns.OBS][:, 0].tolist()}
        assert any(s[3] == 0 for s in first)  # initial states (episode starts)
        assert first & filled.continuation_starts()  # states from the stored lookback
        assert any(s[3] > 0 for s in first - filled.continuation_starts())  # states from stored steps

    def test_burn_in_lengthens_every_sequence_by_burn_in_steps(self, filled: Filled) -> None:
        batch = sample_sequences(filled.buffer, filled.module, 200, 3, burn_in=2)
        _assert_sequences(batch, 200, 5)
        assert batch[Columns.SEQ_LENS].max() == 5

    def test_one_sequence_per_chunk_in_the_chunks_order(self, filled: Filled) -> None:
        seed_state = dict(filled.buffer.rng.bit_generator.state)
        chunks = filled.buffer.sample_episodes(50, 4, lookback=1)
        filled.buffer.rng.bit_generator.state = seed_state
        batch = sample_sequences(filled.buffer, filled.module, 50, 4)
        assert batch[Columns.SEQ_LENS].tolist() == [len(c) for c in chunks]
        assert [tuple(o) for o in batch[Columns.OBS][:, 0].tolist()] == [stamps(c)[0] for c in chunks]

    def test_extra_model_outputs_are_named(self, filled: Filled) -> None:
        plain = sample_sequences(filled.buffer, filled.module, 20, 3)
        steps = [Columns.OBS, Columns.ACTIONS, Columns.REWARDS, Columns.TERMINATEDS, Columns.TRUNCATEDS]
        assert sorted(plain) == sorted([*steps, Columns.STATE_IN, Columns.LOSS_MASK, Columns.SEQ_LENS])
        batch = sample_sequences(filled.buffer, filled.module, 20, 3, extra_model_outputs=(Columns.STATE_OUT,))
        mask = batch[Columns.LOSS_MASK]
        # The stored state_out of each step: its count is the step's t + 1.
        assert (batch[Columns.STATE_OUT]["count"][..., 0][mask] == batch[Columns.OBS][..., 3][mask] + 1).all()

    def test_a_module_that_is_not_stateful_is_refused(self, filled: Filled) -> None:
        class Stateless:
            observation_space, action_space = gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(2)

        with pytest.raises(ConfigError, match=r"sample_sequences needs a stateful module \(got Stateless\)"):
            sample_sequences(filled.buffer, Stateless(), 4, 3)

    def test_a_negative_burn_in_is_refused(self, filled: Filled) -> None:
        with pytest.raises(ConfigError, match=r"'burn_in' must be an int >= 0 \(got -1\)"):
            sample_sequences(filled.buffer, filled.module, 4, 3, burn_in=-1)
