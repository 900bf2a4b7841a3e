"""Action distributions over batches, in numpy: Categorical (Discrete) and DiagGaussian (Box).

Both take the module's ``action_dist_inputs`` (logits; or mean and log-std concatenated) with
a leading batch axis and sample, score (log-probability) and take the deterministic action.

>>> dist = Categorical(np.log(np.array([[0.25, 0.75]])))
>>> round(float(np.exp(dist.logp(np.array([1])))[0]), 6)
0.75
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from ray_sampler.errors import SpaceError

__all__ = ["Categorical", "DiagGaussian", "dist_class_for", "dist_input_size"]

_LOG_2PI = float(np.log(2 * np.pi))


class Categorical:
    """Categorical over the last axis of ``logits``."""

    def __init__(self, logits: np.ndarray) -> None:
        z = logits - logits.max(axis=-1, keepdims=True)
        z -= np.log(np.exp(z).sum(axis=-1, keepdims=True))  # in place: one array fewer per call
        self.log_probs = z

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        # Gumbel-max: one uniform draw per class, no Python loop over the batch. The noise is
        # -log(-log(u)), computed in place; adding it is subtracting log(-log(u)).
        u = rng.random(self.log_probs.shape)
        np.log(u, out=u)
        np.negative(u, out=u)
        np.log(u, out=u)
        return np.subtract(self.log_probs, u, out=u).argmax(axis=-1)

    def deterministic(self) -> np.ndarray:
        return self.log_probs.argmax(axis=-1)

    def logp(self, actions: np.ndarray) -> np.ndarray:
        actions = np.asarray(actions, np.int64)
        if self.log_probs.ndim == 2 and actions.ndim == 1:  # the common [B, K] case: one fancy index
            return self.log_probs[np.arange(len(actions)), actions]
        return np.take_along_axis(self.log_probs, actions[..., None], axis=-1)[..., 0]

    def entropy(self) -> np.ndarray:
        return -(np.exp(self.log_probs) * self.log_probs).sum(axis=-1)


class DiagGaussian:
    """Independent normals; ``inputs`` is mean and log-std concatenated on the last axis."""

    def __init__(self, inputs: np.ndarray) -> None:
        self.mean, self.log_std = np.split(inputs, 2, axis=-1)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return self.mean + np.exp(self.log_std) * rng.standard_normal(self.mean.shape)

    def deterministic(self) -> np.ndarray:
        return self.mean.copy()  # a new array, as every other output here (not a view of the inputs)

    def logp(self, actions: np.ndarray) -> np.ndarray:
        z = (actions - self.mean) / np.exp(self.log_std)
        return (-0.5 * z * z - self.log_std - 0.5 * _LOG_2PI).sum(axis=-1)

    def entropy(self) -> np.ndarray:
        return (self.log_std + 0.5 * (1.0 + _LOG_2PI)).sum(axis=-1)


def dist_class_for(action_space: gym.Space) -> type[Categorical] | type[DiagGaussian]:
    """The distribution the built-in modules use for ``action_space``."""
    if isinstance(action_space, gym.spaces.Discrete):
        return Categorical
    if isinstance(action_space, gym.spaces.Box) and action_space.shape and len(action_space.shape) == 1:
        return DiagGaussian
    raise SpaceError(
        f"the built-in policy supports Discrete and 1-D Box action spaces (got {action_space}); "
        "bring your own module for others"
    )


def dist_input_size(action_space: gym.Space) -> int:
    """Width of ``action_dist_inputs`` for ``action_space``."""
    dist_class = dist_class_for(action_space)  # raises for spaces the built-in policy does not support
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    assert dist_class is DiagGaussian and action_space.shape is not None, "dist_class_for took a 1-D Box"
    return 2 * int(action_space.shape[0])
