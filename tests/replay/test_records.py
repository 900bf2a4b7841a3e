"""The storage's records: a stored episode's done flag."""

from __future__ import annotations

from replay.records import StoredEpisode


def test_a_stored_episode_is_done_when_terminated_or_truncated() -> None:
    ep = StoredEpisode("a", 0, 0, 0, 3, 3, 0)
    assert [ep.is_done, ep._replace(terminated=True).is_done, ep._replace(truncated=True).is_done] == [
        False,
        True,
        True,
    ]
