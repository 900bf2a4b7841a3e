"""Torch learners: PPO and DQN losses and gradients equal the numpy ones, updates learn, state round trips
(through a checkpoint too) and its checks, masked time-dimension losses, and a LearnerGroup on CartPole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from learner.checkpoint import Checkpointer, TrainingState, load_checkpoint
from learner.dqn import DQNConfig, dqn_loss_and_grads
from learner.learner import PolicyLoss, PPOConfig
from learner.learner_group import LearnerGroup
from learner.ppo_loss import ppo_loss_and_grads
from learner.torch_learner import TorchDQNLearner, TorchPPOLearner
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.modules.q_module import QModule
from ray_sampler.modules.torch_mlp import TorchMLPModule, TorchQModule
from ray_sampler.modules.torch_module import TorchRLModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.sampling.env_runner import EnvRunner

OBS_SPACE = gym.spaces.Box(-1, 1, (3,))


def to_torch_names(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Numpy module names and layouts -> torch twin's (``h.i.w`` [in, out] -> ``h.i.weight`` [out, in])."""
    out = {}
    for k, v in params.items():
        if k.endswith(".w"):
            out[k[:-2] + ".weight"] = np.ascontiguousarray(v.T)
        elif k.endswith(".b"):
            out[k[:-2] + ".bias"] = v.copy()
        else:
            out[k] = v.copy()
    return out


def ppo_problem(action_space: gym.Space, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Float32 numpy MLP parameters (a policy that is not near-uniform) and a 16-step PPO batch."""
    params = MLPModule(OBS_SPACE, action_space, hidden_sizes=(5, 4), seed=seed).get_state()
    rng = np.random.default_rng(seed)
    params["pi.2.w"] = rng.normal(0, 0.5, params["pi.2.w"].shape).astype(np.float32)
    n = 16
    if isinstance(action_space, gym.spaces.Discrete):
        actions, logp = rng.integers(0, action_space.n, n), np.log(rng.uniform(0.1, 0.5, n))
    else:
        params["pi.log_std"] = np.array([-0.3, 0.2], np.float32)
        actions, logp = rng.normal(0, 1.5, (n, 2)), rng.normal(-2.5, 0.3, n)
    batch = {
        Columns.OBS: rng.normal(size=(n, 3)).astype(np.float32),
        Columns.ACTIONS: actions,
        Columns.ACTION_LOGP: logp,
        Columns.ADVANTAGES: rng.normal(size=n),
        Columns.VALUE_TARGETS: rng.normal(0, 2, n),
    }
    return params, batch


def ppo_learner(action_space: gym.Space, params: dict[str, np.ndarray], config: PPOConfig) -> TorchPPOLearner:
    module = TorchMLPModule(OBS_SPACE, action_space, hidden_sizes=(5, 4), seed=0)
    module.set_state(to_torch_names(params))
    return TorchPPOLearner(module, config)


def gradients_of(learner: Any, batch: dict[str, Any]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    learner.set_batch(batch=batch)
    learner.plan_epoch(1)
    terms, grads, rows = learner.compute_gradients(0)
    assert rows == len(batch[Columns.ADVANTAGES])
    return terms, grads


ACTION_SPACES = [gym.spaces.Discrete(4), gym.spaces.Box(-2, 2, (2,))]


class TestPPOEqualsNumpy:
    @pytest.mark.parametrize("action_space", ACTION_SPACES, ids=["discrete", "box"])
    @pytest.mark.parametrize(
        "kwargs",
        [
            {},
            {"vf_clip_param": 1.0, "entropy_coeff": 0.01, "clip_param": 0.1},
            {"policy_loss": "pg", "entropy_coeff": 0.01},
        ],
        ids=["defaults", "vf_clip_entropy", "policy_gradient"],
    )
    def test_loss_terms_and_gradients_equal_ppo_loss_and_grads(
        self, action_space: gym.Space, kwargs: dict[str, Any]
    ) -> None:
        params, batch = ppo_problem(action_space)
        config = PPOConfig(**kwargs)
        want_terms, want_grads = ppo_loss_and_grads(
            params,
            batch,
            clip_param=config.clip_param,
            vf_coeff=config.vf_coeff,
            entropy_coeff=config.entropy_coeff,
            vf_clip_param=config.vf_clip_param,
            clipped=config.policy_loss is PolicyLoss.CLIPPED,
        )
        terms, grads = gradients_of(ppo_learner(action_space, params, config), batch)
        assert terms.keys() == want_terms.keys()
        for k, v in want_terms.items():
            assert terms[k] == pytest.approx(v, abs=1e-5), k
        want = to_torch_names(want_grads)
        assert grads.keys() == want.keys()
        for k, v in want.items():
            np.testing.assert_allclose(grads[k], v, atol=1e-5, err_msg=k)

    def test_a_centralized_critics_loss_and_gradients_equal_the_numpy_modules(self) -> None:
        """The policy reads ``own`` and the value head ``global`` (a different size) in both twins."""
        from ray_sampler.modules.centralized_critic import CentralizedCriticMLPModule
        from ray_sampler.modules.torch_centralized_critic import TorchCentralizedCriticModule

        space = gym.spaces.Dict({"own": OBS_SPACE, "global": gym.spaces.Box(-1, 1, (7,))})
        action_space = ACTION_SPACES[0]
        params = CentralizedCriticMLPModule(space, action_space, hidden_sizes=(5, 4), seed=2).get_state()
        _, batch = ppo_problem(action_space)
        rng = np.random.default_rng(1)
        batch[Columns.OBS] = {"own": batch[Columns.OBS], "global": rng.normal(size=(16, 7)).astype(np.float32)}
        config = PPOConfig(vf_clip_param=1.0, entropy_coeff=0.01)
        want_terms, want_grads = ppo_loss_and_grads(
            params, batch, clip_param=config.clip_param, vf_coeff=config.vf_coeff,
            entropy_coeff=config.entropy_coeff, vf_clip_param=config.vf_clip_param,
        )  # fmt: skip
        module = TorchCentralizedCriticModule(space, action_space, hidden_sizes=(5, 4), seed=0)
        module.set_state(to_torch_names(params))
        terms, grads = gradients_of(TorchPPOLearner(module, config), batch)
        for k, v in want_terms.items():
            assert terms[k] == pytest.approx(v, abs=1e-5), k
        want = to_torch_names(want_grads)
        assert grads.keys() == want.keys() and grads["vf.0.weight"].shape == (5, 7)
        for k, v in want.items():
            np.testing.assert_allclose(grads[k], v, atol=1e-5, err_msg=k)

    def test_a_few_updates_on_a_fixed_batch_lower_the_loss(self) -> None:
        params, batch = ppo_problem(ACTION_SPACES[1])
        learner = ppo_learner(ACTION_SPACES[1], params, PPOConfig(lr=1e-2, num_epochs=10, minibatch_size=8))
        before = gradients_of(learner, batch)[0]["total_loss"]
        metrics = learner.update_from_batch(batch)
        after = gradients_of(learner, batch)[0]["total_loss"]
        assert after < before - 0.1
        assert metrics.num_gradient_steps == 20 and metrics.batch_size == 16 and metrics.weights_version == 1

    def test_an_empty_minibatch_gives_zero_gradients(self) -> None:
        params, batch = ppo_problem(ACTION_SPACES[0])
        learner = ppo_learner(ACTION_SPACES[0], params, PPOConfig())
        learner.set_batch(batch=batch)
        learner.plan_epoch(17)  # 16 rows: one minibatch stays empty
        results = [learner.compute_gradients(j) for j in range(17)]
        terms, grads, rows = next(r for r in results if r[2] == 0)
        assert terms == {} and rows == 0 and grads.keys() == learner.module.get_state().keys()
        assert not any(g.any() for g in grads.values())


def is_plain(value: Any) -> bool:
    """Only numpy arrays and plain Python values (what a checkpoint saves without pickle)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(is_plain(v) for v in value)
    return isinstance(value, np.ndarray | np.generic | bool | int | float | str) or value is None


def round_trip_through_a_checkpoint(state: dict[str, Any], directory: Path) -> dict[str, Any]:
    training = TrainingState(algo="ppo", env="e", observation_space="o", iteration=1, env_steps=1, learner=state)
    path = Checkpointer(directory, every=1).save(training)
    return load_checkpoint(path, algo="ppo", env="e", observation_space="o").learner


class TestPPOState:
    def test_state_holds_only_arrays_and_plain_values_with_the_optimizer_moments(self) -> None:
        params, batch = ppo_problem(ACTION_SPACES[1])
        learner = ppo_learner(ACTION_SPACES[1], params, PPOConfig(num_epochs=1, minibatch_size=8))
        learner.update_from_batch(batch)
        state = learner.get_state()
        assert is_plain(state)
        assert sorted(state) == ["module", "optimizer", "rng", "weights_version"]
        assert state["optimizer"]["t"] == 2 and state["weights_version"] == 1
        assert state["optimizer"]["m"].keys() == state["optimizer"]["v"].keys() == state["module"].keys()
        assert all(state["optimizer"]["v"][k].any() for k in state["module"])

    def test_a_checkpoint_loaded_with_another_lr_steps_with_the_new_lr(self, tmp_path: Path) -> None:
        """Population-based training mutates ``lr`` and loads another trial's checkpoint: the
        moments come from the checkpoint, the step size from the config."""
        params, batch = ppo_problem(ACTION_SPACES[0])
        a = ppo_learner(ACTION_SPACES[0], params, PPOConfig(num_epochs=1, minibatch_size=8, lr=1e-3))
        a.update_from_batch(batch)
        state = round_trip_through_a_checkpoint(a.get_state(), tmp_path)
        b = TorchPPOLearner(
            TorchMLPModule(OBS_SPACE, ACTION_SPACES[0], hidden_sizes=(5, 4), seed=9),
            PPOConfig(num_epochs=1, minibatch_size=8, lr=4e-3),
        )
        b.set_state(state)
        assert [g["lr"] for g in b.optimizer.optimizer.param_groups] == [4e-3]
        for k, m in state["optimizer"]["m"].items():
            np.testing.assert_array_equal(b.get_state()["optimizer"]["m"][k], m, err_msg=k)

    def test_round_trip_through_a_checkpoint_continues_identically(self, tmp_path: Path) -> None:
        params, batch = ppo_problem(ACTION_SPACES[0])
        config = PPOConfig(num_epochs=2, minibatch_size=8)
        a = ppo_learner(ACTION_SPACES[0], params, config)
        a.update_from_batch(batch)
        b = TorchPPOLearner(TorchMLPModule(OBS_SPACE, ACTION_SPACES[0], hidden_sizes=(5, 4), seed=9), config)
        b.set_state(round_trip_through_a_checkpoint(a.get_state(), tmp_path))
        a.update_from_batch(batch)
        b.update_from_batch(batch)  # equal only if moments, step count and shuffling RNG all came back
        for k, v in a.get_state()["module"].items():
            np.testing.assert_array_equal(b.get_state()["module"][k], v, err_msg=k)
        assert b.get_state()["optimizer"]["t"] == 8 and b.weights_version == 2

    def test_set_state_refuses_wrong_module_keys_shapes_and_moments(self) -> None:
        params, batch = ppo_problem(ACTION_SPACES[0])
        learner = ppo_learner(ACTION_SPACES[0], params, PPOConfig(num_epochs=1))
        learner.update_from_batch(batch)
        state = learner.get_state()
        module = state["module"]
        with pytest.raises(ValueError, match=r"TorchMLPModule.set_state: keys differ \(missing \['vf.2.bias'\]"):
            learner.set_state({**state, "module": {k: v for k, v in module.items() if k != "vf.2.bias"}})
        with pytest.raises(ValueError, match=r"'vf.2.weight' must have shape \(1, 4\) \(got \(4, 1\)\)"):
            learner.set_state({**state, "module": {**module, "vf.2.weight": np.zeros((4, 1))}})
        moments = state["optimizer"]
        bad = {**moments, "m": {**moments["m"], "nope": np.zeros(1)}, "v": {**moments["v"], "nope": np.zeros(1)}}
        with pytest.raises(ValueError, match=r"TorchAdam.set_state: .*unknown \['nope'\]"):
            learner.set_state({**state, "optimizer": bad})


class GRUPolicy(TorchRLModule):
    """A tiny recurrent policy: a GRU cell, a categorical head and a value head on its hidden state."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *, hidden: int = 4) -> None:
        super().__init__(observation_space, action_space)
        self.hidden = hidden
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.cell = torch.nn.GRUCell(int(observation_space.shape[0]), hidden)
            self.pi = torch.nn.Linear(hidden, int(action_space.n))
            self.vf = torch.nn.Linear(hidden, 1)

    def is_stateful(self) -> bool:
        return True

    def get_initial_state(self) -> dict[str, np.ndarray]:
        return {"h": np.zeros(self.hidden, np.float32)}

    def _forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        h = self.cell(batch[Columns.OBS], batch[Columns.STATE_IN]["h"])
        return {
            Columns.ACTION_DIST_INPUTS: self.pi(h),
            Columns.VF_PREDS: self.vf(h)[:, 0],
            Columns.STATE_OUT: {"h": h},
        }

    def _forward_train(self, batch: dict[str, Any]) -> dict[str, Any]:
        h, outputs = batch[Columns.STATE_IN]["h"], []
        for t in range(batch[Columns.OBS].shape[1]):
            h = self.cell(batch[Columns.OBS][:, t], h)
            outputs.append(h)
        h_BT = torch.stack(outputs, dim=1)
        return {Columns.ACTION_DIST_INPUTS: self.pi(h_BT), Columns.VF_PREDS: self.vf(h_BT)[..., 0]}


def sequence_batch(seed: int = 0) -> dict[str, Any]:
    """Three sequences of 4, 2 and 3 steps, zero-padded to T=4."""
    rng = np.random.default_rng(seed)
    b, t = 3, 4
    seq_lens = np.array([4, 2, 3])
    mask = np.arange(t)[None, :] < seq_lens[:, None]
    return {
        Columns.OBS: rng.normal(size=(b, t, 2)).astype(np.float32) * mask[..., None],
        Columns.ACTIONS: rng.integers(0, 3, (b, t)) * mask,
        Columns.ACTION_LOGP: np.log(rng.uniform(0.2, 0.5, (b, t))) * mask,
        Columns.ADVANTAGES: rng.normal(size=(b, t)) * mask,
        Columns.VALUE_TARGETS: rng.normal(size=(b, t)) * mask,
        Columns.STATE_IN: {"h": rng.normal(size=(b, 4)).astype(np.float32)},
        Columns.LOSS_MASK: mask,
        Columns.SEQ_LENS: seq_lens,
    }


def gru_learner(config: PPOConfig | None = None) -> TorchPPOLearner:
    return TorchPPOLearner(
        GRUPolicy(gym.spaces.Box(-5, 5, (2,)), gym.spaces.Discrete(3)), config or PPOConfig(entropy_coeff=0.1)
    )


class TestMaskedTimeDimensionLoss:
    def test_padded_steps_change_neither_loss_nor_gradients(self) -> None:
        batch = sequence_batch()
        terms, grads = gradients_of(gru_learner(), batch)
        padded = ~batch[Columns.LOSS_MASK]
        rng = np.random.default_rng(1)
        perturbed = dict(batch)
        for k, scale in ((Columns.OBS, 9.0), (Columns.ACTION_LOGP, 50.0), (Columns.ADVANTAGES, 1e6)):
            noise = rng.normal(size=batch[k].shape).astype(batch[k].dtype) * scale
            perturbed[k] = np.where(padded.reshape(padded.shape + (1,) * (batch[k].ndim - 2)), noise, batch[k])
        perturbed[Columns.VALUE_TARGETS] = np.where(padded, 1e9, batch[Columns.VALUE_TARGETS])
        perturbed[Columns.ACTIONS] = np.where(padded, 2, batch[Columns.ACTIONS])
        terms_p, grads_p = gradients_of(gru_learner(), perturbed)
        assert terms_p == terms
        for k, v in grads.items():
            np.testing.assert_array_equal(grads_p[k], v, err_msg=k)

    def test_means_are_over_the_real_steps_only(self) -> None:
        batch = sequence_batch()
        learner = gru_learner()
        terms = gradients_of(learner, batch)[0]
        tensors = {k: torch.as_tensor(batch[k]) for k in (Columns.OBS, Columns.SEQ_LENS)}
        with torch.no_grad():
            values = learner.module.forward_train(
                {**tensors, Columns.STATE_IN: {"h": torch.as_tensor(batch["state_in"]["h"])}}
            )[Columns.VF_PREDS].numpy()
        mask = batch[Columns.LOSS_MASK]
        want = ((values - batch[Columns.VALUE_TARGETS]) ** 2)[mask].mean()
        assert terms["vf_loss"] == pytest.approx(want, rel=1e-5)

    def test_minibatches_are_rows_of_sequences(self) -> None:
        learner = gru_learner()
        assert learner.set_batch(batch=sequence_batch()) == 9  # the real steps of its 3 sequences
        metrics = learner.update_from_batch(sequence_batch())
        assert metrics.batch_size == 9 and metrics.num_gradient_steps == 8  # one minibatch per epoch
        # minibatch_size counts steps: ceil(9 / 4) = 3 minibatches; ceil(9 / 2) = 5 is capped at the 3
        # sequences (a minibatch is whole sequences); 9 steps fit one minibatch of 16.
        for size, expected in ((4, 3), (2, 3), (16, 1)):
            learner = gru_learner(PPOConfig(minibatch_size=size, num_epochs=1))
            assert learner.update_from_batch(sequence_batch()).num_gradient_steps == expected

    def test_a_time_dimension_batch_without_a_loss_mask_is_refused(self) -> None:
        learner = gru_learner()
        learner.set_batch(batch={k: v for k, v in sequence_batch().items() if k != Columns.LOSS_MASK})
        learner.plan_epoch(1)
        with pytest.raises(ConfigError, match=r"the train batch lacks \['loss_mask'\]"):
            learner.compute_gradients(0)


def dqn_problem(seed: int = 0, activation: str = "relu") -> tuple[QModule, dict[str, np.ndarray], dict[str, Any]]:
    spaces = (OBS_SPACE, gym.spaces.Discrete(4))
    module = QModule(*spaces, hidden_sizes=(5, 6), seed=seed, activation=activation)
    target = QModule(*spaces, hidden_sizes=(5, 6), seed=seed + 7, activation=activation).params
    rng = np.random.default_rng(seed)
    n = 12
    batch = {
        Columns.OBS: rng.normal(size=(n, 3)),
        Columns.NEXT_OBS: rng.normal(size=(n, 3)),
        Columns.ACTIONS: rng.integers(0, 4, n),
        Columns.REWARDS: rng.normal(size=n) * 3,
        Columns.TERMINATEDS: rng.random(n) < 0.3,
        Columns.N_STEP: rng.integers(1, 4, n),
        Columns.WEIGHTS: rng.uniform(0.5, 1.0, n),
    }
    return module, target, batch


def torch_dqn_learner(
    module: QModule, target: dict[str, np.ndarray], config: DQNConfig, activation: str = "relu"
) -> TorchDQNLearner:
    torch_module = TorchQModule(OBS_SPACE, gym.spaces.Discrete(4), hidden_sizes=(5, 6), activation=activation)
    torch_module.set_state(to_torch_names(module.get_state()))
    learner = TorchDQNLearner(torch_module, config)
    learner.set_state({**learner.get_state(), "target": to_torch_names(target)})
    return learner


class TestDQN:
    @pytest.mark.parametrize("activation", ["relu", "tanh"])
    @pytest.mark.parametrize("double_q", [True, False])
    def test_loss_terms_gradients_and_td_errors_equal_dqn_loss_and_grads(self, double_q: bool, activation: str) -> None:
        module, target, batch = dqn_problem(activation=activation)
        config = DQNConfig(double_q=double_q, huber_delta=0.5, gamma=0.9)
        want_terms, want_grads, want_td = dqn_loss_and_grads(
            module.params, target, batch, gamma=0.9, huber_delta=0.5, double_q=double_q, activation=activation
        )
        terms, grads, rows = torch_dqn_learner(module, target, config, activation).compute_gradients(batch)
        assert rows == 12
        np.testing.assert_allclose(terms.pop("td_errors"), want_td, atol=1e-5)
        assert terms == pytest.approx(want_terms, abs=1e-5)
        for k, v in to_torch_names(want_grads).items():
            np.testing.assert_allclose(grads[k], v, atol=1e-5, err_msg=k)

    def test_target_network_is_copied_every_target_update_every_steps(self) -> None:
        module, target, batch = dqn_problem()
        learner = torch_dqn_learner(module, target, DQNConfig(target_update_every=2))
        metrics = learner.update_from_batch(batch)
        assert metrics.num_updates == 1 and metrics.td_errors.shape == (12,)
        assert not np.array_equal(learner.get_state()["target"]["q.0.weight"], learner.module.get_state()["q.0.weight"])
        learner.update_from_batch(batch)
        state = learner.get_state()
        for k, v in state["target"].items():
            np.testing.assert_array_equal(v, state["module"][k])

    def test_state_round_trip_through_a_checkpoint(self, tmp_path: Path) -> None:
        module, target, batch = dqn_problem()
        a = torch_dqn_learner(module, target, DQNConfig(target_update_every=3))
        a.update_from_batch(batch)
        state = a.get_state()
        assert is_plain(state) and sorted(state) == ["module", "num_updates", "optimizer", "target"]
        b = TorchDQNLearner(
            TorchQModule(OBS_SPACE, gym.spaces.Discrete(4), hidden_sizes=(5, 6), seed=5),
            DQNConfig(target_update_every=3),
        )
        b.set_state(round_trip_through_a_checkpoint(state, tmp_path))
        for learner in (a, b):
            for _ in range(3):
                learner.update_from_batch(batch)
        for part in ("module", "target"):
            for k, v in a.get_state()[part].items():
                np.testing.assert_array_equal(b.get_state()[part][k], v, err_msg=f"{part} {k}")

    def test_set_state_refuses_a_target_of_another_shape(self) -> None:
        module, target, _ = dqn_problem()
        learner = torch_dqn_learner(module, target, DQNConfig())
        state = learner.get_state()
        with pytest.raises(ValueError, match=r"TorchDQNLearner.target.set_state: keys differ"):
            learner.set_state({**state, "target": {k: v for k, v in state["target"].items() if k != "q.0.bias"}})

    def test_discrete_start_actions_are_shifted_to_columns(self) -> None:
        spaces = (OBS_SPACE, gym.spaces.Discrete(4, start=2))
        module, target, batch = dqn_problem()
        torch_module = TorchQModule(*spaces, hidden_sizes=(5, 6))
        torch_module.set_state(to_torch_names(module.get_state()))
        learner = TorchDQNLearner(torch_module)
        learner.set_state({**learner.get_state(), "target": to_torch_names(target)})
        shifted = {**batch, Columns.ACTIONS: batch[Columns.ACTIONS] + 2}
        want = dqn_loss_and_grads(module.params, target, batch)[0]
        assert learner.compute_gradients(shifted)[0]["loss"] == pytest.approx(want["loss"], abs=1e-5)


def test_a_local_learner_group_trains_a_torch_module_on_cartpole_episodes() -> None:
    config = EnvRunnerConfig(
        env="CartPole-v1",
        module_class=TorchMLPModule,
        num_envs_per_env_runner=2,
        rollout_fragment_length=64,
        seed=0,
    )
    runner = EnvRunner(config)
    spaces = (runner.observation_space, runner.action_space)
    group = LearnerGroup(
        lambda: TorchMLPModule(*spaces, seed=0),
        PPOConfig(num_epochs=2, minibatch_size=64),
        learner_class=TorchPPOLearner,
    )
    before = group.get_weights()
    runner.set_state({"module": before})
    episodes = runner.sample()
    metrics = group.update_from_episodes(episodes)
    after = group.get_weights()
    assert metrics.batch_size == 128 and metrics.num_gradient_steps == 4 and metrics.weights_version == 1
    assert np.isfinite(metrics.total_loss) and metrics.learner_connector_s > 0
    assert after.keys() == before.keys() and all(not np.array_equal(after[k], before[k]) for k in before)
    runner.set_state({"module": after})  # the new weights go back to the runner, which samples on
    assert sum(len(e) for e in runner.sample()) == 128


def test_a_torch_learner_sets_its_processes_intra_op_threads() -> None:
    before = torch.get_num_threads()
    try:
        TorchPPOLearner(TorchMLPModule(OBS_SPACE, gym.spaces.Discrete(2)), PPOConfig(num_torch_threads=2))
        assert torch.get_num_threads() == 2
        TorchDQNLearner(TorchQModule(OBS_SPACE, gym.spaces.Discrete(2)), DQNConfig(num_torch_threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
