"""Torch modules: TorchMLPModule and TorchQModule equal their numpy twins, seeded weights, state checks,
the TorchRLModule base (numpy in and out, nested state), and torch staying an optional import."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError, SpaceError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.modules.q_module import QModule
from ray_sampler.modules.rl_module import RLModule, is_stateful
from ray_sampler.modules.torch_mlp import Q_VALUES, TorchMLPModule, TorchQModule
from ray_sampler.modules.torch_module import TorchRLModule

OBS_SPACE = gym.spaces.Box(-1, 1, (2, 3))  # flattened to 6 inputs by both modules
ACTION_SPACES = [gym.spaces.Discrete(3), gym.spaces.Box(-2, 2, (2,))]


def torch_weights(numpy_params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A numpy module's parameters under the torch twin's names (``h.i.w`` [in, out] -> ``h.i.weight`` [out, in])."""
    out = {}
    for k, v in numpy_params.items():
        if k.endswith(".w"):
            out[k[:-2] + ".weight"] = v.T.copy()
        elif k.endswith(".b"):
            out[k[:-2] + ".bias"] = v.copy()
        else:
            out[k] = v.copy()
    return out


def observations(n: int = 7, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 2, 3)).astype(np.float32)


class TestTorchMLPModule:
    @pytest.mark.parametrize("action_space", ACTION_SPACES, ids=["discrete", "box"])
    def test_equals_mlp_module_with_the_same_weights(self, action_space: gym.Space) -> None:
        numpy_module = MLPModule(OBS_SPACE, action_space, hidden_sizes=(5, 4), seed=3, initial_log_std=-0.5)
        module = TorchMLPModule(OBS_SPACE, action_space, hidden_sizes=(5, 4), seed=0)
        module.set_state(torch_weights(numpy_module.get_state()))
        batch = {Columns.OBS: observations()}
        for method in ("forward_exploration", "forward_inference"):
            want, got = getattr(numpy_module, method)(batch), getattr(module, method)(batch)
            assert got.keys() == want.keys() == {Columns.ACTION_DIST_INPUTS, Columns.VF_PREDS}
            for k in want:
                assert isinstance(got[k], np.ndarray) and got[k].dtype == np.float32
                np.testing.assert_allclose(got[k], want[k], atol=1e-5)
        np.testing.assert_allclose(
            module.compute_values(batch[Columns.OBS]), numpy_module.compute_values(batch[Columns.OBS]), atol=1e-5
        )

    def test_parameter_names_follow_the_numpy_module(self) -> None:
        module = TorchMLPModule(OBS_SPACE, ACTION_SPACES[1], hidden_sizes=(5,))
        numpy_names = MLPModule(OBS_SPACE, ACTION_SPACES[1], hidden_sizes=(5,)).get_state().keys()
        assert sorted(module.get_state()) == sorted(torch_weights(dict.fromkeys(numpy_names, np.zeros(1))))

    def test_the_log_std_starts_at_initial_log_std(self) -> None:
        module = TorchMLPModule(OBS_SPACE, ACTION_SPACES[1], initial_log_std=-1.0)
        out = module.forward_exploration({Columns.OBS: observations()})[Columns.ACTION_DIST_INPUTS]
        assert out.shape == (7, 4)
        np.testing.assert_array_equal(out[:, 2:], -1.0)

    def test_same_seed_same_weights_and_the_global_rng_is_left_alone(self) -> None:
        torch.manual_seed(123)
        expected_draw = torch.rand(3)
        torch.manual_seed(123)
        a, b = TorchMLPModule(OBS_SPACE, ACTION_SPACES[0], seed=1), TorchMLPModule(OBS_SPACE, ACTION_SPACES[0], seed=1)
        assert torch.equal(torch.rand(3), expected_draw)
        c = TorchMLPModule(OBS_SPACE, ACTION_SPACES[0], seed=2)
        assert all(np.array_equal(v, b.get_state()[k]) for k, v in a.get_state().items())
        assert not np.array_equal(a.get_state()["pi.0.weight"], c.get_state()["pi.0.weight"])

    def test_init_is_orthogonal_with_the_numpy_gains(self) -> None:
        module = TorchMLPModule(gym.spaces.Box(-1, 1, (64,)), ACTION_SPACES[0], hidden_sizes=(64,))
        state = module.get_state()
        np.testing.assert_allclose(state["pi.0.weight"] @ state["pi.0.weight"].T, 2 * np.eye(64), atol=1e-4)
        np.testing.assert_allclose(state["pi.1.weight"] @ state["pi.1.weight"].T, 1e-4 * np.eye(3), atol=1e-8)
        np.testing.assert_allclose(state["vf.1.weight"] @ state["vf.1.weight"].T, [[1.0]], atol=1e-5)
        assert not any(state[k].any() for k in state if k.endswith(".bias"))

    def test_get_state_returns_copies(self) -> None:
        module = TorchMLPModule(OBS_SPACE, ACTION_SPACES[0])
        state = module.get_state()
        state["vf.0.bias"] += 1.0
        assert not module.get_state()["vf.0.bias"].any()

    def test_set_state_checks_keys_and_shapes(self) -> None:
        module = TorchMLPModule(OBS_SPACE, ACTION_SPACES[0], hidden_sizes=(5,))
        state = module.get_state()
        with pytest.raises(ValueError, match=r"TorchMLPModule.set_state: keys differ \(missing \['vf.0.bias'\]"):
            module.set_state({k: v for k, v in state.items() if k != "vf.0.bias"})
        with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
            module.set_state({**state, "extra": np.zeros(1)})
        with pytest.raises(ValueError, match=r"'pi.0.weight' must have shape \(5, 6\) \(got \(6, 5\)\)"):
            module.set_state({**state, "pi.0.weight": np.zeros((6, 5))})
        np.testing.assert_array_equal(module.get_state()["pi.0.weight"], state["pi.0.weight"])  # nothing loaded

    def test_refuses_bad_hidden_sizes_and_spaces(self) -> None:
        with pytest.raises(ConfigError, match="'hidden_sizes' must be a non-empty tuple of ints >= 1"):
            TorchMLPModule(OBS_SPACE, ACTION_SPACES[0], hidden_sizes=())
        with pytest.raises(SpaceError, match="Discrete and 1-D Box action spaces"):
            TorchMLPModule(OBS_SPACE, gym.spaces.MultiBinary(3))

    def test_forward_train_keeps_autograd(self) -> None:
        module = TorchMLPModule(OBS_SPACE, ACTION_SPACES[0])
        out = module.forward_train({Columns.OBS: torch.as_tensor(observations())})
        out[Columns.VF_PREDS].sum().backward()
        assert module.vf[0].weight.grad is not None and module.pi[0].weight.grad is None


class TestTorchQModule:
    @pytest.mark.parametrize("activation", ["relu", "tanh"])
    def test_equals_q_module_with_the_same_weights(self, activation: str) -> None:
        spaces = (OBS_SPACE, gym.spaces.Discrete(4, start=1))
        numpy_module = QModule(*spaces, hidden_sizes=(5,), seed=4, epsilon=0.3, activation=activation)
        module = TorchQModule(*spaces, hidden_sizes=(5,), seed=0, activation=activation)
        module.set_state(torch_weights(numpy_module.get_state()))
        assert module.epsilon == 0.3
        batch = {Columns.OBS: observations(50)}
        q = module.forward_train({Columns.OBS: torch.as_tensor(batch[Columns.OBS])})[Q_VALUES]
        np.testing.assert_allclose(q.detach().numpy(), numpy_module.q_values(batch[Columns.OBS]), atol=1e-5)
        want, got = numpy_module.forward_inference(batch), module.forward_inference(batch)
        np.testing.assert_array_equal(got[Columns.ACTIONS], want[Columns.ACTIONS])
        np.testing.assert_allclose(got[Columns.ACTION_DIST_INPUTS], want[Columns.ACTION_DIST_INPUTS], atol=1e-6)
        np.testing.assert_allclose(
            module.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS],
            numpy_module.forward_exploration(batch)[Columns.ACTION_DIST_INPUTS],
            atol=1e-6,
        )

    def test_epsilon_travels_with_the_state(self) -> None:
        module = TorchQModule(OBS_SPACE, gym.spaces.Discrete(2), epsilon=0.5)
        state = module.get_state()
        assert state["epsilon"] == 0.5
        assert sorted(state) == [
            "epsilon",
            "q.0.bias",
            "q.0.weight",
            "q.1.bias",
            "q.1.weight",
            "q.2.bias",
            "q.2.weight",
        ]
        module.set_state({**state, "epsilon": np.float64(0.1)})
        assert module.epsilon == 0.1

    def test_refuses_bad_epsilon_activation_and_space(self) -> None:
        with pytest.raises(ConfigError, match=r"'epsilon' must be in \[0, 1\] \(got 1.5\)"):
            TorchQModule(OBS_SPACE, gym.spaces.Discrete(2), epsilon=1.5)
        with pytest.raises(ConfigError, match="'activation' must be one of"):
            TorchQModule(OBS_SPACE, gym.spaces.Discrete(2), activation="gelu")
        with pytest.raises(SpaceError, match="TorchQModule needs a Discrete action space"):
            TorchQModule(OBS_SPACE, gym.spaces.Box(-1, 1, (2,)))


class RunningSum(TorchRLModule):
    """A stateful module without parameters: its state is the running sum of the observations."""

    def is_stateful(self) -> bool:
        return True

    def get_initial_state(self) -> dict[str, np.ndarray]:
        return {"total": np.zeros(2, np.float32)}

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        total = batch[Columns.STATE_IN]["total"] + batch[Columns.OBS]
        return {Columns.ACTIONS: (total.sum(dim=1) > 0).long(), Columns.STATE_OUT: {"total": total}}


class TestTorchRLModuleBase:
    def test_nested_state_goes_in_and_comes_out_as_numpy(self) -> None:
        module = RunningSum(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2))
        state = {"total": np.stack([module.get_initial_state()["total"]] * 2)}
        obs = np.array([[1.0, 2.0], [-3.0, 0.5]])
        for _ in range(2):
            out = module.forward_exploration({Columns.OBS: obs, Columns.STATE_IN: state})
            state = out[Columns.STATE_OUT]
        np.testing.assert_array_equal(state["total"], 2 * obs.astype(np.float32))
        np.testing.assert_array_equal(out[Columns.ACTIONS], [1, 0])
        assert module.is_stateful() and module.framework == "torch" and module.get_state() == {}

    def test_an_rl_module_stateless_by_default(self) -> None:
        module = TorchMLPModule(OBS_SPACE, ACTION_SPACES[0])
        assert isinstance(module, RLModule) and not is_stateful(module) and module.get_initial_state() == {}

    def test_a_subclass_without_forward_says_what_to_implement(self) -> None:
        module = TorchRLModule(OBS_SPACE, ACTION_SPACES[0])
        with pytest.raises(NotImplementedError, match=r"TorchRLModule must implement _forward\(batch\)"):
            module.forward_inference({Columns.OBS: observations()})

    def test_acting_runs_without_autograd(self) -> None:
        module = TorchMLPModule(OBS_SPACE, ACTION_SPACES[0])
        seen = []
        module.pi[0].register_forward_hook(lambda *_: seen.append(torch.is_grad_enabled()))
        module.forward_exploration({Columns.OBS: observations()})
        module.forward_inference({Columns.OBS: observations()})
        module.compute_values(observations())
        assert seen == [False, False]  # compute_values runs the value head only


def test_the_library_imports_without_torch() -> None:
    code = (
        "import sys; import ray_sampler.modules, ray_sampler.sampling, connectors, replay, learner; "
        "import learner.train, learner.train_dqn, learner.presets, learner.frameworks, ray_sampler.cli.train; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


class TestActionMask:
    """The torch twins mask as the numpy modules do: over a Dict observation with an ``action_mask``,
    with the same weights they give the same masked logits and Q-values, in ``forward_train`` too,
    and no gradient reaches a masked entry."""

    OBS = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "action_mask": gym.spaces.MultiBinary(5)})

    def flat(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        from ray_sampler.data.spaces import flatten_batch

        rng = np.random.default_rng(2)
        mask = (rng.random((n, 5)) < 0.4).astype(np.int8)
        mask[np.arange(n), rng.integers(0, 5, n)] = 1
        return flatten_batch(self.OBS, {"observation": rng.uniform(-1, 1, (n, 3)), "action_mask": mask}), mask

    def test_the_mlp_masks_acting_and_training_as_its_numpy_twin(self) -> None:
        from ray_sampler.modules.action_masking import MASKED_LOGIT

        numpy_module = MLPModule(self.OBS, gym.spaces.Discrete(5), hidden_sizes=(8,), seed=3)
        module = TorchMLPModule(self.OBS, gym.spaces.Discrete(5), hidden_sizes=(8,), seed=0)
        module.set_state(torch_weights(numpy_module.get_state()))
        x, mask = self.flat(100)
        want = numpy_module.forward_exploration({Columns.OBS: x})[Columns.ACTION_DIST_INPUTS]
        for method in ("forward_exploration", "forward_inference"):
            got = getattr(module, method)({Columns.OBS: x})[Columns.ACTION_DIST_INPUTS]
            assert np.array_equal(got == MASKED_LOGIT, mask == 0)
            np.testing.assert_allclose(got, want, atol=1e-5)
        logits = module.forward_train({Columns.OBS: torch.as_tensor(x)})[Columns.ACTION_DIST_INPUTS]
        assert np.array_equal(logits.detach().numpy() == MASKED_LOGIT, mask == 0)
        weights = torch.as_tensor(np.random.default_rng(0).normal(size=(100, 5)), dtype=logits.dtype)
        (logits * weights).sum().backward()  # d/d bias_j: the weights of the rows where action j is legal
        grad = module.pi[-1].bias.grad
        assert grad is not None
        np.testing.assert_allclose(grad.numpy(), (weights.numpy() * mask).sum(0), rtol=1e-5, atol=1e-6)

    def test_the_q_module_masks_q_values_and_explores_as_its_numpy_twin(self) -> None:
        from ray_sampler.modules.action_masking import MASKED_LOGIT

        numpy_module = QModule(self.OBS, gym.spaces.Discrete(5, start=1), hidden_sizes=(8,), seed=4, epsilon=0.3)
        module = TorchQModule(self.OBS, gym.spaces.Discrete(5, start=1), hidden_sizes=(8,), seed=0)
        module.set_state(torch_weights(numpy_module.get_state()))
        x, mask = self.flat(200)
        q = module.forward_train({Columns.OBS: torch.as_tensor(x)})[Q_VALUES].detach().numpy()
        assert np.array_equal(q == MASKED_LOGIT, mask == 0)
        np.testing.assert_allclose(q, numpy_module.q_values(x), atol=1e-5)
        got = module.forward_inference({Columns.OBS: x})
        assert mask[np.arange(200), got[Columns.ACTIONS] - 1].all()
        want = numpy_module.forward_inference({Columns.OBS: x})
        np.testing.assert_array_equal(got[Columns.ACTIONS], want[Columns.ACTIONS])
        dist = module.forward_exploration({Columns.OBS: x})[Columns.ACTION_DIST_INPUTS]
        assert np.array_equal(dist == MASKED_LOGIT, mask == 0)
        np.testing.assert_allclose(dist, want[Columns.ACTION_DIST_INPUTS], atol=1e-6)
