"""What cut, slice and concat_episode do with custom_data and the recording clock."""

from __future__ import annotations

import time

import pytest

from ray_sampler.data.episode import SingleAgentEpisode


def recorded(num_steps: int, *, start: int = 0) -> SingleAgentEpisode:
    ep = SingleAgentEpisode("e")
    ep.add_env_reset(start)
    for t in range(num_steps):
        ep.add_env_step(start + t + 1, action=t, reward=1.0)
    return ep


class TestCustomData:
    def test_cut_deep_copies_it(self) -> None:
        ep = recorded(2)
        ep.custom_data["frames"] = [1, 2]
        cont = ep.cut()
        cont.custom_data["frames"].append(3)
        assert (ep.custom_data, cont.custom_data) == ({"frames": [1, 2]}, {"frames": [1, 2, 3]})

    def test_concat_merges_it_with_the_later_chunks_keys_winning(self) -> None:
        ep = recorded(2)
        ep.custom_data.update(a=1, b=1)
        cont = ep.cut()
        cont.custom_data.update(b=2, c=2)
        cont.add_env_step(3, action=0, reward=1.0)
        ep.concat_episode(cont)
        assert ep.custom_data == {"a": 1, "b": 2, "c": 2}

    def test_slice_deep_copies_it(self) -> None:
        ep = recorded(4)
        ep.custom_data["seen"] = {"n": 1}
        part = ep[1:3]
        part.custom_data["seen"]["n"] = 2
        assert (ep.custom_data, part.custom_data) == ({"seen": {"n": 1}}, {"seen": {"n": 2}})

    def test_a_new_episode_starts_without_it(self) -> None:
        assert SingleAgentEpisode().custom_data == {}
        assert recorded(3)[1:].custom_data == {}


class TestClock:
    def test_a_recorded_chunk_lasts_from_its_reset_to_its_last_step(self) -> None:
        ep = SingleAgentEpisode()
        assert ep.get_duration_s() == 0.0
        ep.add_env_reset(0)
        time.sleep(0.02)
        ep.add_env_step(1, action=0, reward=0.0, terminated=True)
        done_at = ep.get_duration_s()
        time.sleep(0.01)
        assert done_at >= 0.02 and ep.get_duration_s() == done_at  # frozen once done

    def test_cut_ends_this_chunks_clock_and_starts_the_continuations(self) -> None:
        ep = recorded(2)
        time.sleep(0.02)
        cont = ep.cut()
        first = ep.get_duration_s()
        time.sleep(0.02)
        assert first >= 0.02 and ep.get_duration_s() == first
        cont.add_env_step(3, action=0, reward=0.0, truncated=True)
        assert 0.02 <= cont.get_duration_s() < first + 0.02 + 1.0

    def test_concat_takes_the_later_chunks_end(self) -> None:
        ep = recorded(1)
        cont = ep.cut()
        time.sleep(0.02)
        cont.add_env_step(2, action=0, reward=0.0, terminated=True)
        ep.concat_episode(cont)
        assert ep.get_duration_s() >= 0.02

    @pytest.mark.parametrize(
        "make",
        [lambda: recorded(3)[0:2], lambda: SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0])],
        ids=["slice", "built_from_data"],
    )
    def test_chunks_not_recorded_step_by_step_report_zero(self, make: object) -> None:
        assert make().get_duration_s() == 0.0  # type: ignore[operator]
