"""DQN: loss gradients against finite differences, the double-Q target against a loop, the target network and
DQNConfig's checks (QModule is in tests/ray_sampler/modules/test_q_module.py)."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from learner.dqn import DQNConfig, DQNLearner, QModule, dqn_loss_and_grads
from ray_sampler.errors import ConfigError
from ray_sampler.modules.mlp import forward


def problem(seed: int = 0, activation: str = "relu") -> tuple[QModule, dict[str, np.ndarray], dict[str, np.ndarray]]:
    spaces = (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4))
    module = QModule(*spaces, hidden_sizes=(5, 6), seed=seed, activation=activation)
    target = QModule(*spaces, hidden_sizes=(5, 6), seed=seed + 7, activation=activation).params
    rng = np.random.default_rng(seed)
    n = 12
    batch = {
        "obs": rng.normal(size=(n, 3)),
        "next_obs": rng.normal(size=(n, 3)),
        "actions": rng.integers(0, 4, n),
        "rewards": rng.normal(size=n) * 3,
        "terminateds": rng.random(n) < 0.3,
        "n_step": rng.integers(1, 4, n),
        "weights": rng.uniform(0.5, 1.0, n),
    }
    return module, target, batch


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("double_q", [True, False])
def test_gradients_match_finite_differences(double_q: bool, activation: str) -> None:
    module, target, batch = problem(activation=activation)
    params = {k: v.astype(np.float64) for k, v in module.params.items()}
    loss = functools.partial(
        dqn_loss_and_grads, target_params=target, batch=batch, double_q=double_q, huber_delta=0.5, activation=activation
    )
    _, grads, _ = loss(params)
    eps = 1e-6
    for key, value in params.items():
        for idx in range(0, value.size, max(1, value.size // 5)):
            at = np.unravel_index(idx, value.shape)  # in place whatever the array's memory order
            old = value[at]
            value[at] = old + eps
            up = loss(params)[0]["loss"]
            value[at] = old - eps
            down = loss(params)[0]["loss"]
            value[at] = old
            assert grads[key][at] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-8)


def test_double_q_target_equals_a_plain_loop() -> None:
    module, target, batch = problem(1)
    gamma = 0.9
    _, _, td = dqn_loss_and_grads(module.params, target, batch, gamma=gamma)  # float32, as in training

    def as64(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: v.astype(np.float64) for k, v in params.items()}

    def online(x: np.ndarray) -> np.ndarray:
        return forward(as64(module.params), "q", x[None], "relu")[0][0]

    def frozen(x: np.ndarray) -> np.ndarray:
        return forward(as64(target), "q", x[None], "relu")[0][0]

    for i in range(len(batch["obs"])):
        best = int(np.argmax(online(batch["next_obs"][i])))
        bootstrap = 0.0 if batch["terminateds"][i] else gamma ** batch["n_step"][i] * frozen(batch["next_obs"][i])[best]
        expected = online(batch["obs"][i])[batch["actions"][i]] - (batch["rewards"][i] + bootstrap)
        assert td[i] == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_target_network_is_copied_every_k_updates() -> None:
    module, _, batch = problem(2)
    learner = DQNLearner(module, DQNConfig(target_update_every=3, lr=1e-2))
    initial = {k: v.copy() for k, v in learner.target_params.items()}
    learner.update_from_batch(batch)
    learner.update_from_batch(batch)
    assert all(np.array_equal(initial[k], learner.target_params[k]) for k in initial)
    metrics = learner.update_from_batch(batch)
    assert metrics.num_updates == 3 and len(metrics.td_errors) == 12
    assert all(np.array_equal(module.params[k], learner.target_params[k]) for k in initial)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, "'lr' must be a finite number > 0"),
        ({"lr": float("nan")}, "'lr' must be a finite number > 0"),
        ({"huber_delta": -1.0}, "'huber_delta' must be a finite number > 0"),
        ({"grad_clip": 0}, "'grad_clip' must be a finite number > 0 or None"),
        ({"target_update_every": 0}, "'target_update_every' must be an int >= 1"),
        ({"gamma": 1.5}, "'gamma' must be in \\[0, 1\\]"),
    ],
)
def test_bad_dqn_config_raises(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DQNConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target_update_every": True}, r"'target_update_every' must be an int >= 1 \(got True\)"),
        ({"lr": True}, r"'lr' must be a finite number > 0 \(got True\)"),
        ({"double_q": 1}, r"'double_q' must be True or False \(got 1\)"),
        ({"lr": float("inf")}, r"'lr' must be a finite number > 0 \(got inf\)"),
        ({"huber_delta": float("nan")}, r"'huber_delta' must be a finite number > 0 \(got nan\)"),
        ({"gamma": float("nan")}, r"'gamma' must be in \[0, 1\] \(got nan\)"),
        ({"grad_clip": float("inf")}, r"'grad_clip' must be a finite number > 0 or None \(got inf\)"),
        ({"lr": "x"}, r"'lr' must be a finite number > 0 \(got 'x'\)"),
        ({"gamma": None}, r"'gamma' must be in \[0, 1\] \(got None\)"),
        ({"target_update_every": 2.5}, r"'target_update_every' must be an int >= 1 \(got 2.5\)"),
    ],
    ids=[
        "bool_int",
        "bool_number",
        "int_bool",
        "inf_lr",
        "nan_huber",
        "nan_gamma",
        "inf_clip",
        "str_lr",
        "none_gamma",
        "float_int",
    ],
)
def test_dqn_config_refuses_bools_nan_and_wrong_types(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DQNConfig(**kwargs)
