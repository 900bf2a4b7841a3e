"""Training checkpoints: the round trip, atomic saves, the newest kept, and every refusal."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from learner.checkpoint import Checkpointer, CheckpointError, TrainingState, latest_checkpoint, load_checkpoint

SPACE = "Box(-inf, inf, (4,), float32)"


def state(iteration: int = 3, **overrides: object) -> TrainingState:
    fields: dict = {
        "algo": "ppo",
        "env": "CartPole-v1",
        "observation_space": SPACE,
        "iteration": iteration,
        "env_steps": 96 * iteration,
        "episodes": 7,
        "elapsed_s": 1.5,
        "best_return_mean": math.nan,
        "returns": [10.0, 22.5],
        "learner": {
            "module": {"pi.0.w": np.arange(6, dtype=np.float32).reshape(2, 3), "log_std": np.array([-0.5])},
            "optimizer": {"t": 12, "m": {"pi.0.w": np.full((2, 3), 0.25)}, "v": {}},
            "rng": {"bit_generator": "PCG64", "state": {"state": 2**127 + 5, "inc": 3}, "has_uint32": 0},
            "weights_version": 4,
        },
        "connector_states": {"MeanStdFilter": {"global": {"count": 8, "mean": np.ones(4)}}},
        "counters": {"num_env_runner_restarts": 1, "num_env_steps_lost": 32},
    }
    return TrainingState(**{**fields, **overrides})  # type: ignore[arg-type]


def load(path: Path, **kind: str) -> TrainingState:
    return load_checkpoint(path, **{"algo": "ppo", "env": "CartPole-v1", "observation_space": SPACE, **kind})


def assert_same(a: object, b: object, where: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b and type(a) is type(b), (where, a, b)


def test_a_saved_state_loads_back_equal(tmp_path: Path) -> None:
    saved = state()
    back = load(Checkpointer(tmp_path, every=1).save(saved))
    for name in ("iteration", "env_steps", "episodes", "elapsed_s", "returns", "learner", "connector_states"):
        assert_same(getattr(saved, name), getattr(back, name), name)
    assert math.isnan(back.best_return_mean) and back.counters == saved.counters and back.replay_path is None


def test_every_keeps_the_newest_and_due_follows_every(tmp_path: Path) -> None:
    saver = Checkpointer(tmp_path, every=2, keep=2)
    assert [i for i in range(1, 7) if saver.due(i)] == [2, 4, 6]
    assert not Checkpointer(tmp_path, every=0).due(4)
    for i in (2, 4, 6):
        saver.save(state(i))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-0000004", "ckpt-0000006"]
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-0000006"
    assert latest_checkpoint(tmp_path / "none") is None


def test_a_save_that_fails_leaves_no_partial_checkpoint_and_keeps_the_last(tmp_path: Path) -> None:
    saver = Checkpointer(tmp_path, every=1)
    first = saver.save(state(1))

    def broken_replay(path: str) -> None:
        Path(path).write_bytes(b"half a file")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        saver.save(state(2), save_replay=broken_replay)
    assert list(tmp_path.iterdir()) == [first]  # no temporary directory, no ckpt-0000002
    assert load(first).iteration == 1


def test_a_replay_file_is_hashed_and_handed_back(tmp_path: Path) -> None:
    saved = Checkpointer(tmp_path, every=1).save(state(), save_replay=lambda p: Path(p).write_bytes(b"PAR1..PAR1"))
    back = load(saved)
    assert back.replay_path == saved / "replay.parquet" and back.replay_path.read_bytes() == b"PAR1..PAR1"
    (saved / "replay.parquet").write_bytes(b"PAR1..PAR2")
    with pytest.raises(CheckpointError, match=r"is corrupt: replay.parquet is missing or does not match its hash"):
        load(saved)


def test_the_replay_is_handed_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The replay actor writes the file, and an actor (on an attached cluster) has its own working directory.
    monkeypatch.chdir(tmp_path)
    paths: list[str] = []
    saved = Checkpointer(Path("run/checkpoints"), every=1).save(
        state(), save_replay=lambda p: paths.append(p) or Path(p).write_bytes(b"PAR1")
    )
    assert Path(paths[0]).is_absolute() and Path(paths[0]).parent.parent == (tmp_path / "run/checkpoints")
    assert load(tmp_path / saved).replay_path is not None


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ({"algo": "dqn"}, r"is of ppo on CartPole-v1 .*; this run is dqn on CartPole-v1"),
        ({"env": "Acrobot-v1"}, r"this run is ppo on Acrobot-v1"),
        (
            {"observation_space": "Box(-inf, inf, (6,), float32)"},
            r"with observations Box\(-inf, inf, \(6,\), float32\)",
        ),
    ],
    ids=["algo", "env", "observation_shape"],
)
def test_a_checkpoint_of_another_kind_of_run_is_refused(tmp_path: Path, kind: dict, match: str) -> None:
    saved = Checkpointer(tmp_path, every=1).save(state())
    with pytest.raises(CheckpointError, match=match):
        load(saved, **kind)


def test_a_corrupt_array_file_is_refused(tmp_path: Path) -> None:
    saved = Checkpointer(tmp_path, every=1).save(state())
    data = bytearray((saved / "state.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (saved / "state.npz").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"is corrupt: state.npz is missing or does not match its hash"):
        load(saved)


def resealed(meta: dict) -> dict:
    """``meta`` with its own digest made anew (the SHA-256 of its canonical JSON, the file's format):
    a file that is well formed, but wrong."""
    body = {k: v for k, v in meta.items() if k != "sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return {**body, "sha256": hashlib.sha256(canonical).hexdigest()}


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda meta: {**meta, "format": "other/9"},
            r"is not a ray-sampler-checkpoint/2 checkpoint \(state.json's format: 'other/9'\)",
        ),
        (lambda meta: {k: v for k, v in meta.items() if k != "files"}, r": state.json lists no files"),
        (
            lambda meta: {**meta, "iteration": None, "surprise": 1},
            r"is corrupt: state.json has fields missing \[\] and unknown \['surprise'\]",
        ),
        (lambda meta: {**meta, "iteration": None}, r"state.json: 'iteration' is a NoneType \(a int is saved\)"),
        (lambda meta: {**meta, "env_steps": -96}, r"state.json: 'env_steps' is -96 \(an int >= 0 is saved\)"),
        (lambda meta: {**meta, "returns": [1.0, "x"]}, r"state.json: returns is a str \(a number is saved\)"),
        (
            lambda meta: {**meta, "counters": {"num_env_steps_lost": True}},
            r"state.json: counters\['num_env_steps_lost'\] is a bool \(a number is saved\)",
        ),
        (lambda meta: {k: v for k, v in meta.items() if k != "learner"}, r"fields missing \['learner'\] and unknown"),
    ],
    ids=["format", "files", "unknown_field", "field_type", "negative_count", "return_type", "counter_type", "missing"],
)
def test_well_formed_but_wrong_metadata_is_refused(tmp_path: Path, edit: object, match: str) -> None:
    saved = Checkpointer(tmp_path, every=1).save(state())
    meta = json.loads((saved / "state.json").read_text())
    (saved / "state.json").write_text(json.dumps(resealed(edit(meta))))  # type: ignore[operator]
    with pytest.raises(CheckpointError, match=match):
        load(saved)


def test_an_edit_without_a_new_digest_is_refused(tmp_path: Path) -> None:
    saved = Checkpointer(tmp_path, every=1).save(state())
    meta = json.loads((saved / "state.json").read_text())
    (saved / "state.json").write_text(json.dumps({**meta, "env_steps": 97}))
    with pytest.raises(CheckpointError) as raised:
        load(saved)
    assert str(raised.value) == f"checkpoint {saved} is corrupt: state.json does not match its own digest"


class TestDamagedStateJson:
    """Damage to state.json is refused with CheckpointError naming the checkpoint and the file, or
    changes nothing that loads: never a silently changed state, never a raw error."""

    @staticmethod
    def _outcome(saved: Path, original: TrainingState, damaged: bytes) -> str:
        (saved / "state.json").write_bytes(damaged)
        try:
            back = load(saved)
        except CheckpointError as e:
            assert str(e).startswith(f"checkpoint {saved} ") and "state.json" in str(e), str(e)
            return "refused"
        assert_same(dataclasses.asdict(back), dataclasses.asdict(original))
        return "equal"

    def test_single_bit_flips_at_600_positions_spread_over_the_file(self, tmp_path: Path) -> None:
        original = state()
        saved = Checkpointer(tmp_path, every=1).save(original)
        data = (saved / "state.json").read_bytes()
        outcomes = []
        for k in range(600):
            position = k * len(data) // 600
            damaged = bytearray(data)
            damaged[position] ^= 1 << (k % 8)
            outcomes.append(self._outcome(saved, original, bytes(damaged)))
        assert outcomes.count("refused") >= 590, outcomes.count("equal")  # a flip may only change layout

    def test_truncations_are_refused(self, tmp_path: Path) -> None:
        original = state()
        saved = Checkpointer(tmp_path, every=1).save(original)
        data = (saved / "state.json").read_bytes()
        for length in range(0, len(data) - 1, max(1, len(data) // 97)):
            assert self._outcome(saved, original, data[:length]) == "refused", length

    def test_every_key_renamed_by_one_letter_is_refused(self, tmp_path: Path) -> None:
        original = state()
        saved = Checkpointer(tmp_path, every=1).save(original)
        data = (saved / "state.json").read_bytes()
        keys = sorted(set(re.findall(rb'"([A-Za-z_][\w.]*)":', data)))
        assert len(keys) > 20
        for key in keys:
            renamed = key[:-1] + (b"s" if key[-1:] != b"s" else b"t")
            assert self._outcome(saved, original, data.replace(b'"' + key + b'":', b'"' + renamed + b'":')) == "refused"


def test_unreadable_metadata_is_refused(tmp_path: Path) -> None:
    saved = Checkpointer(tmp_path, every=1).save(state())
    (saved / "state.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"cannot be read: state.json: "):
        load(saved)


def test_nothing_is_pickled(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"learner/bad is an object array"):
        Checkpointer(tmp_path, every=1).save(state(learner={"bad": np.array([object()], dtype=object)}))
    with pytest.raises(CheckpointError, match=r"learner/fn is a function, which is not saved"):
        Checkpointer(tmp_path, every=1).save(state(learner={"fn": lambda: 0}))
    saved = Checkpointer(tmp_path, every=1).save(state())
    with np.load(saved / "state.npz", allow_pickle=False) as npz:  # plain arrays only
        assert all(npz[k].dtype != object for k in npz.files)
