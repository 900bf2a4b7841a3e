"""examples/frame_stacking.py: the stacks after a cut hold the frames from before it, in uint8."""

from __future__ import annotations

from tests.examples.test_examples import run


def test_frame_stacking_example() -> None:
    lines = run("frame_stacking.py", "--num-frames", "3", "--num-calls", "3")
    assert lines == [
        "num_frames 3: lookback horizon 2, vectorized engine True, module input (3, 4, 4)",
        "call 2: chunk from t=5 stacks frames [3, 4, 5] (uint8); episode stores (4, 4) per step",
        "call 3: chunk from t=10 stacks frames [8, 9, 10] (uint8); episode stores (4, 4) per step",
        "learner stacks: (3, 4, 4) per step, uint8",
    ]
