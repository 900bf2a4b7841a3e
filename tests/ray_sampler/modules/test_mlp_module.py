"""MLPModule: output shapes, seeded weights, state handling, action masks and the spaces and sizes it refuses."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data.spaces import flatten_batch
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules import MLPModule
from ray_sampler.modules.action_masking import MASKED_LOGIT
from ray_sampler.modules.mlp import forward


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


class TestActionMask:
    """Over a Dict observation with an ``action_mask`` the MLP reads the whole flattened dict and gives
    forbidden actions ``MASKED_LOGIT``; other spaces are untouched."""

    OBS = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "action_mask": gym.spaces.MultiBinary(4)})

    def flat(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(flattened observations [n, 7], their masks [n, 4], each allowing one to four actions)."""
        rng = np.random.default_rng(0)
        mask = (rng.random((n, 4)) < 0.4).astype(np.int8)
        mask[np.arange(n), rng.integers(0, 4, n)] = 1
        obs = {"observation": rng.uniform(-1, 1, (n, 3)), "action_mask": mask}
        return flatten_batch(self.OBS, obs), mask

    def test_forbidden_actions_get_the_masked_logit_in_every_forward(self) -> None:
        module = MLPModule(self.OBS, gym.spaces.Discrete(4), seed=3)
        x, mask = self.flat(200)
        raw = forward(module.params, "pi", x)[0]  # the whole flattened dict is the input
        for method in (module.forward_exploration, module.forward_inference):
            logits = method({"obs": x})["action_dist_inputs"]
            assert np.array_equal(logits == MASKED_LOGIT, mask == 0)
            np.testing.assert_allclose(logits[mask == 1], raw[mask == 1], rtol=1e-6)
            assert mask[np.arange(200), logits.argmax(1)].all()  # the greedy action is legal

    def test_spaces_without_a_mask_give_the_plain_logits(self) -> None:
        plain = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "mask": gym.spaces.MultiBinary(4)})
        x, _ = self.flat(20)
        for space, actions in ((plain, gym.spaces.Discrete(4)), (gym.spaces.Box(-1, 1, (7,)), gym.spaces.Discrete(4))):
            module = MLPModule(space, actions, seed=3)
            assert module.action_mask_slice is None
            logits = module.forward_exploration({"obs": x})["action_dist_inputs"]
            np.testing.assert_allclose(logits, forward(module.params, "pi", x)[0], rtol=1e-6)
            assert logits.min() > -1.0  # no logit masked
