"""The numpy MLP: forward against a hand-written computation, backward against finite differences,
orthogonal initialization and the layer count."""

from __future__ import annotations

import numpy as np
import pytest

from ray_sampler.modules.mlp import backward, forward, init_layer, num_layers


def two_layer_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "h.0.w": rng.normal(size=(3, 4)),
        "h.0.b": rng.normal(size=4),
        "h.1.w": rng.normal(size=(4, 2)),
        "h.1.b": rng.normal(size=2),
        "other.0.w": np.zeros((3, 1)),  # another head's layers are not counted or used
        "other.0.b": np.zeros(1),
    }


X = np.array([[0.5, -1.0, 2.0], [0.0, 0.3, -0.7]])


@pytest.mark.parametrize(
    ("activation", "hidden"), [("tanh", np.tanh), ("relu", lambda z: np.maximum(z, 0.0))], ids=["tanh", "relu"]
)
def test_forward_is_a_hidden_layer_then_a_linear_layer(activation: str, hidden: object) -> None:
    p = two_layer_params()
    out, cache = forward(p, "h", X, activation)
    h = hidden(X @ p["h.0.w"] + p["h.0.b"])  # type: ignore[operator]
    np.testing.assert_allclose(out, h @ p["h.1.w"] + p["h.1.b"], rtol=1e-12)
    assert len(cache) == 2
    np.testing.assert_array_equal(cache[0], X)
    np.testing.assert_allclose(cache[1], h, rtol=1e-12)


def test_the_default_activation_is_tanh() -> None:
    p = two_layer_params()
    np.testing.assert_array_equal(forward(p, "h", X)[0], forward(p, "h", X, "tanh")[0])


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_backward_matches_finite_differences(activation: str) -> None:
    p = two_layer_params(1)
    weights = np.random.default_rng(2).normal(size=(2, 2))  # loss = sum(out * weights)

    def loss() -> float:
        return float((forward(p, "h", X, activation)[0] * weights).sum())

    _, cache = forward(p, "h", X, activation)
    grads = backward(p, "h", cache, weights, activation)
    assert sorted(grads) == ["h.0.b", "h.0.w", "h.1.b", "h.1.w"]
    eps = 1e-6
    for key, grad in grads.items():
        value = p[key]
        for idx in range(value.size):
            at = np.unravel_index(idx, value.shape)
            old = value[at]
            value[at] = old + eps
            up = loss()
            value[at] = old - eps
            down = loss()
            value[at] = old
            assert grad[at] == pytest.approx((up - down) / (2 * eps), rel=1e-6, abs=1e-8), (key, idx)


@pytest.mark.parametrize(("n_in", "n_out"), [(5, 3), (3, 5)], ids=["tall", "wide"])
def test_init_layer_is_orthogonal_times_gain_with_zero_bias(n_in: int, n_out: int) -> None:
    w, b = init_layer(np.random.default_rng(0), n_in, n_out, gain=2.0)
    assert w.shape == (n_in, n_out) and w.dtype == np.float32 and b.dtype == np.float32
    assert b.tolist() == [0.0] * n_out
    gram = w.T @ w if n_in >= n_out else w @ w.T  # orthonormal columns (or rows), scaled by the gain
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(n_in, n_out)), atol=1e-5)


def test_init_layer_is_seeded() -> None:
    a, _ = init_layer(np.random.default_rng(5), 4, 4, 1.0)
    b, _ = init_layer(np.random.default_rng(5), 4, 4, 1.0)
    np.testing.assert_array_equal(a, b)


def test_num_layers_counts_the_weights_of_one_head() -> None:
    p = two_layer_params()
    assert (num_layers(p, "h"), num_layers(p, "other"), num_layers(p, "missing")) == (2, 1, 0)
