"""Action masks by default: the numpy PPO loss masks its logits (finite differences pin its gradient),
log-probabilities and entropy come from the masked logits (numpy and torch), DQN's targets take the
best legal next action (numpy and torch), and PPO, APPO and DQN train on masked envs from train
batches whose actions are all legal."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from learner.dqn import DQNLearner
from learner.dqn_training_config import DQNTrainingConfig
from learner.learner import Learner, PPOConfig
from learner.ppo_loss import ppo_loss_and_grads
from learner.train import PPOTrainingConfig, train_ppo
from learner.train_dqn import train_dqn
from ray_sampler.data.columns import Columns
from ray_sampler.data.spaces import flatten_batch
from ray_sampler.modules.action_masking import legal_actions
from ray_sampler.modules.mlp import forward
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.modules.q_module import QModule
from ray_sampler.sampling.config import EnvRunnerConfig, EnvRunnerGroupConfig
from ray_sampler.sampling.env_runner import EnvRunner
from replay.actor import ReplayConfig
from tests.ray_sampler.modules.masked_env import MaskedPickEnv

OBS = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "action_mask": gym.spaces.MultiBinary(4)})
ACT = gym.spaces.Discrete(4)


def masks(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` masks over 4 actions, one to three legal; the last action is never legal."""
    mask = (rng.random((n, 4)) < 0.5).astype(np.int8)
    mask[np.arange(n), rng.integers(0, 3, n)] = 1
    mask[:, 3] = 0
    return mask


def masked_problem(seed: int = 0) -> tuple[slice, dict[str, np.ndarray], dict[str, Any], np.ndarray]:
    """(the mask's slice, float64 parameters, a train batch of legal actions, the masks)."""
    module = MLPModule(OBS, ACT, hidden_sizes=(5, 4), seed=seed)
    assert module.action_mask_slice is not None
    params = {k: v.astype(np.float64) for k, v in module.get_state().items()}
    rng = np.random.default_rng(seed)
    params["pi.2.w"] = rng.normal(0, 0.5, params["pi.2.w"].shape)  # a policy that is not near-uniform
    n = 16
    mask = masks(n, rng)
    obs = flatten_batch(OBS, {"observation": rng.normal(size=(n, 3)), "action_mask": mask}).astype(np.float64)
    batch = {
        Columns.OBS: obs,
        Columns.ACTIONS: np.array([rng.choice(np.flatnonzero(m)) for m in mask]),
        Columns.ACTION_LOGP: np.log(rng.uniform(0.2, 0.6, n)),
        Columns.ADVANTAGES: rng.normal(size=n),
        Columns.VALUE_TARGETS: rng.normal(size=n),
    }
    return module.action_mask_slice, params, batch, mask


class TestNumpyPPOLoss:
    @pytest.mark.parametrize("clipped", [True, False], ids=["clipped", "pg"])
    @pytest.mark.parametrize("entropy_coeff", [0.0, 0.05])
    def test_masked_gradients_match_finite_differences(self, clipped: bool, entropy_coeff: float) -> None:
        mask_slice, params, batch, _ = masked_problem()
        kwargs: dict[str, Any] = {"clipped": clipped, "entropy_coeff": entropy_coeff, "action_mask_slice": mask_slice}
        _, grads = ppo_loss_and_grads(params, batch, **kwargs)
        eps = 1e-6
        for key in ("pi.0.w", "pi.2.w", "pi.2.b", "vf.0.w"):
            value = params[key]
            for idx in range(value.size):  # every entry of the policy's last layer, the masked action's too
                at = np.unravel_index(idx, value.shape)
                old = value[at]
                value[at] = old + eps
                up = ppo_loss_and_grads(params, batch, **kwargs)[0]["total_loss"]
                value[at] = old - eps
                down = ppo_loss_and_grads(params, batch, **kwargs)[0]["total_loss"]
                value[at] = old
                assert grads[key][at] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-7), (key, at)

    def test_a_masked_logit_gets_no_gradient_even_for_an_illegal_action_in_the_batch(self) -> None:
        mask_slice, params, batch, _ = masked_problem()
        batch[Columns.ACTIONS][:4] = 3  # never legal; the plain policy gradient still weighs these rows
        terms, grads = ppo_loss_and_grads(params, batch, clipped=False, action_mask_slice=mask_slice)
        assert np.isfinite(terms["total_loss"])
        np.testing.assert_allclose(grads["pi.2.b"][3], 0.0, atol=1e-12)
        np.testing.assert_allclose(grads["pi.2.w"][:, 3], 0.0, atol=1e-12)
        assert np.abs(grads["pi.2.b"][:3]).max() > 1e-3

    def test_log_probabilities_and_entropy_come_from_the_masked_logits(self) -> None:
        mask_slice, params, batch, mask = masked_problem()
        params["pi.2.w"][:] = 0.0  # logits all 0: uniform over each row's legal actions
        batch[Columns.ACTION_LOGP] = np.zeros(16)
        terms, _ = ppo_loss_and_grads(params, batch, action_mask_slice=mask_slice)
        log_k = np.log(mask.sum(1))
        assert terms["entropy"] == pytest.approx(log_k.mean(), rel=1e-9)
        assert terms["mean_kl_approx"] == pytest.approx(log_k.mean(), rel=1e-9)  # logp_old - logp = log k
        unmasked, _ = ppo_loss_and_grads(params, batch)
        assert unmasked["entropy"] == pytest.approx(np.log(4))  # the same batch without its mask

    def test_the_learner_masks_its_loss_and_builds_flat_batches_of_legal_actions(self) -> None:
        runner = EnvRunner(EnvRunnerConfig(env=MaskedPickEnv, num_envs_per_env_runner=2, rollout_fragment_length=64))
        learner = Learner(runner.module, PPOConfig(num_epochs=1, minibatch_size=64, seed=0))
        batch = learner.build_batch(runner.sample())
        obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
        assert obs.shape == (128, 12)  # the whole flattened dict: action_mask (6), then observation (6)
        assert legal_actions(obs, slice(0, 6))[np.arange(128), actions].all()
        learner.module.params["pi.2.w"][:] = 0.0  # uniform over the 3 legal actions of every step
        learner.set_batch(batch=batch)
        learner.plan_epoch(1)
        terms, _, _ = learner.compute_gradients(0)
        assert terms["entropy"] == pytest.approx(np.log(3), rel=1e-6)


def test_the_torch_loss_takes_log_probabilities_and_entropy_from_the_masked_logits() -> None:
    import torch

    from learner.torch_learner import ppo_loss
    from ray_sampler.modules.torch_mlp import TorchMLPModule
    from ray_sampler.modules.torch_module import to_tensor

    _, _, batch, mask = masked_problem()
    module = TorchMLPModule(OBS, ACT, hidden_sizes=(5, 4), seed=0)
    with torch.no_grad():
        module.pi[-1].weight.zero_()
    batch[Columns.ACTION_LOGP] = np.zeros(16)
    terms, total = ppo_loss(module, to_tensor(batch), PPOConfig())
    log_k = np.log(mask.sum(1))
    assert terms["entropy"] == pytest.approx(log_k.mean(), rel=1e-5)
    assert terms["mean_kl_approx"] == pytest.approx(log_k.mean(), rel=1e-5)
    total.backward()
    bias_grad = module.pi[-1].bias.grad
    assert bias_grad is not None and abs(float(bias_grad[3])) < 1e-12 and bool(bias_grad[:3].abs().max() > 1e-4)


def dqn_batch(n: int = 64, seed: int = 0) -> tuple[dict[str, Any], np.ndarray]:
    """A replay batch of Dict observations (as the replay gives them) and the next masks."""
    rng = np.random.default_rng(seed)
    obs_mask, next_mask = masks(n, rng), masks(n, rng)
    next_mask[:, 3] = rng.random(n) < 0.5  # the last action legal in some next states
    next_mask[np.arange(n), 0] |= ~next_mask.any(1)
    batch = {
        Columns.OBS: {"observation": rng.normal(size=(n, 3)), "action_mask": obs_mask},
        Columns.NEXT_OBS: {"observation": rng.normal(size=(n, 3)), "action_mask": next_mask},
        Columns.ACTIONS: np.array([rng.choice(np.flatnonzero(m)) for m in obs_mask]),
        Columns.REWARDS: rng.normal(size=n),
        Columns.TERMINATEDS: np.zeros(n, bool),
    }
    return batch, next_mask


def q_functions(module: Any) -> tuple[Any, Any]:
    """(masked Q-values, the network's raw Q-values) of flat observations, as numpy."""
    if isinstance(module, QModule):
        return module.q_values, lambda x: forward(module.params, "q", x, module.activation)[0]
    import torch

    from ray_sampler.modules.torch_mlp import Q_VALUES, run_mlp

    def masked(x: np.ndarray) -> np.ndarray:
        return module.forward_train({Columns.OBS: torch.as_tensor(x)})[Q_VALUES].detach().numpy()

    def raw(x: np.ndarray) -> np.ndarray:
        return run_mlp(module.q, torch.as_tensor(x), module.activation).detach().numpy()

    return masked, raw


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_dqn_targets_take_the_best_legal_next_action(framework: str) -> None:
    if framework == "torch":
        from learner.torch_learner import TorchDQNLearner
        from ray_sampler.modules.torch_mlp import TorchQModule

        module: Any = TorchQModule(OBS, ACT, hidden_sizes=(8,), seed=0)
        learner: Any = TorchDQNLearner(module)
    else:
        module = QModule(OBS, ACT, hidden_sizes=(8,), seed=0)
        learner = DQNLearner(module)
    q_values, raw_q_values = q_functions(module)
    batch, next_mask = dqn_batch()
    obs, next_obs = flatten_batch(OBS, batch[Columns.OBS]), flatten_batch(OBS, batch[Columns.NEXT_OBS])
    rows = np.arange(64)
    assert not next_mask[rows, raw_q_values(next_obs).argmax(1)].all()  # the plain max would break the rules
    q_next = q_values(next_obs)  # the target network starts as a copy: it values what the online one picks
    best = q_next.argmax(1)
    assert next_mask[rows, best].all()
    target = batch[Columns.REWARDS] + 0.99 * q_next[rows, best]
    td = learner.compute_gradients(batch)[0]["td_errors"]
    np.testing.assert_allclose(td, q_values(obs)[rows, batch[Columns.ACTIONS]] - target, rtol=1e-4, atol=1e-5)


def test_a_saved_policy_of_a_masked_env_keeps_to_the_mask(tmp_path: Any) -> None:
    from ray_sampler.policy import Policy
    from ray_sampler.sampling.runner_build import build_policy

    env = MaskedPickEnv()
    saved = build_policy(EnvRunnerConfig(env=MaskedPickEnv, seed=0), env.observation_space, env.action_space)
    policy = Policy.from_checkpoint(saved.save(tmp_path / "policy"))
    observations = [env.reset(seed=i)[0] for i in range(100)]
    actions = [policy.compute_single_action(o, explore=explore)[0] for o in observations for explore in (False, True)]
    allowed = [o["action_mask"] for o in observations for _ in (False, True)]
    assert all(m[int(a)] for m, a in zip(allowed, actions, strict=True))


def tictactoe(config: Any) -> Any:
    from pettingzoo.classic import tictactoe_v3

    return tictactoe_v3.env()


@pytest.fixture
def train_batches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[np.ndarray, np.ndarray]]:
    """(legal actions [N, n], actions [N]) of every train batch the driver's learners build or pull."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    build_batch, pull = Learner.build_batch, DQNLearner.pull_from_replay

    def recording_build_batch(self: Learner, episodes: list[Any]) -> dict[str, Any]:
        batch = build_batch(self, episodes)
        mask_slice = self.module.action_mask_slice
        seen.append((legal_actions(batch[Columns.OBS], mask_slice), np.asarray(batch[Columns.ACTIONS])))
        return batch

    def recording_pull(self: DQNLearner, *args: Any, **kwargs: Any) -> int:
        rows = pull(self, *args, **kwargs)
        for batch in self.pulled_batches:
            legal = np.asarray(batch[Columns.OBS]["action_mask"]) > 0  # replay batches hold the Dict observations
            seen.append((legal, np.asarray(batch[Columns.ACTIONS])))
        return rows

    monkeypatch.setattr(Learner, "build_batch", recording_build_batch)
    monkeypatch.setattr(DQNLearner, "pull_from_replay", recording_pull)
    return seen


def assert_all_legal(batches: list[tuple[np.ndarray, np.ndarray]], min_steps: int) -> None:
    legal = np.concatenate([m for m, _ in batches])
    actions = np.concatenate([a for _, a in batches])
    assert len(actions) >= min_steps and legal[np.arange(len(actions)), actions].all()


def ppo_config(env: Any, **kwargs: Any) -> PPOTrainingConfig:
    runner = EnvRunnerConfig(env=env, num_envs_per_env_runner=2, rollout_fragment_length=32, seed=0)
    group = EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5)
    ppo = PPOConfig(num_epochs=2, minibatch_size=32, seed=0)
    return PPOTrainingConfig(env_runner=runner, env_runner_group=group, ppo=ppo, target_return=None, **kwargs)


@pytest.mark.usefixtures("ray_session")
def test_ppo_trains_tictactoe_on_legal_moves_only(train_batches: list) -> None:
    result = train_ppo(ppo_config(tictactoe, max_iterations=2), log=lambda line: None)
    assert result.iterations == 2
    assert_all_legal(train_batches, 100)  # both players' steps of 2 x 64 env steps (less those still hanging)
    # An illegal move ends a game with -1 for the offender only; legal games sum to 0.
    assert result.mean_return == 0.0


@pytest.mark.usefixtures("ray_session")
def test_appo_trains_a_masked_env_on_legal_actions_only(train_batches: list) -> None:
    result = train_ppo(ppo_config(MaskedPickEnv, max_iterations=3, optimizer="async_samples"), log=lambda line: None)
    assert result.iterations == 3
    assert_all_legal(train_batches, 3 * 64)
    assert result.mean_return >= 0.0  # an illegal action would cost -1 and end the episode


@pytest.mark.usefixtures("ray_session")
def test_dqn_trains_tictactoe_on_legal_moves_only(train_batches: list) -> None:
    runner = EnvRunnerConfig(
        env=tictactoe, num_envs_per_env_runner=2, rollout_fragment_length=16, seed=0, module_class=QModule,
        module_config={"hidden_sizes": (32,), "seed": 0},
    )  # fmt: skip
    cfg = DQNTrainingConfig(
        env_runner=runner,
        env_runner_group=EnvRunnerGroupConfig(num_env_runners=1, num_cpus_per_env_runner=0.5),
        replay=ReplayConfig(capacity_env_steps=5_000, min_size_to_sample=64, prioritized=False, seed=0),
        batch_size=32,
        max_env_steps=400,
        target_return=None,
    )
    result = train_dqn(cfg, log=lambda line: None)
    assert result.env_steps >= 400
    assert_all_legal(train_batches, 5 * 32)
    assert result.mean_return == 0.0
