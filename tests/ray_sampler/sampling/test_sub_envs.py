"""SubEnvVector: gymnasium's SyncVectorEnv outputs exactly, and one failing sub-env leaves the others stepped."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import EnvError
from ray_sampler.sampling.sub_envs import SubEnvVector
from tests.helpers import StampEnv
from tests.ray_sampler.sampling.faults import EnvBoom, FaultPlan, FaultyStampEnv


def _assert_same_output(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_output(a[k], b[k])
    elif isinstance(a, tuple | list):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same_output(x, y)
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object and a.shape == b.shape
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            _assert_same_output(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    else:
        assert a == b


def test_outputs_equal_gymnasium_sync_vector_env_byte_for_byte() -> None:
    ours = SubEnvVector([StampEnv(0, v) for v in range(3)], worker_index=0)
    theirs = gym.vector.SyncVectorEnv(
        [lambda v=v: StampEnv(0, v) for v in range(3)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    _assert_same_output(ours.reset(seed=[1, 2, 3]), theirs.reset(seed=[1, 2, 3]))
    for k in range(40):
        actions = np.array([k % 2, 1, 0])
        for x, y in zip(ours.step(actions), theirs.step(actions), strict=True):
            _assert_same_output(x, y)
        assert ours.failed == []


def test_failed_step_rebuilds_only_that_sub_env_and_the_others_step_once() -> None:
    plan = FaultPlan(steps={(1, 2)})
    envs = [FaultyStampEnv(plan, 0, v) for v in range(3)]
    seeds: list[tuple[int, int]] = []
    vec = SubEnvVector(
        envs,
        worker_index=7,
        make_env=lambda v: FaultyStampEnv(plan, 7, v),
        reset_seed=lambda v, k: seeds.append((v, k)) or 40 + k,
    )
    vec.reset()
    vec.step(np.zeros(3, dtype=np.int64))
    obs, rewards, terminated, truncated, infos = vec.step(np.zeros(3, dtype=np.int64))
    assert vec.failed == [1] and vec.num_restarts == 1 and seeds == [(1, 1)]
    # Sub-envs 0 and 2 made their second step (0's episode ended and reset); sub-env 1 is a new
    # instance (episode 100), just reset.
    assert obs.tolist() == [[0, 0, 1, 0], [7, 1, 100, 0], [0, 2, 0, 2]]
    assert infos["final_obs"][0].tolist() == [0, 0, 0, 2]
    assert rewards.tolist() == [2.0, 0.0, 2.0] and terminated.tolist() == [True, False, False]
    assert not truncated.any()
    assert infos["episode"][1] == 100 and infos["_episode"].tolist() == [True, True, False]
    assert vec.envs[1] is not envs[1] and vec.envs[0] is envs[0]


def test_failed_autoreset_keeps_the_ended_episode_and_rebuilds() -> None:
    plan = FaultPlan(resets={(0, 2)})  # sub-env 0's first autoreset (its episode 0 lasts 2 steps)
    vec = SubEnvVector(
        [FaultyStampEnv(plan, 0, 0)], worker_index=0, make_env=lambda v: FaultyStampEnv(plan, 0, v), reset_seed=None
    )
    vec.reset()
    vec.step(np.zeros(1, dtype=np.int64))
    obs, rewards, terminated, _, infos = vec.step(np.zeros(1, dtype=np.int64))
    assert vec.failed == [] and vec.num_restarts == 1
    assert terminated.tolist() == [True] and rewards.tolist() == [2.0]
    assert infos["final_obs"][0].tolist() == [0, 0, 0, 2] and obs.tolist() == [[0, 0, 100, 0]]


def test_without_make_env_a_failure_raises_env_error_naming_the_sub_env() -> None:
    plan = FaultPlan(steps={(2, 1)})
    vec = SubEnvVector([FaultyStampEnv(plan, 0, v) for v in range(3)], worker_index=5)
    vec.reset()
    with pytest.raises(EnvError, match=r"^sub-env worker_index=5, vector_index=2 raised in step\(\): EnvBoom") as info:
        vec.step(np.zeros(3, dtype=np.int64))
    assert isinstance(info.value.__cause__, EnvBoom)


def test_a_rebuilt_env_failing_its_first_reset_raises_env_error() -> None:
    plan = FaultPlan(resets={(0, 1), (0, 2)})
    vec = SubEnvVector(
        [FaultyStampEnv(plan, 0, 0)], worker_index=3, make_env=lambda v: FaultyStampEnv(plan, 3, v), reset_seed=None
    )
    with pytest.raises(EnvError, match=r"vector_index=0 raised in reset\(\) right after a restart: EnvBoom"):
        vec.reset()


class _InfoEnv(gym.Env):
    """Float64 observations for a float32 space, and infos of every kind: numpy scalars, nested
    dicts, keys some steps lack, an info at the episode's end, and reset infos on odd sub-envs."""

    observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, vector_index: int) -> None:
        self.v, self.t = vector_index, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.v, 0.0]), ({"r": np.int64(self.v)} if self.v % 2 else {})

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        info: dict[str, Any] = {"n": np.int32(self.t), "f": np.float32(0.5 * self.t), "nested": {"x": np.float64(1)}}
        if self.t % 2 == 0:
            info["even"] = True
        end = self.t == 3 + self.v
        if end:
            info["end"] = np.int64(self.v)
        return np.array([self.v, self.t + 0.25]), float(action), end, False, info


def test_the_runners_stepper_reads_the_infos_gymnasiums_vector_form_carries() -> None:
    """The stepper takes SubEnvVector's infos by sub-env (no packing): the same steps as it reads
    from gymnasium's SyncVectorEnv, numpy scalars made Python ones, float64 rows stored as float32."""
    from ray_sampler.sampling.vector import VectorStepper

    ours = VectorStepper(SubEnvVector([_InfoEnv(v) for v in range(3)], worker_index=0))
    theirs = VectorStepper(
        gym.vector.SyncVectorEnv(
            [lambda v=v: _InfoEnv(v) for v in range(3)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )
    )
    _assert_same_output(ours.reset([0, 1, 2])[1:], theirs.reset([0, 1, 2])[1:])
    num_ends = 0
    for k in range(12):
        a, b = ours.step(np.array([k % 2, 1, 0])), theirs.step(np.array([k % 2, 1, 0]))
        assert a.obs.dtype == np.float32
        for field in ("obs", "final_obs", "rewards", "terminated", "infos", "resets", "current_obs"):
            _assert_same_output(getattr(a, field), getattr(b, field))
        for info in a.infos.values():
            assert type(info["n"]) is int and type(info["f"]) is float and type(info["nested"]["x"]) is float
        num_ends += len(a.final_obs)
    assert num_ends >= 6  # the end infos and the reset infos were compared too
