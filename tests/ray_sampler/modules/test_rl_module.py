"""The RLModule protocol: the built-in modules satisfy it, an object short of a method does not."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from ray_sampler.modules import MLPModule, QModule, RandomModule, RLModule

OBS = gym.spaces.Box(-1, 1, (4,))
MODULES = {
    "mlp_discrete": lambda: MLPModule(OBS, gym.spaces.Discrete(3)),
    "mlp_box": lambda: MLPModule(OBS, gym.spaces.Box(-1, 1, (2,))),
    "q": lambda: QModule(OBS, gym.spaces.Discrete(3)),
    "random": lambda: RandomModule(OBS, gym.spaces.Discrete(3)),
}


@pytest.mark.parametrize("make", MODULES.values(), ids=MODULES.keys())
def test_built_in_modules_satisfy_the_protocol(make: Any) -> None:
    assert isinstance(make(), RLModule)


class _NoSetState:
    observation_space = OBS
    action_space = gym.spaces.Discrete(2)

    def forward_inference(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {}

    def forward_exploration(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {}

    def get_state(self) -> dict[str, Any]:
        return {}


def test_an_object_without_set_state_is_not_a_module() -> None:
    assert not isinstance(_NoSetState(), RLModule)


def test_any_object_with_the_spaces_and_methods_is_a_module() -> None:
    class WithSetState(_NoSetState):
        def set_state(self, state: dict[str, Any]) -> None:
            pass

    assert isinstance(WithSetState(), RLModule)
