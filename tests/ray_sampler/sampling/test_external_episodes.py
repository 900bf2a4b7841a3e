"""ExternalEpisodes: the steps external clients add, taken by sample() calls with exact accounting."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import EpisodeError
from ray_sampler.sampling.external_episodes import ExternalEpisodes


def _episodes(*, truncate: bool = True, lookback: int = 1) -> ExternalEpisodes:
    return ExternalEpisodes(lookback=lookback, id_prefix="t", truncate=truncate)


def _play(eps: ExternalEpisodes, key: str, steps: int, *, start: int = 0, end: bool = False) -> None:
    """``steps`` steps of a counting episode under ``key``: observation t, action t, reward t."""
    if not eps.is_running(key):
        eps.begin(key, start)
    for t in range(start, start + steps):
        eps.act(key, t, {"action_logp": np.float32(-t)})
        eps.log_reward(key, float(t))
        eps.step(key, t + 1, terminated=end and t == start + steps - 1)


def _joined(chunks: list[SingleAgentEpisode]) -> dict[str, list[int]]:
    """Every episode's observations after its first, over its chunks in order (lookback left out)."""
    out: dict[str, list[int]] = {}
    for c in chunks:
        obs = [int(o) for o in c.get_observations(slice(1, len(c) + 1))]
        out.setdefault(c.id_, []).extend(obs)
    return out


class TestTruncate:
    def test_takes_exactly_the_steps_asked_finished_first_then_cut(self) -> None:
        eps = _episodes()
        _play(eps, "a/1", 3)
        _play(eps, "b/1", 4, end=True)
        chunks = eps.take(num_steps=5)
        assert [len(c) for c in chunks] == [4, 1]
        assert [c.is_done for c in chunks] == [True, False]
        assert eps.num_held_steps() == 2

    def test_chunks_of_one_episode_join_to_its_steps_in_order(self) -> None:
        eps = _episodes()
        _play(eps, "a/1", 7)
        first = eps.take(num_steps=3)
        _play(eps, "a/1", 5, start=7, end=True)
        rest = eps.take(num_steps=9)
        assert sum(len(c) for c in first) == 3 and sum(len(c) for c in rest) == 9
        assert _joined(first + rest) == {first[0].id_: list(range(1, 13))}
        assert rest[-1].is_terminated

    def test_a_continuation_chunk_carries_the_lookback(self) -> None:
        eps = _episodes(lookback=2)
        _play(eps, "a/1", 4)
        eps.take(num_steps=4)
        _play(eps, "a/1", 2, start=4)
        (chunk,) = eps.take(num_steps=2)
        assert chunk.t_started == 4
        assert [int(o) for o in chunk.get_observations(slice(-2, 3), neg_index_as_lookback=True)] == [2, 3, 4, 5, 6]

    def test_rewards_logged_between_observations_add_up(self) -> None:
        eps = _episodes()
        eps.begin("a/1", 0)
        eps.act("a/1", 1, None)
        eps.log_reward("a/1", 0.5)
        eps.log_reward("a/1", 0.25, {"x": 1})
        eps.step("a/1", 1, terminated=True)
        (chunk,) = eps.take(num_steps=1)
        assert list(chunk.get_rewards()) == [0.75]
        assert chunk.get_infos(-1) == {"x": 1}

    def test_take_waits_until_the_steps_came(self) -> None:
        eps = _episodes()
        got: list[int] = []
        taker = threading.Thread(target=lambda: got.append(sum(len(c) for c in eps.take(num_steps=6))))
        taker.start()
        _play(eps, "a/1", 4)
        assert got == []
        _play(eps, "b/1", 2)
        taker.join(timeout=10)
        assert got == [6]

    def test_a_wait_past_its_timeout_raises_and_keeps_the_steps(self) -> None:
        eps = _episodes()
        _play(eps, "a/1", 2)
        with pytest.raises(TimeoutError, match=r"the clients sent 2 steps \(0 episodes finished\) within 0.1 s"):
            eps.take(num_steps=3, timeout_s=0.1)
        assert eps.num_held_steps() == 2

    def test_a_stop_ends_the_wait_with_nothing(self) -> None:
        eps = _episodes()
        stop = threading.Event()
        stop.set()
        assert eps.take(num_steps=1, stop=stop) == []


class TestComplete:
    def test_takes_whole_finished_episodes_only(self) -> None:
        eps = _episodes(truncate=False)
        _play(eps, "a/1", 3, end=True)
        _play(eps, "b/1", 9)  # running: never cut in complete mode
        _play(eps, "c/1", 2, end=True)
        chunks = eps.take(num_steps=4)
        assert [len(c) for c in chunks] == [3, 2] and all(c.is_done for c in chunks)
        assert eps.num_held_steps() == 9

    def test_num_episodes_takes_exactly_that_many(self) -> None:
        eps = _episodes()
        for k in range(3):
            _play(eps, f"a/{k}", 2, end=True)
        assert len(eps.take(num_episodes=2)) == 2
        assert len(eps.take(num_episodes=1)) == 1


class TestDrops:
    def test_a_gone_client_drops_its_running_episodes_steps_since_their_last_cut(self) -> None:
        eps = _episodes()
        _play(eps, "a/1", 5)
        shipped = eps.take(num_steps=3)
        _play(eps, "a/1", 4, start=5)
        eps.drop(["a/1"])
        assert eps.take_drops() == (1, 6, [shipped[0].id_])
        assert eps.take_drops() == (0, 0, [])
        assert eps.num_held_steps() == 0

    def test_an_episode_without_steps_is_no_drop(self) -> None:
        eps = _episodes()
        eps.begin("a/1", 0)
        eps.drop(["a/1", "never/started"])
        assert eps.take_drops() == (0, 0, [])

    def test_an_observation_twice_without_an_action_is_refused(self) -> None:
        eps = _episodes()
        eps.begin("a/1", 0)
        with pytest.raises(EpisodeError, match="no action was taken"):
            eps.step("a/1", 1)
        with pytest.raises(EpisodeError, match="already has its first observation"):
            eps.begin("a/1", 0)

    def test_drain_ships_running_steps_in_truncate_mode_and_counts_them_in_complete_mode(self) -> None:
        for truncate, expected in ((True, ([3, 2], 0)), (False, ([3], 1))):
            eps = _episodes(truncate=truncate)
            _play(eps, "a/1", 3, end=True)
            _play(eps, "b/1", 2)
            out, dropped = eps.drain()
            assert ([len(c) for c in out], dropped) == expected
            assert eps.num_held_steps() == 0
