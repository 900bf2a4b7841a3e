"""examples/atari_pong.py: what it printed shows uint8 84x84 frames, float64 rewards and exact step counts."""

from __future__ import annotations

import re

import pytest

from tests.examples.test_examples import run


@pytest.mark.parametrize("mode", ["sync", "vector_entry_point"])
def test_atari_pong_example(mode: str) -> None:
    args = ("--vectorization-mode", mode, "--num-envs", "2", "--rollout-fragment-length", "32", "--iterations", "2")
    lines = run("atari_pong.py", *args)
    assert lines[0] == f"ray_sampler/Pong-v5 ({mode}): 2 sub-envs, 6 actions, TorchCNNModule with 1681575 parameters"
    pattern = (
        r"iter (\d): (\d+) env steps, observations uint8 \(84, 84\) per step, rewards float64, "
        r"0 episodes finished, PPO batch (\d+), entropy [\d.]+"
    )
    parsed = [re.fullmatch(pattern, line).groups() for line in lines[1:3]]  # type: ignore[union-attr]
    assert parsed == [("1", "64", "64"), ("2", "64", "64")]
    assert lines[3] == "stored: one uint8 frame per step (7056 bytes); 128 env steps in 2 iterations"
    assert len(lines) == 4
