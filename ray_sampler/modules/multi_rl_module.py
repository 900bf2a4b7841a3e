"""MultiRLModule: the modules of a multi-agent run by module id (RLlib's ``MultiRLModule``).

A read-only mapping from module id to RLModule (numpy or torch: anything with ``get_state`` and
``set_state``), with the modules that learn (``policies_to_train``; the others act but never
change) and ``add_module`` / ``remove_module`` between iterations, so self-play can add a frozen
copy of the policy it trains. Several agents may map to one module (shared parameters); which
agent maps to which module is the run's ``policy_mapping_fn``, not this container's business.

>>> from ray_sampler.modules import RandomModule
>>> import gymnasium as gym
>>> obs, act = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2)
>>> multi = MultiRLModule({"main": RandomModule(obs, act)})
>>> multi.add_module("main_v1", RandomModule(obs, act), trainable=False)
>>> list(multi), multi.policies_to_train
(['main', 'main_v1'], ('main',))
>>> multi.remove_module("main_v1").action_space, list(multi)
(Discrete(2), ['main'])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ray_sampler.errors import ConfigError

__all__ = ["MultiRLModule"]


class MultiRLModule(Mapping[str, Any]):
    """Module id -> RLModule, with the ids of the modules that learn (see the module docstring)."""

    def __init__(self, modules: Mapping[str, Any] | None = None, *, policies_to_train: Iterable[str] | None = None):
        """``policies_to_train``: the ids that learn; None: every module given here."""
        self._modules: dict[str, Any] = {}
        self._trainable: set[str] = set()
        given = dict(modules or {})
        train = set(given) if policies_to_train is None else set(policies_to_train)
        unknown = sorted(train - set(given))
        if unknown:
            raise ConfigError(f"'policies_to_train' names modules {unknown} that are not given (have {sorted(given)})")
        for mid, module in given.items():
            self.add_module(mid, module, trainable=mid in train)

    def __getitem__(self, module_id: str) -> Any:
        try:
            return self._modules[module_id]
        except KeyError:
            raise KeyError(f"no module {module_id!r} (modules: {sorted(self._modules)})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    @property
    def policies_to_train(self) -> tuple[str, ...]:
        """The ids of the modules that learn, in the order they were added."""
        return tuple(mid for mid in self._modules if mid in self._trainable)

    def is_trainable(self, module_id: str) -> bool:
        return module_id in self._trainable

    def add_module(self, module_id: str, module: Any, *, trainable: bool = True, override: bool = False) -> None:
        """Adds ``module`` under ``module_id``; ConfigError if the id is taken (unless ``override``)
        or the module lacks ``get_state``/``set_state``."""
        if not isinstance(module_id, str) or not module_id:
            raise ConfigError(f"add_module: a module id must be a non-empty string (got {module_id!r})")
        if module_id in self._modules and not override:
            raise ConfigError(
                f"add_module: module id {module_id!r} is taken (modules: {sorted(self._modules)}); "
                "pass override=True to replace it"
            )
        missing = [m for m in ("get_state", "set_state") if not callable(getattr(module, m, None))]
        if missing:
            raise ConfigError(f"add_module: {module_id!r} is not an RLModule ({type(module).__name__} lacks {missing})")
        self._modules[module_id] = module
        if trainable:
            self._trainable.add(module_id)
        else:
            self._trainable.discard(module_id)

    def remove_module(self, module_id: str, *, raise_err_if_not_found: bool = True) -> Any:
        """Removes and returns the module ``module_id`` (None if absent and not ``raise_err_if_not_found``)."""
        if module_id not in self._modules:
            if raise_err_if_not_found:
                raise ConfigError(f"remove_module: no module {module_id!r} (modules: {sorted(self._modules)})")
            return None
        self._trainable.discard(module_id)
        return self._modules.pop(module_id)

    def get_state(self, module_ids: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """``{module_id: module.get_state()}`` for ``module_ids`` (None: every module)."""
        ids = list(self._modules) if module_ids is None else list(module_ids)
        return {mid: self[mid].get_state() for mid in ids}

    def set_state(self, state: Mapping[str, Mapping[str, Any]]) -> None:
        """Loads ``{module_id: weights}`` into those modules (the others keep theirs); ConfigError
        naming any id this container lacks, before anything is loaded."""
        unknown = sorted(set(state) - set(self._modules))
        if unknown:
            raise ConfigError(f"weights for unknown modules {unknown} (modules: {sorted(self._modules)})")
        for mid, weights in state.items():
            self._modules[mid].set_state(dict(weights))

    def __repr__(self) -> str:
        parts = [f"{mid}: {type(m).__name__}{'' if mid in self._trainable else ' (frozen)'}" for mid, m in self.items()]
        return f"MultiRLModule({', '.join(parts)})"
