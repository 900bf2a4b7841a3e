"""VectorStepper: real transitions only, in every gymnasium autoreset mode; vector infos split per sub-env;
float64 rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.sampling.vector import VectorStepper, split_infos
from tests.helpers import StampEnv, stamp_length


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_no_fake_transition_across_a_reset(mode: str) -> None:
    env = gym.vector.SyncVectorEnv(
        [lambda v=v: StampEnv(0, v) for v in range(2)], autoreset_mode=gym.vector.AutoresetMode(mode)
    )
    stepper = VectorStepper(env)
    obs, _, _ = stepper.reset()
    current = [tuple(o) for o in obs]
    transitions: list[tuple[tuple, tuple]] = []
    for _ in range(30):
        step = stepper.step(np.zeros(2, np.int64))
        next_obs = step.next_obs_rows()
        for i in range(2):
            if step.valid[i]:
                nxt = tuple(next_obs[i])
                transitions.append((current[i], nxt))
                current[i] = nxt
            if i in step.resets:
                current[i] = tuple(step.resets[i][0])
                assert current[i][3] == 0  # a reset observation starts at t=0
    for before, after in transitions:
        # Each recorded transition stays in one episode and advances t by exactly 1.
        assert before[:3] == after[:3] and after[3] == before[3] + 1
        assert after[3] <= stamp_length(after[1], after[2])
    assert len(transitions) >= 50


def test_same_step_uses_the_final_observation() -> None:
    env = gym.vector.SyncVectorEnv([lambda: StampEnv(0, 0)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    stepper = VectorStepper(env)
    stepper.reset()
    step = stepper.step(np.zeros(1, np.int64))
    step = stepper.step(np.zeros(1, np.int64))  # episode 0 of sub-env 0 lasts 2 steps
    assert step.terminated[0] and tuple(step.next_obs_rows()[0]) == (0, 0, 0, 2)
    assert tuple(step.resets[0][0]) == (0, 0, 1, 0) and tuple(step.current_obs[0]) == (0, 0, 1, 0)


def test_split_infos_respects_masks_and_nesting() -> None:
    infos = {
        "a": np.array([1, 0, 3]),
        "_a": np.array([True, False, True]),
        "n": {"b": np.array([0.5, 1.5, 2.5]), "_b": np.array([False, True, False])},
        "_n": np.array([False, True, False]),
    }
    out = split_infos(infos, 3)
    assert out == [{"a": 1}, {"n": {"b": 1.5}}, {"a": 3}]
    assert type(out[0]["a"]) is int


class _Int32Rewards(gym.vector.VectorWrapper):
    """A native-style vector env whose rewards come as int32 (as ALE's); keeps the arrays it returned."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.returned: list[np.ndarray] = []

    def step(self, actions: np.ndarray) -> tuple:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self.returned.append(rewards.astype(np.int32))
        return obs, self.returned[-1], terminated, truncated, infos


@pytest.mark.parametrize("native", [False, True], ids=["sync_float64", "native_int32"])
def test_rewards_are_float64_on_every_path(native: bool) -> None:
    env = gym.vector.SyncVectorEnv([lambda v=v: StampEnv(0, v) for v in range(2)])
    stepper = VectorStepper(_Int32Rewards(env) if native else env)
    stepper.reset()
    steps = [stepper.step(np.zeros(2, np.int64)) for _ in range(3)]
    assert [s.rewards.dtype for s in steps] == [np.dtype(np.float64)] * 3
    # StampEnv's reward is t; sub-env 0's first episode lasts 2 steps, then a NEXT_STEP reset (reward 0).
    assert [s.rewards.tolist() for s in steps] == [[1.0, 1.0], [2.0, 2.0], [0.0, 3.0]]


def test_int32_rewards_are_converted_into_a_new_array() -> None:
    env = _Int32Rewards(gym.vector.SyncVectorEnv([lambda: StampEnv(0, 0)]))
    stepper = VectorStepper(env)
    stepper.reset()
    step = stepper.step(np.zeros(1, np.int64))
    step.rewards[0] = 99.0
    assert env.returned[0].tolist() == [1] and env.returned[0].dtype == np.int32
