"""examples/soft_horizon.py: what it printed shows cuts at the horizon without a reset."""

from __future__ import annotations

import re

from tests.examples.test_examples import run


def test_soft_horizon_example() -> None:
    lines = run("soft_horizon.py", "--max-episode-steps", "6", "--num-episodes", "10")
    assert lines[0] == "soft_horizon at 6 steps on CartPole-v1: 10 episodes"
    pattern = r"episode (\d+): (\d+) steps from (a reset|the last observation of episode (\d+)), (.*)"
    parsed = [re.fullmatch(pattern, line).groups() for line in lines[1:11]]  # type: ignore[union-attr]
    assert [int(k) for k, *_ in parsed] == list(range(1, 11))
    ends = [end for *_, end in parsed]
    assert set(ends) <= {"cut at the horizon (truncated), the env goes on", "terminated by the env, which resets"}
    num_cut = 0
    for k, (_, length, start, previous, end) in enumerate(parsed, start=1):
        assert 1 <= int(length) <= 6
        if end.startswith("cut"):
            num_cut += 1
            assert int(length) == 6
        # After a cut the next episode starts where it ended; after the env's own end, from a reset.
        if k > 1 and ends[k - 2].startswith("cut"):
            assert start.startswith("the last") and int(previous) == k - 1
        else:
            assert start == "a reset"
    assert num_cut >= 2
    assert (
        lines[11]
        == f"{num_cut} cut at the horizon, {num_cut - ends[-1].startswith('cut')} began where the one before was cut"
    )
