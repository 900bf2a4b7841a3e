"""Policy: a trained module with the runner's env-to-module and module-to-env pipelines, loadable anywhere.

A ``Policy`` answers what an EnvRunner of its run would answer for the same observations: it
builds the same pipelines (the user's env-to-module pieces with their saved state, such as a
MeanStdFilter's moments, then the defaults; GetActions and action clipping after the module) and
calls them the way the runner's per-step engine does. It imports no Ray and needs no cluster and
no run config: ``Policy.save`` writes everything that rebuilds it into one folder, and
``Policy.from_checkpoint`` reads it back, verified (``ray_sampler.data.state_files``: JSON plus
npz, no pickle, digests). Every training run writes one at its end (``RUN_DIR/policy/``), and every
checkpoint holds one (``ckpt-N/policy/``).

- ``compute_actions(obs_batch, explore=False)``: one action per row, each row the first step of an
  episode (no history; a recurrent module's initial state).
- ``compute_single_action(obs, state=None, reward=0.0, explore=False)``: one env's next action and the
  ``PolicyState`` to pass with its next observation: the history a frame stack or previous actions
  and rewards read, and a recurrent module's state. ``state=None`` starts an episode.

Classes are saved by import path. Loading imports ray-sampler's own classes by that path; any other
class (your own module or connector piece) is taken only from ``classes=`` (``{"pkg.mod:Name":
Name}``), never imported because a file names it.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from connectors.env_to_module import default_env_to_module, env_to_module_observation_space
from connectors.module_to_env import default_module_to_env
from ray_sampler.data import tree
from ray_sampler.data.columns import Columns
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.spaces import to_numpy_batch
from ray_sampler.data.state_files import StateFileError, decode, encode, read_verified, replace_dir, write_verified
from ray_sampler.errors import PolicyError
from ray_sampler.modules.rl_module import initial_state, is_stateful
from ray_sampler.policy.space_spec import space_from_json, space_to_json

__all__ = [
    "FORMAT",
    "POLICY_FILE",
    "Policy",
    "PolicyError",
    "PolicyState",
    "class_path",
    "find_policy_dir",
    "load_spec",
    "read_policy_file",
    "write_policy_file",
]

FORMAT = "ray-sampler-policy/1"
POLICY_FILE = "policy.json"
"""The JSON file of a saved policy (its arrays in ``policy.npz`` beside it)."""
_OWN_PACKAGES = ("ray_sampler", "connectors", "learner", "replay")
_TRIM_EVERY = 256
"""A ``compute_single_action`` history is cut back to its lookback once it holds this many steps."""


def class_path(cls: type) -> str:
    """``cls`` as a saved policy names it: ``module:qualname``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve_class(name: str, classes: Mapping[str, type], where: Path | str) -> type:
    if name in classes:
        return classes[name]
    module, _, qualname = name.partition(":")
    if module.split(".")[0] not in _OWN_PACKAGES:
        raise PolicyError(
            f"policy {where} was built with {name}, which is not ray-sampler's: pass classes={{{name!r}: "
            "TheClass}} to load it (a class is never imported because a file names it)"
        )
    # Only a class defined in that module of ray-sampler's: never a function, a module it imports,
    # or a name reached through one (a file could otherwise name any callable and have it called).
    obj = getattr(importlib.import_module(module), qualname, None) if qualname.isidentifier() else None
    if not isinstance(obj, type) or obj.__module__ != module:
        raise PolicyError(f"policy {where} names {name!r}, which is no class of ray-sampler's")
    return obj


def _piece_spec(piece: Any, arrays: dict[str, np.ndarray], path: str) -> dict[str, Any]:
    get_config = getattr(piece, "get_config", None)
    if not callable(get_config):
        raise PolicyError(
            f"policy: the connector piece {type(piece).__name__} has no get_config() (the keyword arguments that "
            "rebuild it), so a saved policy cannot rebuild it"
        )
    return {"class": class_path(type(piece)), "config": encode(get_config(), arrays, path, error=PolicyError)}


@dataclasses.dataclass
class PolicyState:
    """One env's place in its episode, for ``compute_single_action``: the episode so far (what a frame
    stack or previous actions and rewards read), the action last chosen, and a recurrent module's
    state for the next step (None: a stateless module)."""

    episode: SingleAgentEpisode
    action: Any
    state_out: dict[str, np.ndarray] | None


class Policy:
    """A module and its pipelines, as an EnvRunner of the run built them (see the module docstring).

    ``env_to_module_connectors`` are the user's pieces before the defaults (a run with a mean/std
    filter ends with its ``MeanStdFilter``), taken as they are (pass copies to keep yours apart);
    ``connector_state`` is the env-to-module pipeline's ``get_state()`` (the runners' merged one)."""

    def __init__(
        self,
        module: Any,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        env_to_module_connectors: tuple[Any, ...] = (),
        module_to_env_connectors: tuple[Any, ...] = (),
        normalize_actions: bool = False,
        seed: int | None = None,
        connector_state: Mapping[str, Any] | None = None,
        module_config: Mapping[str, Any] | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        self.module = module
        self.observation_space = observation_space
        self.action_space = action_space
        self.env_to_module_connectors = tuple(env_to_module_connectors)
        for piece in self.env_to_module_connectors:  # a policy's answers never depend on what it was asked
            if isinstance(getattr(piece, "update", None), bool):
                piece.update = False
        self.module_to_env_connectors = tuple(module_to_env_connectors)
        self.normalize_actions = bool(normalize_actions)
        self.seed = seed
        self.module_config = dict(module_config or {})
        """The keyword arguments the module was built with (saved, to rebuild it)."""
        self.info = dict(info or {})
        """What the run says of itself (algo, env, env_config, framework, iteration): saved as it is."""
        self.env_to_module = default_env_to_module(observation_space, self.env_to_module_connectors)
        self.module_to_env = default_module_to_env(
            action_space, self.module_to_env_connectors, seed=seed, normalize_actions=self.normalize_actions
        )
        if connector_state:
            self.env_to_module.set_state(dict(connector_state))
        self._initial = initial_state(module) if is_stateful(module) else None
        lookbacks = [int(getattr(p, "lookback_steps", 0)) for p in self.env_to_module_connectors]
        self._lookback = max([1, *lookbacks])
        self._needs_episodes = bool(self.env_to_module_connectors)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        module_class: type,
        *,
        observation_space: gym.Space,
        action_space: gym.Space,
        module_config: Mapping[str, Any] | None = None,
        env_to_module_connectors: tuple[Any, ...] = (),
        module_to_env_connectors: tuple[Any, ...] = (),
        normalize_actions: bool = False,
        seed: int | None = None,
        weights: Mapping[str, Any] | None = None,
        connector_state: Mapping[str, Any] | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> Policy:
        """Builds the module as a runner does (``module_class(space the module sees, action_space,
        **module_config)``) on copies of the pieces, then loads ``weights`` and ``connector_state``."""
        pieces = tuple(copy.deepcopy(p) for p in env_to_module_connectors)
        module_space = env_to_module_observation_space(observation_space, pieces)
        module = module_class(module_space, action_space, **dict(module_config or {}))
        if weights is not None:
            module.set_state(dict(weights))
        return cls(
            module,
            observation_space=observation_space,
            action_space=action_space,
            env_to_module_connectors=pieces,
            module_to_env_connectors=tuple(copy.deepcopy(p) for p in module_to_env_connectors),
            normalize_actions=normalize_actions,
            seed=seed,
            connector_state=connector_state,
            module_config=module_config,
            info=info,
        )

    # ------------------------------------------------------------------ acting
    def _batch(self, obs: Any, what: str) -> Any:
        """``obs`` as a numpy batch of the observation space, PolicyError if it is not one."""
        try:
            batch = to_numpy_batch(self.observation_space, obs)
            leaves = tree.flatten(batch)
            spaces = tree.flatten(_leaf_spaces(self.observation_space))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise PolicyError(f"{what}: not a batch of {self.observation_space} ({type(e).__name__}: {e})") from None
        sizes = set()
        for leaf, space in zip(leaves, spaces):
            dtype = np.asarray(leaf).dtype
            numeric = gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary
            if isinstance(space, numeric) and dtype.kind not in "biuf":
                raise PolicyError(f"{what}: numbers of {space} allowed (got an array of {dtype})")
            shape = np.shape(leaf)
            if not shape or (space.shape is not None and tuple(shape[1:]) != tuple(space.shape)):
                want = "[N]" if not space.shape else f"[N, {', '.join(map(str, space.shape))}]"
                raise PolicyError(f"{what}: a batch {want} of {space} allowed (got shape {list(shape)})")
            sizes.add(shape[0])
        if len(sizes) != 1:
            raise PolicyError(f"{what}: every leaf needs the same batch size (got {sorted(sizes)})")
        return batch

    def _act(
        self, obs_batch: Any, episodes: list[SingleAgentEpisode], states: Any, explore: bool
    ) -> tuple[Any, Any, dict[str, Any]]:
        """The runner's per-step engine's forward: (actions recorded, actions for the env, other outputs)."""
        module = self.module
        shared: dict[str, Any] = {"vector_obs": obs_batch}
        batch: dict[str, Any] = {} if states is None else {Columns.STATE_IN: states}
        batch = self.env_to_module(
            rl_module=module, batch=batch, episodes=episodes, explore=explore, shared_data=shared
        )
        out = module.forward_exploration(batch) if explore else module.forward_inference(batch)
        out = self.module_to_env(rl_module=module, batch=out, episodes=episodes, explore=explore, shared_data=shared)
        actions = out.pop(Columns.ACTIONS)
        return actions, out.pop(Columns.ACTIONS_FOR_ENV, actions), out

    def compute_actions(self, obs: Any, *, explore: bool = False) -> Any:
        """Env actions for a batch of observations (``[N, ...]`` per leaf), each the first step of an
        episode; ``explore=False``: greedy (argmax, or the distribution's mean)."""
        batch = self._batch(obs, "compute_actions: 'obs'")
        n = len(tree.flatten(batch)[0])
        episodes: list[SingleAgentEpisode] = []
        if self._needs_episodes:
            for i in range(n):
                episode = SingleAgentEpisode()
                episode.add_env_reset(tree.map_structure(lambda leaf, i=i: leaf[i], batch))
                episodes.append(episode)
        states = None if self._initial is None else tree.stack([self._initial] * n)
        return self._act(batch, episodes, states, explore)[1]

    def compute_single_action(
        self, obs: Any, state: PolicyState | None = None, *, reward: float = 0.0, explore: bool = False
    ) -> tuple[Any, PolicyState]:
        """(env action, state for the next call) for one env's observation ``obs``. ``state`` is the
        previous call's (None: ``obs`` starts an episode); ``reward`` is what the previous action earned
        (read by a previous-rewards piece)."""
        batch = self._batch(tree.stack([obs]), "compute_single_action: 'obs'")
        item = tree.map_structure(lambda leaf: leaf[0], batch)
        if state is None:
            episode, state_in = SingleAgentEpisode(), self._initial
            episode.add_env_reset(item)
        else:
            if not isinstance(state, PolicyState):
                raise PolicyError(f"compute_single_action: 'state' must be the PolicyState it returned (got {state!r})")
            episode, state_in = state.episode, state.state_out
            if len(episode) >= _TRIM_EVERY:
                episode = episode.cut(len_lookback_buffer=self._lookback)
            episode.add_env_step(item, state.action, reward)
        states = None if state_in is None else tree.stack([state_in])
        actions, env_actions, out = self._act(batch, [episode], states, explore)
        action = tree.map_structure(lambda leaf: leaf[0], actions)
        state_out = None
        if self._initial is not None:
            state_out = {k: np.array(v[0]) for k, v in out[Columns.STATE_OUT].items()}
        return tree.map_structure(lambda leaf: leaf[0], env_actions), PolicyState(episode, action, state_out)

    # ------------------------------------------------------------------ saving and loading
    def spec(self, arrays: dict[str, np.ndarray], path: str) -> dict[str, Any]:
        """Everything that rebuilds this policy, as JSON with its arrays in ``arrays`` (PolicyError for
        a piece without ``get_config()`` or a space a saved policy cannot hold)."""
        return {
            "observation_space": space_to_json(self.observation_space, arrays, f"{path}/observation_space"),
            "action_space": space_to_json(self.action_space, arrays, f"{path}/action_space"),
            "module_class": class_path(type(self.module)),
            "module_config": encode(self.module_config, arrays, f"{path}/module_config", error=PolicyError),
            "env_to_module": [
                _piece_spec(p, arrays, f"{path}/env_to_module/{i}") for i, p in enumerate(self.env_to_module_connectors)
            ],
            "module_to_env": [
                _piece_spec(p, arrays, f"{path}/module_to_env/{i}") for i, p in enumerate(self.module_to_env_connectors)
            ],
            "normalize_actions": self.normalize_actions,
            "seed": self.seed,
            "weights": encode(self.module.get_state(), arrays, f"{path}/weights", error=PolicyError),
            "connector_state": encode(
                self.env_to_module.get_state(), arrays, f"{path}/connector_state", error=PolicyError
            ),
        }

    @classmethod
    def from_spec(
        cls, spec: Mapping[str, Any], arrays: Any, *, classes: Mapping[str, type], where: Path | str, info: Any = None
    ) -> Policy:
        """The policy ``spec`` describes (``spec()``'s output), built and loaded."""

        def pieces(key: str) -> tuple[Any, ...]:
            return tuple(_resolve_class(p["class"], classes, where)(**decode(p["config"], arrays)) for p in spec[key])

        return cls.build(
            _resolve_class(spec["module_class"], classes, where),
            observation_space=space_from_json(spec["observation_space"], arrays),
            action_space=space_from_json(spec["action_space"], arrays),
            module_config=decode(spec["module_config"], arrays),
            env_to_module_connectors=pieces("env_to_module"),
            module_to_env_connectors=pieces("module_to_env"),
            normalize_actions=bool(spec["normalize_actions"]),
            seed=spec["seed"],
            weights=decode(spec["weights"], arrays),
            connector_state=decode(spec["connector_state"], arrays),
            info=info,
        )

    def save_check(self) -> None:
        """PolicyError now for what ``save`` would refuse (a piece without ``get_config()``, a space or
        a config JSON cannot hold), writing nothing."""
        self.spec({}, "policy")

    def save(self, path: Path | str) -> Path:
        """Writes this policy into the folder ``path`` (replaced whole, atomically); returns it."""
        write_policy_file(Path(path), {"kind": "single_agent", "modules": {"default_policy": self}}, self.info)
        return Path(path)

    @classmethod
    def from_checkpoint(cls, path: Path | str, *, classes: Mapping[str, type] | None = None) -> Policy:
        """The policy saved at ``path``: a policy folder, a checkpoint (``ckpt-N``) or a run directory
        (its final ``policy/``, else its newest checkpoint's). PolicyError for a multi-agent one (use
        ``MultiAgentPolicy.from_checkpoint``) or anything missing, changed or of another kind."""
        folder = find_policy_dir(path)
        meta, arrays = read_policy_file(folder)
        if meta.get("kind") != "single_agent":
            raise PolicyError(
                f"policy {folder} is multi-agent ({len(meta.get('modules', {}))} modules): load it with "
                "MultiAgentPolicy.from_checkpoint"
            )
        return load_spec(cls, meta["modules"]["default_policy"], arrays, classes or {}, folder, meta.get("info", {}))

    def __repr__(self) -> str:
        return f"Policy({type(self.module).__name__}, {self.observation_space} -> {self.action_space})"


def _leaf_spaces(space: gym.Space) -> Any:
    """``space`` as the structure of its leaf spaces (the shape ``tree`` gives a batch of it)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _leaf_spaces(s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_leaf_spaces(s) for s in space.spaces)
    return space


def load_spec(cls: Any, spec: Any, arrays: Any, classes: Mapping[str, type], folder: Path, info: Any) -> Any:
    """``cls.from_spec`` of one saved module, its failures as one PolicyError naming the folder."""
    try:
        return cls.from_spec(spec, arrays, classes=classes, where=folder, info=info)
    except PolicyError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, ImportError) as e:
        raise PolicyError(f"policy {folder} cannot be rebuilt: {type(e).__name__}: {e}") from None


def write_policy_file(path: Path, body: Mapping[str, Any], info: Mapping[str, Any]) -> None:
    """Writes a policy folder: ``body["modules"]`` (module id -> Policy) and the rest of ``body`` as
    JSON, ``info`` beside them."""

    def write(tmp: Path) -> None:
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {"format": FORMAT, **{k: v for k, v in body.items() if k != "modules"}}
        meta["modules"] = {mid: p.spec(arrays, f"modules/{mid}") for mid, p in body["modules"].items()}
        meta["info"] = encode(dict(info), arrays, "info", error=PolicyError)
        write_verified(tmp, POLICY_FILE, meta, arrays)

    replace_dir(path, write)


def read_policy_file(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta, arrays) of a policy folder, verified; ``meta["info"]`` decoded. PolicyError otherwise."""
    try:
        meta, arrays = read_verified(folder, POLICY_FILE, fmt=FORMAT, what="policy")
    except StateFileError as e:
        raise PolicyError(str(e)) from None
    if not isinstance(meta.get("modules"), dict) or not meta["modules"]:
        raise PolicyError(f"policy {folder} is corrupt: {POLICY_FILE} has no modules")
    meta["info"] = decode(meta.get("info", {}), arrays)
    return meta, arrays


def _saved_iteration(folder: Path) -> int:
    """The iteration a policy folder's ``info`` names (-1: none, or a file that cannot be read)."""
    try:
        meta = json.loads((folder / POLICY_FILE).read_bytes())
        iteration = meta["info"]["iteration"]
    except (OSError, ValueError, KeyError, TypeError):
        return -1
    return iteration if isinstance(iteration, int) else -1


def find_policy_dir(path: Path | str) -> Path:
    """The policy folder ``path`` names: itself (it holds ``policy.json``), a checkpoint's ``policy/``,
    or in a run directory the newer of its final ``policy/`` and its newest checkpoint's (by the
    iteration each names). PolicyError if none."""
    path = Path(path)
    if (path / POLICY_FILE).is_file():
        return path
    found = [path / "policy"] if (path / "policy" / POLICY_FILE).is_file() else []
    checkpoints = sorted(p for p in (path / "checkpoints").glob("ckpt-*") if (p / "policy" / POLICY_FILE).is_file())
    found += [checkpoints[-1] / "policy"] if checkpoints else []
    if found:  # a run killed before its end keeps an older final policy than its newest checkpoint's
        return max(found, key=_saved_iteration)
    if not path.exists():
        raise PolicyError(f"no policy at {path}: it does not exist")
    raise PolicyError(
        f"no policy at {path}: a policy folder (with {POLICY_FILE}), a checkpoint or a run directory holding one "
        "is allowed"
    )
