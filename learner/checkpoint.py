"""Training checkpoints: everything a run needs to continue, saved atomically, verified on load.

A checkpoint is a directory ``ckpt-<iteration>`` under the run's ``checkpoints/``:

- ``state.npz``: every array of the state (module weights, optimizer moments, a DQN target
  network, connector and filter statistics), read back with ``allow_pickle=False``;
- ``state.json``: the rest (counters, the stop rule's window of returns, RNG states, which
  algorithm, env and observation space it belongs to), with each array replaced by a reference
  into ``state.npz``, the SHA-256 of every other file of the checkpoint, and a SHA-256 of its own
  content (``sha256``, over the canonical JSON of everything else in it);
- ``replay.parquet`` (DQN): the replay buffer, in the replay's own checked Parquet format; a
  multi-agent DQN run's is a folder ``replay/`` (a Parquet file per module and a digested JSON
  record), every file of which ``state.json`` hashes;
- ``policy/``: the policy at that iteration, as ``ray_sampler.policy.Policy.save`` writes it (module
  weights, connector states and what rebuilds them), loadable with no Ray and no run config.

The file form (JSON + npz, digests, atomic writes) is ``ray_sampler.data.state_files``'.
Nothing is pickled: loading a checkpoint can never run code. A checkpoint is written into a
temporary directory, each file fsynced, then renamed into place, so a crash leaves either the
whole new checkpoint or none (the temporary directory is removed on the next save); the newest
``keep`` are kept. Loading checks the format, every file's hash, and that the checkpoint is of
the same algorithm, env and observation space as the run it resumes, then that every field has
the type the loop expects (``CheckpointError`` naming the checkpoint and the file). So a damaged
checkpoint is refused, or loads an exactly equal state: a changed byte of ``state.json`` changes
its content (and so its digest) or is not JSON.

>>> import tempfile
>>> state = TrainingState(algo="ppo", env="CartPole-v1", observation_space="Box(4,)", iteration=3, env_steps=96,
...                       learner={"w": np.ones(2, np.float32), "rng": {"state": 2**100}})
>>> with tempfile.TemporaryDirectory() as d:
...     saver = Checkpointer(Path(d), every=1, keep=2)
...     back = load_checkpoint(saver.save(state), algo="ppo", env="CartPole-v1", observation_space="Box(4,)")
>>> back.env_steps, back.learner["w"].tolist(), back.learner["rng"]["state"] == 2**100
(96, [1.0, 1.0], True)
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ray_sampler.data.state_files import StateFileError, decode, encode, fsync_dir, read_verified, write_verified
from ray_sampler.errors import ConfigError
from ray_sampler.validate import check_int

if TYPE_CHECKING:
    from ray_sampler.policy import Policy

__all__ = [
    "FORMAT",
    "POLICY_FOLDER",
    "REPLAY_FILE",
    "REPLAY_FOLDER",
    "CheckpointError",
    "Checkpointer",
    "TrainingState",
    "latest_checkpoint",
    "load_checkpoint",
]

FORMAT = "ray-sampler-checkpoint/2"
"""The ``format`` of ``state.json``; another one is refused (/1 had no digest of its own)."""
_PREFIX = "ckpt-"
REPLAY_FILE = "replay.parquet"
"""A single-agent DQN checkpoint's replay buffer."""
REPLAY_FOLDER = "replay"
"""A multi-agent DQN checkpoint's replay buffer (a folder: replay.multi_agent_persistence)."""
POLICY_FOLDER = "policy"
"""The policy a checkpoint holds (``ray_sampler.policy``: loadable without Ray or the run's config)."""


class CheckpointError(ConfigError):
    """A checkpoint that cannot be resumed: missing, corrupt, or of another run's kind."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingState:
    """What a training loop saves to continue later."""

    algo: str
    """``ppo`` or ``dqn``."""
    env: str
    """The env trained on, as named (``env_name``: the string given, or a creator's module.qualname)."""
    observation_space: str
    """The env's observation space (its repr): a checkpoint of another space is refused."""
    iteration: int
    """Iterations done (DQN: reports done)."""
    env_steps: int
    """Env steps trained on."""
    episodes: int = 0
    """Episodes finished."""
    elapsed_s: float = 0.0
    """Wall time of the run so far."""
    best_return_mean: float = math.nan
    """The best full-window mean return so far."""
    returns: list[float] = dataclasses.field(default_factory=list)
    """The stop rule's window of the last finished episodes' returns."""
    learner: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The learner's state (``Learner.get_state()``: module, optimizer, RNG; DQN: the target too)."""
    connector_states: dict[str, Any] | None = None
    """The runners' merged env-to-module connector states (filters' statistics), if any."""
    counters: dict[str, float] = dataclasses.field(default_factory=dict)
    """The loop's own counters (DQN: gradient steps taken and owed)."""
    returns_by: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Multi-agent: the windows of returns per module and per agent (``IterationRecord.returns_by``)."""
    replay_path: Path | None = None
    """The replay buffer's Parquet file (DQN), or folder (multi-agent DQN), when loaded."""


# Each field of state.json and the types a loop can resume from (int is a float where a float is saved).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "algo": (str,),
    "env": (str,),
    "observation_space": (str,),
    "iteration": (int,),
    "env_steps": (int,),
    "episodes": (int,),
    "elapsed_s": (int, float),
    "best_return_mean": (int, float),
    "returns": (list,),
    "learner": (dict,),
    "connector_states": (dict, type(None)),
    "counters": (dict,),
    "returns_by": (dict,),
}
_OPTIONAL_FIELDS: dict[str, Any] = {"returns_by": {}}
"""Fields a checkpoint written before they existed lacks: they load as this value."""


def _check_fields(path: Path, values: dict[str, Any]) -> None:
    """CheckpointError unless ``values`` has every field of ``TrainingState`` (and no other) with the
    type a loop resumes from: counts as ints >= 0, the returns and counters as numbers."""
    where = f"checkpoint {path} is corrupt: state.json"
    for name, default in _OPTIONAL_FIELDS.items():
        values.setdefault(name, default)
    missing, extra = sorted(_FIELD_TYPES.keys() - values.keys()), sorted(values.keys() - _FIELD_TYPES.keys())
    if missing or extra:
        raise CheckpointError(f"{where} has fields missing {missing} and unknown {extra}")
    for name, types in _FIELD_TYPES.items():
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise CheckpointError(f"{where}: {name!r} is a {type(value).__name__} (a {types[0].__name__} is saved)")
    for name in ("iteration", "env_steps", "episodes"):
        if values[name] < 0:
            raise CheckpointError(f"{where}: {name!r} is {values[name]} (an int >= 0 is saved)")
    numbers = [("returns", v) for v in values["returns"]]
    numbers += [(f"counters[{k!r}]", v) for k, v in values["counters"].items()]
    for key, window in values["returns_by"].items():
        if not isinstance(window, list):
            raise CheckpointError(f"{where}: returns_by[{key!r}] is a {type(window).__name__} (a list is saved)")
        numbers += [(f"returns_by[{key!r}]", v) for v in window]
    for name, value in numbers:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CheckpointError(f"{where}: {name} is a {type(value).__name__} (a number is saved)")


class Checkpointer:
    """Saves a run's checkpoints into ``directory`` every ``every`` iterations (0: never on its
    own; ``save`` still works), keeping the newest ``keep``."""

    def __init__(self, directory: Path, *, every: int, keep: int = 3) -> None:
        check_int("checkpoint_every", every, minimum=0)
        check_int("keep_checkpoints", keep, minimum=1)
        self.directory = Path(directory)
        self.every = every
        self.keep = keep

    def due(self, iteration: int) -> bool:
        """Whether iteration ``iteration`` ends with a checkpoint."""
        return self.every > 0 and iteration % self.every == 0

    def save(
        self,
        state: TrainingState,
        *,
        save_replay: Callable[[str], Any] | None = None,
        replay_name: str = REPLAY_FILE,
        policy: Policy | None = None,
    ) -> Path:
        """Writes ``state`` (and, with ``save_replay(path)``, the replay buffer at ``replay_name``: a
        file, or a folder such as a multi-agent replay's, every file of which is hashed) and ``policy`` (its
        ``policy/`` folder) as a new checkpoint; returns its directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(f".{_PREFIX}*.tmp-*"):  # an interrupted save's leftovers
            shutil.rmtree(stale, ignore_errors=True)
        final = self.directory / f"{_PREFIX}{state.iteration:07d}"
        tmp = self.directory / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            arrays: dict[str, np.ndarray] = {}
            fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "replay_path"}
            meta = {"format": FORMAT, **{k: encode(v, arrays, k, error=CheckpointError) for k, v in fields.items()}}
            if save_replay is not None:
                # Absolute: the replay actor writes it, and an actor's working directory is not ours.
                replay = tmp / replay_name
                save_replay(str(replay.resolve()))
                for file in [replay] if replay.is_file() else sorted(replay.rglob("*")):
                    if file.is_file():
                        with file.open("rb") as f:
                            os.fsync(f.fileno())
            if policy is not None:  # the policy as it stands at this checkpoint, loadable without the run
                policy.save(tmp / POLICY_FOLDER)
            write_verified(tmp, "state.json", meta, arrays)
            if final.exists():  # the same iteration saved again (a final save after a periodic one)
                shutil.rmtree(final)
            tmp.rename(final)
            fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for old in _checkpoints(self.directory)[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final


def _checkpoints(directory: Path) -> list[Path]:
    """The finished checkpoints in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and p.name.startswith(_PREFIX))


def latest_checkpoint(directory: Path) -> Path | None:
    """The newest finished checkpoint in ``directory`` (None: none)."""
    found = _checkpoints(Path(directory))
    return found[-1] if found else None


def load_checkpoint(path: Path, *, algo: str, env: str, observation_space: str) -> TrainingState:
    """The state saved at checkpoint directory ``path``, verified (format, hashes) and checked to
    be of ``algo`` on ``env`` with ``observation_space``; CheckpointError otherwise."""
    path = Path(path)
    try:
        meta, arrays = read_verified(path, "state.json", fmt=FORMAT, what="checkpoint")
    except StateFileError as e:
        raise CheckpointError(str(e)) from None
    files = meta["files"]
    kind = (meta.get("algo"), meta.get("env"), meta.get("observation_space"))
    if kind != (algo, env, observation_space):
        raise CheckpointError(
            f"checkpoint {path} is of {kind[0]} on {kind[1]} with observations {kind[2]}; this run is {algo} "
            f"on {env} with observations {observation_space}: resume it with its own config (--resume RUN_DIR)"
        )
    try:
        values = {k: decode(meta[k], arrays) for k in meta if k not in ("format", "files")}
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} is corrupt: state.json: {type(e).__name__}: {e}") from None
    _check_fields(path, values)
    replay = next((name.split("/")[0] for name in files if name.split("/")[0] in (REPLAY_FILE, REPLAY_FOLDER)), None)
    return TrainingState(**values, replay_path=None if replay is None else path / replay)
