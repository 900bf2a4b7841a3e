"""PPO loss gradients against finite differences, and the loss terms."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from learner.ppo_loss import ppo_loss_and_grads
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


@pytest.mark.parametrize("entropy_coeff", [0.0, 0.05])
def test_gradients_match_finite_differences(entropy_coeff: float) -> None:
    params, batch = tiny_problem()
    kwargs = {"clip_param": 0.3, "vf_coeff": 0.7, "entropy_coeff": entropy_coeff}
    _, grads = ppo_loss_and_grads(params, batch, **kwargs)
    eps = 1e-6
    for key, value in params.items():
        if key not in grads:
            continue
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


def test_loss_terms() -> None:
    params, batch = tiny_problem(1)
    terms, _ = ppo_loss_and_grads(params, batch, vf_coeff=0.5, entropy_coeff=0.1)
    assert terms["total_loss"] == pytest.approx(terms["policy_loss"] + 0.5 * terms["vf_loss"] - 0.1 * terms["entropy"])
    assert 0.0 < terms["entropy"] <= np.log(4) + 1e-9 and 0.0 <= terms["clip_fraction"] <= 1.0
