"""PPO loss gradients against finite differences (categorical and Gaussian policies), and the loss terms."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from learner.ppo_loss import ppo_loss_and_grads
from ray_sampler.modules.distributions import Categorical, DiagGaussian
from ray_sampler.modules.mlp import forward
from ray_sampler.modules.mlp_module import MLPModule


def tiny_problem(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    module = MLPModule(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), hidden_sizes=(5, 4), seed=seed)
    params = {k: v.astype(np.float64) for k, v in module.get_state().items()}
    rng = np.random.default_rng(seed)
    params["pi.2.w"] = rng.normal(0, 0.5, params["pi.2.w"].shape)  # a policy that is not near-uniform
    n = 16
    batch = {
        "obs": rng.normal(size=(n, 3)),
        "actions": rng.integers(0, 4, n),
        "action_logp": np.log(rng.uniform(0.1, 0.5, n)),
        "advantages": rng.normal(size=n),
        "value_targets": rng.normal(size=n),
    }
    return params, batch


def gaussian_problem(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A 2-D Box action space: the head gives the mean; ``pi.log_std`` is a free parameter."""
    module = MLPModule(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), hidden_sizes=(5, 4), seed=seed)
    params = {k: v.astype(np.float64) for k, v in module.get_state().items()}
    rng = np.random.default_rng(seed)
    params["pi.2.w"] = rng.normal(0, 0.5, params["pi.2.w"].shape)  # means that vary with the observation
    params["pi.log_std"] = np.array([-0.3, 0.2])
    n = 16
    batch = {
        "obs": rng.normal(size=(n, 3)),
        "actions": rng.normal(0, 1.5, (n, 2)),  # some beyond the bounds: the loss scores them as sampled
        "action_logp": rng.normal(-2.5, 0.3, n),
        "advantages": rng.normal(size=n),
        "value_targets": rng.normal(0, 2, n),
    }
    return params, batch


def assert_gradients_match_finite_differences(
    params: dict[str, np.ndarray], batch: dict[str, np.ndarray], **kwargs: Any
) -> None:
    _, grads = ppo_loss_and_grads(params, batch, **kwargs)
    assert grads.keys() == params.keys()
    eps = 1e-6
    for key, value in params.items():
        for idx in range(0, value.size, max(1, value.size // 7)):
            at = np.unravel_index(idx, value.shape)  # in place whatever the array's memory order
            old = value[at]
            value[at] = old + eps
            up = ppo_loss_and_grads(params, batch, **kwargs)[0]["total_loss"]
            value[at] = old - eps
            down = ppo_loss_and_grads(params, batch, **kwargs)[0]["total_loss"]
            value[at] = old
            numeric = (up - down) / (2 * eps)
            assert grads[key][at] == pytest.approx(numeric, rel=1e-4, abs=1e-7), (key, idx)


@pytest.mark.parametrize("entropy_coeff", [0.0, 0.05])
def test_gradients_match_finite_differences(entropy_coeff: float) -> None:
    params, batch = tiny_problem()
    assert_gradients_match_finite_differences(params, batch, clip_param=0.3, vf_coeff=0.7, entropy_coeff=entropy_coeff)


@pytest.mark.parametrize("problem", [tiny_problem, gaussian_problem], ids=["categorical", "gaussian"])
def test_the_plain_policy_gradient_matches_finite_differences_and_is_the_mean_logp_times_advantage(
    problem: Any,
) -> None:
    params, batch = problem()
    assert_gradients_match_finite_differences(params, batch, vf_coeff=0.7, entropy_coeff=0.05, clipped=False)
    # With the value and entropy terms off, the loss is -mean(logp * A), whatever the sampling policy's logp.
    terms, _ = ppo_loss_and_grads(params, batch, vf_coeff=0.0, clipped=False)
    shifted, _ = ppo_loss_and_grads(params, {**batch, "action_logp": batch["action_logp"] + 3.0}, clipped=False)
    assert shifted["policy_loss"] == terms["policy_loss"]
    module_logp = _logp_of(params, batch)
    assert terms["policy_loss"] == pytest.approx(-np.mean(module_logp * batch["advantages"]), rel=1e-12)


def _logp_of(params: dict[str, np.ndarray], batch: dict[str, np.ndarray]) -> np.ndarray:
    """log pi(a|s) of the batch's actions under ``params`` (float64), through the modules' own distributions."""
    head, _ = forward(params, "pi", np.asarray(batch["obs"], np.float64))
    if "pi.log_std" not in params:
        return Categorical(head).logp(batch["actions"])
    log_std = np.broadcast_to(params["pi.log_std"], head.shape)
    return DiagGaussian(np.concatenate([head, log_std], axis=-1)).logp(batch["actions"])


@pytest.mark.parametrize(
    ("entropy_coeff", "vf_clip_param"), [(0.0, None), (0.05, None), (0.05, 1.5)], ids=["plain", "entropy", "vf_clip"]
)
def test_gaussian_gradients_match_finite_differences(entropy_coeff: float, vf_clip_param: float | None) -> None:
    params, batch = gaussian_problem()
    assert_gradients_match_finite_differences(
        params, batch, clip_param=0.3, vf_coeff=0.7, entropy_coeff=entropy_coeff, vf_clip_param=vf_clip_param
    )


def test_gaussian_terms_score_the_actions_as_diag_gaussian_does() -> None:
    params, batch = gaussian_problem(1)
    module = MLPModule(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), hidden_sizes=(5, 4))
    module.set_state(params)
    dist = DiagGaussian(module.forward_exploration({"obs": batch["obs"]})["action_dist_inputs"].astype(np.float64))
    batch["action_logp"] = dist.logp(batch["actions"])  # the behaviour policy is the current one: ratio 1
    terms, _ = ppo_loss_and_grads(params, batch, clip_param=0.2)
    assert terms["mean_kl_approx"] == pytest.approx(0.0, abs=1e-5) and terms["clip_fraction"] == 0.0
    assert terms["entropy"] == pytest.approx(float(dist.entropy()[0]), rel=1e-6)  # float32 module
    assert terms["policy_loss"] == pytest.approx(-batch["advantages"].mean(), rel=1e-5)


def test_vf_clip_param_caps_each_squared_error() -> None:
    params, batch = gaussian_problem(2)
    batch["value_targets"][0] = 1e3  # one far-off target: its error counts as the cap
    unclipped, _ = ppo_loss_and_grads(params, batch)
    capped, grads = ppo_loss_and_grads(params, batch, vf_clip_param=1.0)
    _, grads_without_it = ppo_loss_and_grads(params, {k: v[1:] for k, v in batch.items()}, vf_clip_param=1.0)
    assert capped["vf_loss"] <= 1.0 and unclipped["vf_loss"] > 1e6 / 16
    # The capped step gives no value gradient: the sum over the other 15 rows, scaled by 15/16.
    np.testing.assert_allclose(grads["vf.2.b"], grads_without_it["vf.2.b"] * 15 / 16, rtol=1e-6)


def test_loss_terms() -> None:
    params, batch = tiny_problem(1)
    terms, _ = ppo_loss_and_grads(params, batch, vf_coeff=0.5, entropy_coeff=0.1)
    assert terms["total_loss"] == pytest.approx(terms["policy_loss"] + 0.5 * terms["vf_loss"] - 0.1 * terms["entropy"])
    assert 0.0 < terms["entropy"] <= np.log(4) + 1e-9 and 0.0 <= terms["clip_fraction"] <= 1.0


def test_centralized_critic_gradients_match_finite_differences() -> None:
    """Observations {"own", "global"}: the policy on own (3), the value head on global (5)."""
    from ray_sampler.modules.centralized_critic import CentralizedCriticMLPModule

    space = gym.spaces.Dict({"own": gym.spaces.Box(-1, 1, (3,)), "global": gym.spaces.Box(-1, 1, (5,))})
    module = CentralizedCriticMLPModule(space, gym.spaces.Discrete(4), hidden_sizes=(5, 4), seed=0)
    params = {k: v.astype(np.float64) for k, v in module.get_state().items()}
    _, batch = tiny_problem()
    rng = np.random.default_rng(1)
    batch = {**batch, "obs": {"own": batch["obs"], "global": rng.normal(size=(16, 5))}}
    assert params["vf.0.w"].shape == (5, 5) and params["pi.0.w"].shape == (3, 5)
    assert_gradients_match_finite_differences(params, batch, clip_param=0.3, vf_coeff=0.7, entropy_coeff=0.01)  # type: ignore[arg-type]
