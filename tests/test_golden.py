"""Golden tests: seeded sampling, replay and learner outputs equal, byte for byte, those of the
code before the layered restructuring (issue #6; the cases are in tests/golden/cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.golden.cases import GOLDEN_PATH, learner_cases, replay_cases, sampling_cases


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN_PATH, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _assert_same(computed: dict[str, np.ndarray], golden: dict[str, np.ndarray], prefix: str) -> None:
    expected = {k: v for k, v in golden.items() if k.startswith(prefix)}
    assert expected, f"no golden arrays under {prefix!r}"
    assert sorted(computed) == sorted(expected)
    for key, want in expected.items():
        got = computed[key]
        assert got.dtype == want.dtype, f"{key}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{key}: shape {got.shape} != {want.shape}"
        assert got.tobytes() == want.tobytes(), f"{key}: bytes differ"


def test_sampling_output_is_unchanged(golden: dict[str, np.ndarray]) -> None:
    _assert_same(sampling_cases(), golden, "sample/")


def test_replay_samples_are_unchanged(golden: dict[str, np.ndarray]) -> None:
    _assert_same(replay_cases(), golden, "replay/")


def test_learner_updates_are_unchanged(golden: dict[str, np.ndarray]) -> None:
    computed = learner_cases()
    _assert_same({k: v for k, v in computed.items() if k.startswith("ppo/")}, golden, "ppo/")
    _assert_same({k: v for k, v in computed.items() if k.startswith("dqn/")}, golden, "dqn/")
