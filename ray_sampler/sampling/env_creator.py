"""Env creators: ``register_env``, the EnvContext every creator sees, and the vector env a runner steps.

``EnvRunnerConfig.env`` names an env in one of these ways, all resolved by ``resolve_creator``:

- a callable ``creator(env_config) -> gymnasium.Env``, or an env class whose constructor takes
  the env config (RLlib's convention: the class is the creator);
- a name given to ``register_env(name, creator)`` (it wins over a gymnasium id of that name);
- a gymnasium id, the user's own included (``gymnasium.register`` in their module);
- ``"module:Name"`` (gymnasium's form): the module is imported first, then ``Name`` is its env
  class or creator, or the gymnasium id importing it registered;
- multi-agent names: ``"ma-<gymnasium id>:<N>"`` (``make_multi_agent`` of N copies;
  ``ma-cartpole:2`` is CartPole-v1's), and ``"pettingzoo:<module>"`` (a PettingZoo env module,
  e.g. ``pettingzoo:mpe2.simple_spread_v3`` or ``pettingzoo:classic.tictactoe_v3``: its
  ``parallel_env``, else its ``env``, called with the env config's keys);
- any of these returning a ``gymnasium.vector.VectorEnv`` of ``num_envs`` sub-envs (a vector-env
  creator): the runner steps it as it is, as a native vector env.

Each creator call gets an ``EnvContext``: the user's ``env_config`` plus ``worker_index``,
``vector_index``, ``num_workers`` and ``num_envs`` (as keys and attributes), so every sub-env can
be configured and seeded on its own. Names are resolved in the driver, and what the runners get
is the creator itself (for a gymnasium id, its spec): a name registered in the driver, or an id
registered by a module only the driver imported, works in every actor, provided the module that
defines the env can be imported there (Ray gives workers the driver's directory on one machine;
on a cluster, ship it with a runtime env: docs/custom_envs.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import pkgutil
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import ray_sampler.envs  # noqa: F401  # registers the project's envs (StatelessCartPole-v1, Atari) where envs are made
from ray_sampler.envs.atari import atari_install_hint
from ray_sampler.envs.minigrid import ensure_registered, minigrid_install_hint
from ray_sampler.errors import EnvCreatorError, first_line
from ray_sampler.sampling.config import EnvRunnerConfig, VectorizationMode
from ray_sampler.sampling.horizon import env_time_limit
from ray_sampler.sampling.multi_agent_env import is_multi_agent_env, make_multi_agent
from ray_sampler.sampling.pettingzoo_env import is_aec_env, is_parallel_env
from ray_sampler.sampling.sub_envs import SubEnvVector
from ray_sampler.suggest import close_names, did_you_mean

__all__ = [
    "MULTI_AGENT_PREFIX",
    "PETTINGZOO_PREFIX",
    "EnvContext",
    "EnvProbe",
    "MultiAgentEnvGiven",
    "PettingZooCreator",
    "env_name",
    "is_registered_env",
    "make_one_env",
    "make_vector_env",
    "pettingzoo_module",
    "pettingzoo_name",
    "probe_env",
    "register_env",
    "resolve_creator",
    "sub_env_seeds",
    "unregister_env",
]

_REGISTRY: dict[str, Callable[[EnvContext], gym.Env]] = {}


def register_env(name: str, creator: Callable[[EnvContext], gym.Env]) -> None:
    """Registers ``creator`` under ``name`` for use as ``EnvRunnerConfig(env=name)``."""
    if not isinstance(name, str) or not name:
        raise EnvCreatorError(f"register_env: 'name' must be a non-empty str (got {name!r})")
    if not callable(creator):
        raise EnvCreatorError(f"register_env: 'creator' for {name!r} must be callable (got {creator!r})")
    _REGISTRY[name] = creator


def unregister_env(name: str) -> None:
    """Removes ``name`` from the registry (a gymnasium id of that name is found again)."""
    if name not in _REGISTRY:
        raise EnvCreatorError(f"unregister_env: {name!r} is not registered (registered: {sorted(_REGISTRY) or 'none'})")
    del _REGISTRY[name]


def is_registered_env(name: str) -> bool:
    """Whether ``name`` was given to ``register_env`` (it then wins over a gymnasium id of that name)."""
    return name in _REGISTRY


_INDEX_KEYS = ("worker_index", "vector_index", "num_workers", "num_envs")
"""The keys an EnvContext adds to the user's env_config (not passed on to ``gymnasium.make``)."""


class EnvContext(dict):
    """The ``env_config`` a creator receives: the user's keys plus the sub-env's indices and the
    runner's number of sub-envs (what a vector-env creator builds)."""

    @property
    def worker_index(self) -> int:
        return self["worker_index"]

    @property
    def vector_index(self) -> int:
        return self["vector_index"]

    @property
    def num_workers(self) -> int:
        return self["num_workers"]

    @property
    def num_envs(self) -> int:
        return self["num_envs"]


class _GymMake:
    """Creator for a gymnasium id: ``gym.make(spec, **env_config)`` without our index keys. It holds
    the id's spec, resolved in the driver, so a runner needs no registration of its own: an id the
    user's module registered is made from its entry point in every actor."""

    def __init__(self, spec: gym.envs.registration.EnvSpec) -> None:
        self.spec = spec

    @property
    def env_id(self) -> str:
        return self.spec.id

    def __call__(self, ctx: EnvContext) -> gym.Env:
        return gym.make(self.spec, **{k: v for k, v in ctx.items() if k not in _INDEX_KEYS})

    def __repr__(self) -> str:
        return f"gymnasium id {self.spec.id!r}"


def resolve_creator(env: str | Callable[..., Any]) -> Callable[[EnvContext], Any]:
    """The creator of a config's ``env`` (see the module docstring for the forms and their order)."""
    if callable(env):
        return env
    if env in _REGISTRY:
        return _REGISTRY[env]
    if env.startswith(PETTINGZOO_PREFIX):
        return PettingZooCreator(env.removeprefix(PETTINGZOO_PREFIX))
    if env.startswith(MULTI_AGENT_PREFIX) and ":" in env:
        return _multi_agent_copies(env)
    if ":" in env:
        return _from_module(env)
    ensure_registered(env)
    if env in gym.registry:
        return _GymMake(gym.spec(env))
    hint = did_you_mean(env, [*_REGISTRY, *gym.registry])
    hint = f"; {hint}" if hint else ""
    raise EnvCreatorError(
        f"'env' {env!r} is neither a name given to register_env nor a gymnasium id "
        f"(registered: {sorted(_REGISTRY) or 'none'}; a module's env: 'module:Name'){hint}"
        f"{atari_install_hint(env)}{minigrid_install_hint(env)}"
    )


MULTI_AGENT_PREFIX = "ma-"
"""``ma-<gymnasium id>:<N>``: N independent copies of a gymnasium env as one multi-agent env."""
PETTINGZOO_PREFIX = "pettingzoo:"
"""``pettingzoo:<module>``: a PettingZoo env module."""
_SHORT_IDS = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1", "acrobot": "Acrobot-v1"}
"""Short names ``ma-<name>:<N>`` takes for these gymnasium ids."""


def _multi_agent_copies(env: str) -> Callable[..., Any]:
    """``ma-<gymnasium id or short name>:<N>``: ``make_multi_agent(id, N)``."""
    base, _, count = env.removeprefix(MULTI_AGENT_PREFIX).partition(":")
    if not count.isdigit() or int(count) < 1 or not base:
        raise EnvCreatorError(
            f"'env' {env!r}: the multi-agent form is 'ma-<gymnasium id>:<number of agents>', e.g. 'ma-cartpole:2'"
        )
    gym_id = _SHORT_IDS.get(base.lower(), base)
    ensure_registered(gym_id)
    if gym_id not in gym.registry:
        hint = did_you_mean(gym_id, [*_SHORT_IDS, *gym.registry])
        hint = f"; {hint}" if hint else ""
        raise EnvCreatorError(f"'env' {env!r}: {gym_id!r} is not a gymnasium id{hint}")
    return make_multi_agent(gym_id, int(count))


_PETTINGZOO_PLACES = ("", "pettingzoo.", "pettingzoo.classic.", "pettingzoo.butterfly.", "pettingzoo.sisl.",
                      "pettingzoo.atari.", "mpe2.")  # fmt: skip
"""Where ``pettingzoo:<name>`` is looked for: the name as given, then PettingZoo's families and mpe2."""


def pettingzoo_module(name: str) -> Any:
    """The PettingZoo env module ``name``, looked for as given, then under ``pettingzoo.``, its
    families (``classic``, ``butterfly``, ``sisl``, ``atari``) and ``mpe2``; EnvCreatorError naming
    where it looked (with the install line where PettingZoo itself is missing)."""
    tried = []
    for place in _PETTINGZOO_PLACES:
        candidate = place + name
        try:
            return importlib.import_module(candidate)
        except ImportError as e:
            missing = getattr(e, "name", None) or ""
            if missing and not candidate.startswith(missing):  # the module exists; something it needs does not
                raise EnvCreatorError(
                    f"'env' 'pettingzoo:{name}': {candidate} needs {missing!r}, which is not installed: {first_line(e)}"
                ) from None
            tried.append(candidate)
    if importlib.util.find_spec("pettingzoo") is None:
        raise EnvCreatorError(f"'env' 'pettingzoo:{name}' needs PettingZoo: pip install 'ray-sampler[pettingzoo]'")
    known = _pettingzoo_names()
    close = dict.fromkeys(f"{PETTINGZOO_PREFIX}{known[c]}" for c in close_names(name, known))
    hint = (
        f"did you mean {' or '.join(map(repr, close))}?"
        if close
        else (
            "e.g. 'pettingzoo:classic.tictactoe_v3', or 'pettingzoo:mpe2.simple_spread_v3' with the env's own "
            "package installed (pip install mpe2)"
        )
    )
    raise EnvCreatorError(f"'env' 'pettingzoo:{name}': no such module (looked for {', '.join(tried)}); {hint}")


def pettingzoo_name(env: str) -> str:
    """``env`` in its family form where it is a short ``pettingzoo:`` name of an installed env
    (``pettingzoo:tictactoe_v3`` -> ``pettingzoo:classic.tictactoe_v3``,
    ``pettingzoo:simple_spread_v3`` -> ``pettingzoo:mpe2.simple_spread_v3``); else ``env`` as given."""
    if not env.startswith(PETTINGZOO_PREFIX):
        return env
    full = _pettingzoo_names().get(env.removeprefix(PETTINGZOO_PREFIX))
    return env if full is None else PETTINGZOO_PREFIX + full


def _pettingzoo_names() -> dict[str, str]:
    """The env modules of PettingZoo's families and mpe2 that are installed, by each name
    ``pettingzoo:<name>`` takes for them (``tictactoe_v3``, ``classic.tictactoe_v3``) -> the
    family's form (``classic.tictactoe_v3``); found without importing them."""
    names: dict[str, str] = {}
    for place in _PETTINGZOO_PLACES:
        package = place.rstrip(".")
        try:
            spec = importlib.util.find_spec(package) if package else None
        except ImportError:
            spec = None
        if spec is None or not spec.submodule_search_locations:
            continue
        family = package.removeprefix("pettingzoo").lstrip(".")
        for module in pkgutil.iter_modules(spec.submodule_search_locations):
            if re.search(r"_v\d+$", module.name):
                full = f"{family}.{module.name}" if family else module.name
                names.setdefault(module.name, full)
                names[full] = full
    return names


@dataclasses.dataclass(frozen=True)
class PettingZooCreator:
    """Creator of ``pettingzoo:<module>``: the module's ``parallel_env`` (else ``env``) with the env
    config's keys (not the sub-env indices). The module is checked when the name is resolved."""

    module: str

    def __post_init__(self) -> None:
        module = pettingzoo_module(self.module)
        if not callable(getattr(module, "parallel_env", None)) and not callable(getattr(module, "env", None)):
            raise EnvCreatorError(f"'env' 'pettingzoo:{self.module}': the module has neither parallel_env() nor env()")

    def __call__(self, ctx: dict[str, Any]) -> Any:
        module = pettingzoo_module(self.module)
        make = getattr(module, "parallel_env", None) or module.env
        return make(**{k: v for k, v in ctx.items() if k not in _INDEX_KEYS})

    def __repr__(self) -> str:
        return f"PettingZoo env {self.module!r}"


def _from_module(env: str) -> Callable[[EnvContext], Any]:
    """``"module:Name"``: imports the module (as gymnasium's ``make("module:Id")`` does), then takes
    its attribute ``Name`` (an env class or a creator) or the gymnasium id importing it registered."""
    module_name, _, name = env.partition(":")
    if not module_name or not name:
        raise EnvCreatorError(f"'env' {env!r}: the module form is 'module:Name' (a module path, a colon, a name)")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise EnvCreatorError(
            f"'env' {env!r}: module {module_name!r} does not import: {type(e).__name__}: {first_line(e)} "
            "(searched: the current directory, PYTHONPATH and the installed packages)"
        ) from None
    found = getattr(module, name, None)
    if callable(found):
        return found
    if name in gym.registry:
        return _GymMake(gym.spec(name))
    own_ids = [
        i
        for i, spec in gym.registry.items()
        if str(spec.entry_point).startswith((f"{module_name}:", f"{module_name}."))
    ]
    candidates = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")] + own_ids
    hint = did_you_mean(name, candidates)
    hint = f"; {hint}" if hint else ""
    raise EnvCreatorError(
        f"'env' {env!r}: module {module_name!r} imported, but it has no env class or creator {name!r} and "
        f"registered no gymnasium id {name!r}{hint}"
    )


def sub_env_seeds(seed: int | None, worker_index: int, num_envs: int, *, restart: int = 0) -> list[int] | None:
    """One seed per sub-env, derived from (seed, worker_index, vector_index), each below 2**30; None
    if unseeded. ``restart`` k >= 1 gives the fresh stream of the sub-envs' k-th rebuild after a failure."""
    if seed is None:
        return None
    return [_seed(seed, worker_index, v, restart) for v in range(num_envs)]


_SEED_BITS = 30
"""Derived seeds are below 2**30: a native vector env given one seed ``s`` seeds its sub-envs with
``s + i`` (gymnasium's convention), which must stay a signed 32-bit int for C++ envs such as ALE's
(``2**31`` or more is a TypeError there); 2**30 leaves room for 2**30 sub-envs."""


def _seed(seed: int, worker_index: int, vector_index: int, restart: int) -> int:
    entropy = [seed, worker_index, vector_index] + ([restart] if restart else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0]) >> (32 - _SEED_BITS)


def _context(config: EnvRunnerConfig, worker_index: int, vector_index: int, num_workers: int) -> EnvContext:
    return EnvContext(
        config.env_config,
        worker_index=worker_index,
        vector_index=vector_index,
        num_workers=num_workers,
        num_envs=config.num_envs_per_env_runner,
    )


def _checked_env(
    creator: Callable[[EnvContext], Any], ctx: EnvContext, max_episode_steps: int | None, *, vector_ok: bool = False
) -> Any:
    """What ``creator(ctx)`` returns, if it is an env (or, with ``vector_ok``, a vector env); else
    EnvCreatorError naming the sub-env, the creator and what it returned."""
    try:
        env = creator(ctx)
    except Exception as e:  # the user's creator failed: say which sub-env, keep the cause
        raise EnvCreatorError(
            f"env creator {_name(creator)} failed for worker_index={ctx.worker_index}, "
            f"vector_index={ctx.vector_index}: {type(e).__name__}: {first_line(e)}"
        ) from e
    if vector_ok and isinstance(env, gym.vector.VectorEnv):
        if max_episode_steps is not None:
            env.close()
            raise EnvCreatorError(
                f"env creator {_name(creator)} returned a vector env, which takes no horizon: max_episode_steps "
                "needs a creator of single envs (or the vector env's own time limit)"
            )
        return env
    if is_multi_agent_env(env) or is_aec_env(env) or is_parallel_env(env):
        env.close()
        raise MultiAgentEnvGiven(
            f"env creator {_name(creator)} returned a multi-agent env ({type(env).__qualname__}): sample it with "
            "MultiAgentEnvRunner, or set EnvRunnerConfig.multi_agent (EnvRunnerGroup does that itself)"
        )
    if not isinstance(env, gym.Env):
        raise EnvCreatorError(
            f"env creator {_name(creator)} must return a gymnasium.Env (got {type(env).__module__}."
            f"{type(env).__qualname__} for worker_index={ctx.worker_index}, vector_index={ctx.vector_index})"
        )
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env


class MultiAgentEnvGiven(EnvCreatorError):
    """A single-agent runner's creator made a multi-agent env (the group's preflight takes it as the
    sign to run MultiAgentEnvRunners)."""


def _name(creator: Callable[..., Any]) -> str:
    """How messages name a creator: its module and name, or what it is."""
    if isinstance(creator, _GymMake):
        return repr(creator)
    module, name = getattr(creator, "__module__", None), getattr(creator, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(creator)


def make_one_env(
    env: str | Callable[..., Any], env_config: dict[str, Any], *, max_episode_steps: int | None = None
) -> Any:
    """One env of ``env`` (any form ``resolve_creator`` takes) as a runner's first sub-env is made:
    the same context (worker 0, vector 0, ``num_envs`` 1) and checks; a vector-env creator's vector env
    as it comes."""
    ctx = EnvContext(env_config, worker_index=0, vector_index=0, num_workers=0, num_envs=1)
    return _checked_env(resolve_creator(env), ctx, max_episode_steps, vector_ok=True)


def env_name(env: str | Callable[..., Any]) -> str:
    """A config's ``env`` as a stable name (for messages, run directories and checkpoints): the
    string as given, or a creator's ``module.qualname``."""
    return env if isinstance(env, str) else _name(env)


_MAX_PROBES = 8
_PROBES: dict[Any, EnvProbe] = {}  # (env, its config as JSON) -> the probe, oldest first


@dataclasses.dataclass(frozen=True)
class EnvProbe:
    """What one sub-env, built as a runner builds its own, tells of the env."""

    observation_space: gym.Space
    action_space: gym.Space
    reward_threshold: float | None
    """The env spec's (None: no spec, or none set)."""


def probe_env(env: str | Callable[..., Any], env_config: dict[str, Any] | None = None) -> EnvProbe:
    """Builds one sub-env of ``env`` (any form ``resolve_creator`` takes) with ``env_config``,
    through the runners' own path (``make_vector_env``), and closes it: the spaces learners and
    checks use, never from a second ``gymnasium.make``. The last few probes are remembered (a
    command asks several times before it trains: its checks, the stop rule, the learners)."""
    try:
        key: Any = (env, json.dumps(env_config or {}, sort_keys=True, default=repr))
        known = _PROBES.get(key)
    except TypeError:  # an unhashable creator: probed every time
        key, known = None, None
    if known is not None:
        return known
    config = EnvRunnerConfig(env=env, env_config=dict(env_config or {}), num_envs_per_env_runner=1)
    vector = make_vector_env(config, worker_index=0, num_workers=0, any_vector_size=True)
    try:
        one = vector.envs[0] if isinstance(vector, SubEnvVector) else vector
        threshold = getattr(getattr(one, "spec", None), "reward_threshold", None)
        probe = EnvProbe(
            vector.single_observation_space,
            vector.single_action_space,
            None if threshold is None else float(threshold),
        )
    finally:
        vector.close()
    if key is not None:
        _PROBES[key] = probe
        while len(_PROBES) > _MAX_PROBES:
            del _PROBES[next(iter(_PROBES))]
    return probe


def make_vector_env(
    config: EnvRunnerConfig, *, worker_index: int, num_workers: int, any_vector_size: bool = False
) -> gym.vector.VectorEnv:
    """The vector env of one runner; spaces are checked to agree across sub-envs.

    Sync mode builds a ``SubEnvVector`` (gymnasium's SyncVectorEnv, SAME_STEP, with sub-envs that
    fail alone and, with ``restart_failed_sub_environments``, are rebuilt through the creator
    under the same indices); a native vector env is gymnasium's own and is rebuilt whole.
    ``any_vector_size``: a vector-env creator may return another number of sub-envs than
    ``num_envs_per_env_runner`` (the driver's probes, which build fewer than a runner)."""
    n = config.num_envs_per_env_runner
    if config.vectorization_mode is VectorizationMode.VECTOR_ENTRY_POINT:
        if isinstance(config.env, str):
            ensure_registered(config.env)
        if not isinstance(config.env, str) or config.env not in gym.registry:
            hint = atari_install_hint(config.env) if isinstance(config.env, str) else ""
            raise EnvCreatorError(
                f"vectorization_mode='vector_entry_point' needs a gymnasium id as 'env' (got {config.env!r}){hint}"
            )
        kwargs = dict(config.env_config)
        limit = env_time_limit(config)
        if limit is not None:
            kwargs["max_episode_steps"] = limit
        try:
            return gym.make_vec(config.env, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
        except Exception as e:
            raise EnvCreatorError(
                f"gymnasium.make_vec({config.env!r}, vectorization_mode='vector_entry_point') failed: {e!r}"
            ) from e
    creator = resolve_creator(config.env)

    def make_env(v: int) -> gym.Env:
        return _checked_env(creator, _context(config, worker_index, v, num_workers), env_time_limit(config))

    first = _checked_env(
        creator, _context(config, worker_index, 0, num_workers), env_time_limit(config), vector_ok=True
    )
    if isinstance(first, gym.vector.VectorEnv):  # a vector-env creator: stepped as it is, as a native one
        if first.num_envs != n and not any_vector_size:
            first.close()
            raise EnvCreatorError(
                f"env creator {_name(creator)} returned a vector env of {first.num_envs} sub-envs; "
                f"num_envs_per_env_runner is {n} (the EnvContext's num_envs says how many to build)"
            )
        return first
    envs = [first, *(make_env(v) for v in range(1, n))]
    for v, env in enumerate(envs[1:], start=1):
        for name in ("observation_space", "action_space"):
            if getattr(env, name) != getattr(first, name):
                for sub_env in envs:
                    sub_env.close()
                raise EnvCreatorError(
                    f"sub-envs must share their {name}: vector_index 0 has {getattr(first, name)}, "
                    f"vector_index {v} has {getattr(env, name)} (worker_index={worker_index})"
                )
    seed = config.seed

    def reset_seed(v: int, restart: int) -> int | None:
        return None if seed is None else _seed(seed, worker_index, v, restart)

    checks = config.check_env_first_steps
    if not config.restart_failed_sub_environments:
        return SubEnvVector(envs, worker_index=worker_index, check_steps=checks)
    return SubEnvVector(envs, worker_index=worker_index, make_env=make_env, reset_seed=reset_seed, check_steps=checks)
