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


class TestFreeLogStd:
    """A Box action space's log-std is one learned vector (RLlib's ``free_log_std``), not a head output."""

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,))

    def test_the_log_std_starts_at_initial_log_std_and_is_in_the_state(self) -> None:
        state = MLPModule(*self.spaces(), initial_log_std=-0.5).get_state()
        assert state["pi.log_std"].tolist() == [-0.5, -0.5] and state["pi.log_std"].dtype == np.float32

    def test_set_state_moves_the_log_std_of_every_observation(self) -> None:
        a, b = MLPModule(*self.spaces(), seed=1), MLPModule(*self.spaces(), seed=1)
        state = a.get_state()
        state["pi.log_std"] = np.array([0.25, -1.5], np.float32)
        b.set_state(state)
        obs = {"obs": np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)}
        np.testing.assert_array_equal(b.forward_exploration(obs)["action_dist_inputs"][:, 2:], [[0.25, -1.5]] * 4)
        np.testing.assert_array_equal(  # the means are untouched
            b.forward_exploration(obs)["action_dist_inputs"][:, :2],
            a.forward_exploration(obs)["action_dist_inputs"][:, :2],
        )
        assert b.get_state()["pi.log_std"].tolist() == [0.25, -1.5]

    def test_set_state_checks_the_log_std_shape(self) -> None:
        m = MLPModule(*self.spaces())
        state = m.get_state()
        state["pi.log_std"] = np.zeros(3)
        with pytest.raises(ValueError, match=r"'pi\.log_std' must have shape \(2,\)"):
            m.set_state(state)

    def test_a_discrete_action_space_has_no_log_std(self) -> None:
        assert "pi.log_std" not in MLPModule(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)).get_state()
