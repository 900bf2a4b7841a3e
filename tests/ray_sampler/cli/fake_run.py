"""Helpers of the CLI's run-output tests (no Ray): iteration records of a fake CartPole-like run, a
PNG's size, a blocked import."""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from learner.metrics import IterationRecord

STEPS_PER_ITERATION = 2048
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def cartpole_like_records(num_iterations: int = 60, *, scale: float = 1.0) -> list[IterationRecord]:
    """A deterministic PPO-on-CartPole-like run: the mean return climbs from ~20 to ~480 in a
    logistic curve with a wobble, episodes get longer, the window fills up to 100."""
    records = []
    episodes = 0
    best = math.nan
    for i in range(1, num_iterations + 1):
        mean = scale * (20 + 460 / (1 + math.exp(-(i - 30) / 5)) + 8 * math.sin(i))
        mean = min(mean, 500.0)
        episodes += max(1, round(STEPS_PER_ITERATION / mean))
        window = min(episodes, 100)
        if window == 100:
            best = mean if math.isnan(best) else max(best, mean)
        records.append(
            IterationRecord(
                iteration=i,
                env_steps=i * STEPS_PER_ITERATION,
                episodes=episodes,
                return_mean=mean,
                return_min=max(8.0, mean * 0.35),
                return_max=min(500.0, mean * 1.6 + 10),
                window=window,
                best_return_mean=best,
                env_steps_per_s=40_000.0 + 100 * i,
                elapsed_s=0.05 * i,
                losses={"policy_loss": -0.01 / i, "vf_loss": 100.0 / i, "entropy": 0.69 - 0.005 * i},
            )
        )
    return records


def make_record(**overrides: Any) -> IterationRecord:
    """One record with round figures (the example line of the progress display)."""
    fields: dict[str, Any] = {
        "iteration": 3,
        "env_steps": 6144,
        "episodes": 57,
        "return_mean": 31.5,
        "return_min": 9.0,
        "return_max": 88.0,
        "window": 57,
        "best_return_mean": math.nan,
        "env_steps_per_s": 41_234.0,
        "elapsed_s": 1.2,
        "losses": {"policy_loss": -0.02, "vf_loss": 12.5},
    }
    fields.update(overrides)
    return IterationRecord(**fields)


def block_import(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Makes ``import package`` (and its submodules) fail as if it were not installed."""
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header, after checking its signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height
