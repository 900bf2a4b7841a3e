"""Frameworks: numpy (the default, no extra needed) or torch, and the module and learner classes of each.

A training config's ``framework`` picks the learner class, and the built-in module class where
the runner config names a built-in one (or none): ``MLPModule`` <-> ``TorchMLPModule``,
``QModule`` <-> ``TorchQModule``. A user's own module class keeps its place and must be of the
same framework (its ``framework`` class attribute; a class without one is a numpy module).
Torch is imported only when the torch framework is asked for, so the numpy path needs no torch.
"""

from __future__ import annotations

import dataclasses
import importlib
from enum import Enum

from ray_sampler.errors import ConfigError
from ray_sampler.modules import MLPModule, QModule
from ray_sampler.sampling.config import EnvRunnerConfig
from ray_sampler.validate import check_enum

__all__ = ["Framework", "dqn_learner_class", "module_framework", "ppo_learner_class", "require_torch", "with_framework"]


class Framework(str, Enum):
    """What modules and learners compute with."""

    NUMPY = "numpy"
    TORCH = "torch"


# Built-in module classes by (numpy class, framework): where each lives.
_BUILT_IN = {
    MLPModule: {Framework.TORCH: ("ray_sampler.modules.torch_mlp", "TorchMLPModule")},
    QModule: {Framework.TORCH: ("ray_sampler.modules.torch_mlp", "TorchQModule")},
}
_LEARNERS = {
    ("ppo", Framework.NUMPY): ("learner.learner", "Learner"),
    ("ppo", Framework.TORCH): ("learner.torch_learner", "TorchPPOLearner"),
    ("dqn", Framework.NUMPY): ("learner.dqn", "DQNLearner"),
    ("dqn", Framework.TORCH): ("learner.torch_learner", "TorchDQNLearner"),
}


def require_torch() -> None:
    """Raises ConfigError, with the install line, where torch is not installed."""
    try:
        importlib.import_module("torch")
    except ImportError:
        raise ConfigError(
            "'framework' 'torch' needs PyTorch, which is not installed: pip install 'ray-sampler[torch]'"
        ) from None


def _load(where: tuple[str, str]) -> type:
    return getattr(importlib.import_module(where[0]), where[1])


def module_framework(module_class: type) -> str:
    """The framework of a module class: its ``framework`` attribute, ``"numpy"`` without one."""
    return str(getattr(module_class, "framework", Framework.NUMPY.value))


def _numpy_twin(module_class: type) -> type | None:
    """The numpy built-in of which ``module_class`` is a torch twin (None: not a built-in twin)."""
    for numpy_class, twins in _BUILT_IN.items():
        if any(module_class.__name__ == name and module_class.__module__ == mod for mod, name in twins.values()):
            return numpy_class
    return None


def with_framework(framework: Framework | str, env_runner: EnvRunnerConfig) -> EnvRunnerConfig:
    """``env_runner`` with the module class of ``framework``: a built-in class (or none: the MLP)
    becomes its twin of that framework; a user's class is checked to be of that framework."""
    framework = check_enum("framework", Framework, framework)
    if framework is Framework.TORCH:
        require_torch()
    if framework is Framework.NUMPY and env_runner.module_class in (None, *_BUILT_IN):
        return env_runner
    given = env_runner.module_class or MLPModule
    numpy_class = given if given in _BUILT_IN else _numpy_twin(given)
    if numpy_class is None:  # a user's module class
        if module_framework(given) != framework.value:
            raise ConfigError(
                f"'framework' is {framework.value!r} but 'module_class' {given.__name__} is a "
                f"{module_framework(given)} module: pass --framework {module_framework(given)} or a "
                f"{framework.value} module class"
            )
        return env_runner
    module_class = numpy_class if framework is Framework.NUMPY else _load(_BUILT_IN[numpy_class][framework])
    module_config = dict(env_runner.module_config)
    if numpy_class is MLPModule and env_runner.module_class is None and env_runner.seed is not None:
        module_config.setdefault("seed", env_runner.seed)  # as build_module seeds the default MLP
    return dataclasses.replace(env_runner, module_class=module_class, module_config=module_config)


def ppo_learner_class(framework: Framework | str) -> type:
    """The PPO learner class of ``framework``."""
    return _load(_LEARNERS[("ppo", check_enum("framework", Framework, framework))])


def dqn_learner_class(framework: Framework | str) -> type:
    """The DQN learner class of ``framework``."""
    return _load(_LEARNERS[("dqn", check_enum("framework", Framework, framework))])
