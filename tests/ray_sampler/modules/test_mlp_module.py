"""MLPModule: output shapes, seeded weights, state handling and the spaces and sizes it refuses."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules import MLPModule


def test_mlp_outputs_for_discrete_and_box() -> None:
    obs = np.zeros((5, 4), np.float32)
    d = MLPModule(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3))
    out = d.forward_exploration({"obs": obs})
    assert out["action_dist_inputs"].shape == (5, 3) and out["vf_preds"].shape == (5,)
    b = MLPModule(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-1, 1, (2,)), initial_log_std=-1.0)
    out = b.forward_inference({"obs": obs})
    assert out["action_dist_inputs"].shape == (5, 4)
    np.testing.assert_allclose(out["action_dist_inputs"][:, 2:], -1.0)


def test_mlp_same_seed_same_weights_and_state_round_trip() -> None:
    spaces = (gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    a, b, c = MLPModule(*spaces, seed=1), MLPModule(*spaces, seed=1), MLPModule(*spaces, seed=2)
    assert all(np.array_equal(v, b.get_state()[k]) for k, v in a.get_state().items())
    assert not np.array_equal(a.get_state()["pi.0.w"], c.get_state()["pi.0.w"])
    c.set_state(a.get_state())
    obs = {"obs": np.ones((2, 4), np.float32)}
    np.testing.assert_array_equal(c.forward_exploration(obs)["vf_preds"], a.forward_exploration(obs)["vf_preds"])


def test_mlp_set_state_checks_keys_and_shapes() -> None:
    m = MLPModule(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    state = m.get_state()
    with pytest.raises(ValueError, match="keys differ"):
        m.set_state({k: v for k, v in state.items() if k != "vf.0.b"})
    state["pi.0.w"] = np.zeros((3, 3))
    with pytest.raises(ValueError, match=r"'pi\.0\.w' must have shape"):
        m.set_state(state)


def test_mlp_rejects_unsupported_action_spaces_and_sizes() -> None:
    with pytest.raises(SpaceError, match="supports Discrete and 1-D Box action spaces"):
        MLPModule(gym.spaces.Box(-1, 1, (4,)), gym.spaces.MultiDiscrete([2, 2]))
    with pytest.raises(ConfigError, match="'hidden_sizes'"):
        MLPModule(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=())
