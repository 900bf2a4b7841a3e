"""Adam: the update rule, gradient-norm clipping, state round trips and argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from learner.optim import Adam
from ray_sampler.errors import ConfigError


def test_adam_minimizes_a_quadratic() -> None:
    params = {"x": np.array([3.0, -2.0])}
    opt = Adam(lr=0.1)
    for _ in range(500):
        opt.step(params, {"x": 2 * params["x"]})
    np.testing.assert_allclose(params["x"], 0.0, atol=1e-3)


def test_step_returns_the_global_gradient_norm_before_clipping() -> None:
    clipped = Adam(lr=1.0, grad_clip=1.0)
    assert clipped.step({"x": np.zeros(2)}, {"x": np.array([30.0, 40.0])}) == pytest.approx(50.0)


def test_the_norm_is_taken_over_every_parameter() -> None:
    grads = {"a": np.array([1.0, 2.0]), "b": np.array([[2.0], [4.0]])}
    assert Adam().step({"a": np.zeros(2), "b": np.zeros((2, 1))}, grads) == pytest.approx(5.0)


def test_first_step_follows_the_bias_corrected_update_rule() -> None:
    params = {"x": np.array([1.0, 1.0, 1.0])}
    g = np.array([2.0, -0.5, 1e-9])
    Adam(lr=0.1, eps=1e-8).step(params, {"x": g})
    # m_hat = g and v_hat = g**2 after one step: x -= lr * g / (|g| + eps).
    np.testing.assert_allclose(params["x"], 1.0 - 0.1 * g / (np.abs(g) + 1e-8), rtol=1e-12)


def test_second_step_follows_the_update_rule() -> None:
    params = {"x": np.array([0.0])}
    opt = Adam(lr=0.01, betas=(0.5, 0.75))
    opt.step(params, {"x": np.array([1.0])})
    opt.step(params, {"x": np.array([3.0])})
    m, v = 0.5 * 0.5 * 1.0 + 0.5 * 3.0, 0.75 * 0.25 * 1.0 + 0.25 * 9.0
    m_hat, v_hat = m / (1 - 0.5**2), v / (1 - 0.75**2)
    second = 0.01 * m_hat / (np.sqrt(v_hat) + 1e-8)
    assert params["x"][0] == pytest.approx(-0.01 * 1.0 / (1.0 + 1e-8) - second, rel=1e-12)


def test_clipping_scales_the_gradient_to_the_clip_norm() -> None:
    opt = Adam(grad_clip=1.0)
    opt.step({"x": np.zeros(2)}, {"x": np.array([30.0, 40.0])})
    state = opt.get_state()
    np.testing.assert_allclose(state["m"]["x"], 0.1 * np.array([0.6, 0.8]), rtol=1e-12)
    np.testing.assert_allclose(state["v"]["x"], 0.001 * np.array([0.36, 0.64]), rtol=1e-12)


def test_a_gradient_within_the_clip_norm_is_not_scaled() -> None:
    opt = Adam(grad_clip=10.0)
    opt.step({"x": np.zeros(2)}, {"x": np.array([3.0, 4.0])})
    np.testing.assert_allclose(opt.get_state()["m"]["x"], [0.3, 0.4], rtol=1e-12)


def test_state_round_trip_continues_identically() -> None:
    a_params, b_params = {"x": np.array([1.0, -1.0])}, {"x": np.array([1.0, -1.0])}
    a = Adam(lr=0.05)
    a.step(a_params, {"x": np.array([0.5, 2.0])})
    b = Adam(lr=0.05)
    b.set_state(a.get_state())
    b_params["x"] = a_params["x"].copy()
    for opt, params in ((a, a_params), (b, b_params)):
        opt.step(params, {"x": np.array([-1.0, 0.25])})
    np.testing.assert_array_equal(a_params["x"], b_params["x"])
    assert a.get_state()["t"] == b.get_state()["t"] == 2


def test_get_state_returns_copies() -> None:
    opt = Adam()
    opt.step({"x": np.zeros(1)}, {"x": np.array([1.0])})
    state = opt.get_state()
    opt.step({"x": np.zeros(1)}, {"x": np.array([1.0])})
    np.testing.assert_allclose(state["m"]["x"], [0.1], rtol=1e-12)
    assert state["t"] == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": float("nan")}, r"'lr' must be a finite number > 0 \(got nan\)"),
        ({"eps": True}, r"'eps' must be a finite number > 0 \(got True\)"),
        ({"grad_clip": "1"}, r"'grad_clip' must be a finite number > 0 or None \(got '1'\)"),
    ],
    ids=["nan_lr", "bool_eps", "str_clip"],
)
def test_adam_refuses_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Adam(**kwargs)
