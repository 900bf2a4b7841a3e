"""``ray-sampler export``: a trained policy as ONNX (torch modules) or as npz weights plus a JSON spec (numpy ones).

Both forms answer what ``Policy.compute_actions(obs, explore=False)`` answers: the greedy action of
each row of an observation batch. ``export_onnx`` traces a torch module with torch's ONNX exporter
(the ``export`` extra): the graph takes ``obs`` [N, ...] float32 and gives ``logits`` (the module's
``action_dist_inputs``) and ``actions`` (argmax, or the Gaussian's mean clipped to the bounds, in the
env's action dtype). A ``MeanStdFilter`` among the policy's env-to-module pieces is folded into the
graph and also written beside it as ``<name>.filter.json``. ``export_npz`` writes a numpy
``MLPModule``'s or ``QModule``'s weights as a ``.npz`` (no pickle) and a ``.json`` spec that a few
lines of numpy evaluate (docs/export.md has them). A multi-agent policy becomes a folder of one
file (pair) per module, named by module id, and ``mapping.json``.

What neither form can hold is refused with one line naming the policy's field: recurrent modules,
pieces that read an episode's history (frame stacking, previous actions), user module-to-env
pieces, observation spaces other than a Box, action spaces other than Discrete or a 1-D Box.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import importlib.util
import io
import json
import logging
import math
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
import tyro

from connectors.common.mean_std_filter import MeanStdFilter, combine_moments
from ray_sampler.cli.options import UsageError
from ray_sampler.data.state_files import write_bytes
from ray_sampler.errors import ConfigError
from ray_sampler.modules.mlp_module import MLPModule
from ray_sampler.modules.q_module import QModule
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.policy import MultiAgentPolicy, Policy, load_policy
from ray_sampler.policy.policy import POLICY_FILE, class_path

__all__ = [
    "EXPORT_EXTRA_HINT",
    "FILTER_FORMAT",
    "MAPPING_FILE",
    "NPZ_FORMAT",
    "ONNX_FORMAT",
    "ExportCommand",
    "ExportFormat",
    "default_out",
    "export_npz",
    "export_onnx",
    "run_export",
]

ONNX_FORMAT = "ray-sampler-onnx/1"
"""The ``format`` entry of an exported ONNX model's metadata."""
NPZ_FORMAT = "ray-sampler-npz/1"
"""The ``format`` of an npz export's JSON spec."""
FILTER_FORMAT = "ray-sampler-filter/1"
"""The ``format`` of a ``<name>.filter.json`` beside an ONNX model."""
MAPPING_FILE = "mapping.json"
"""A multi-agent export's agent -> module id mapping, in its folder."""
EXPORT_EXTRA_HINT = "pip install 'ray-sampler[export]'"
"""How to get torch's ONNX exporter's dependencies (onnx, onnxscript)."""
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_NUMPY_MODULES = (MLPModule, QModule)
_NOISY_LOGGERS = ("torch.onnx._internal.exporter._registration", "onnx_ir._convenience")
_HOW_TO_ACT = (
    "x = float64(obs); if filter and filter.is_applied: x = clip((x - mean) / (std + epsilon), -clip, clip); "
    "x = float32(x).reshape(N, -1); for i < num_layers: x = x @ {head}.i.w + {head}.i.b, then activation "
    "except after the last layer; Discrete: argmax(x) + start; Box: x (the mean) in the action dtype, "
    "if normalize_actions: low + (clip(x, -1, 1) + 1) * 0.5 * (high - low); then clip(x, low, high)"
)
"""How an npz export's JSON spec says to compute an action (its ``compute_action``)."""


class ExportFormat(str, enum.Enum):
    """What ``ray-sampler export`` writes."""

    AUTO = "auto"
    """ONNX for torch modules, npz for numpy ones."""
    ONNX = "onnx"
    NPZ = "npz"


# ---------------------------------------------------------------------------------------- checks
def _is_torch(module: Any) -> bool:
    return getattr(type(module), "framework", None) == "torch"


def _checked(policy: Policy, where: str) -> MeanStdFilter | None:
    """The policy's MeanStdFilter (None if it has none); ConfigError for what no export holds."""
    module = policy.module
    if is_stateful(module):
        raise ConfigError(
            f"{where} 'module' must be stateless to export (got {type(module).__name__}, a recurrent module whose "
            "actions depend on a state carried between steps)"
        )
    filters: list[MeanStdFilter] = []
    for piece in policy.env_to_module_connectors:
        if type(piece) is not MeanStdFilter:
            raise ConfigError(
                f"{where} 'env_to_module_connectors' may hold only a MeanStdFilter to export (got "
                f"{type(piece).__name__}; frame stacking and previous actions/rewards read an episode's history)"
            )
        filters.append(piece)
    if len(filters) > 1:
        raise ConfigError(
            f"{where} 'env_to_module_connectors' may hold one MeanStdFilter to export (got {len(filters)})"
        )
    if policy.module_to_env_connectors:
        names = ", ".join(type(p).__name__ for p in policy.module_to_env_connectors)
        raise ConfigError(f"{where} 'module_to_env_connectors' must be empty to export (got {names})")
    space = policy.observation_space
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(f"{where} 'observation_space' must be a Box to export (got {space})")
    actions = policy.action_space
    if not (
        isinstance(actions, gym.spaces.Discrete) or (isinstance(actions, gym.spaces.Box) and len(actions.shape) == 1)
    ):
        raise ConfigError(f"{where} 'action_space' must be Discrete or a 1-D Box to export (got {actions})")
    return filters[0] if filters else None


def _targets(policy: Policy | MultiAgentPolicy, path: Path, suffix: str) -> Iterator[tuple[str, Policy, Path]]:
    """(module id, its policy, its file): ``path`` itself for a single-agent policy; for a multi-agent
    one, ``<module id><suffix>`` in the folder ``path``."""
    if isinstance(policy, MultiAgentPolicy):
        for mid, module_policy in policy.policies.items():
            if not _FILE_NAME.fullmatch(mid):
                raise ConfigError(
                    f"module id {mid!r} cannot name an exported file: letters, digits, '.', '_' and '-' allowed"
                )
            yield mid, module_policy, path / f"{mid}{suffix}"
    else:
        yield "default_policy", policy, path


def _box(space: gym.Space) -> gym.spaces.Box:
    """``space``, which ``_checked`` found to be a Box."""
    assert isinstance(space, gym.spaces.Box), "_checked lets only Box spaces through here"
    return space


def _where(policy: Policy | MultiAgentPolicy, mid: str) -> str:
    return f"module {mid!r} of the policy" if isinstance(policy, MultiAgentPolicy) else "policy"


# ---------------------------------------------------------------------------------------- plain JSON
def _plain(value: Any) -> Any:
    """``value`` (arrays, numpy scalars) as JSON: lists and floats, NaN and inf as strings ("inf")."""
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _space_json(space: gym.Space) -> dict[str, Any]:
    """A Box or Discrete space in plain JSON (bounds as nested lists)."""
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start), "dtype": str(space.dtype)}
    assert isinstance(space, gym.spaces.Box), "_checked let only Box and Discrete spaces through"
    return {
        "type": "Box",
        "shape": list(space.shape),
        "dtype": str(space.dtype),
        "low": _plain(space.low),
        "high": _plain(space.high),
    }


def _moments(piece: MeanStdFilter) -> tuple[float, np.ndarray | None, np.ndarray | None]:
    """(count, mean, std) of every observation the filter knows, float64, as ``normalize`` takes them."""
    state = piece.get_state()
    moments = combine_moments(dict(state["global"]), dict(state["local"]))
    count = float(moments["count"])
    if not count:
        return count, None, None
    return count, np.asarray(moments["mean"], np.float64), np.sqrt(np.asarray(moments["m2"], np.float64) / count)


def _filter_json(piece: MeanStdFilter) -> dict[str, Any]:
    """The filter's moments and settings in plain JSON (see docs/export.md)."""
    count, mean, std = _moments(piece)
    return {
        "type": "MeanStdFilter",
        "count": count,
        "is_applied": count > 1,
        "mean": _plain(mean),
        "std": _plain(std),
        "clip": float(piece.clip),
        "epsilon": float(piece.epsilon),
    }


def _info(policy: Policy | MultiAgentPolicy) -> dict[str, Any]:
    """What the run says of itself (algo, env, iteration), its plain entries only."""
    return {k: v for k, v in policy.info.items() if isinstance(v, str | int | float | bool) or v is None}


def _write_json(path: Path, body: dict[str, Any]) -> None:
    write_bytes(path, (json.dumps(body, indent=1, allow_nan=False) + "\n").encode())


def _write_mapping(policy: MultiAgentPolicy, folder: Path, suffix: str) -> Path:
    body = {
        "mapping": [[agent, mid] for agent, mid in policy.mapping.items()],
        "files": {mid: f"{mid}{suffix}" for mid in policy.policies},
        "info": _info(policy),
    }
    _write_json(folder / MAPPING_FILE, body)
    return folder / MAPPING_FILE


# ---------------------------------------------------------------------------------------- ONNX
def export_onnx(policy: Policy | MultiAgentPolicy, path: Path | str) -> list[Path]:
    """Writes ``policy`` (torch modules) as ONNX: the file ``path`` for a single-agent policy, a folder
    of ``<module id>.onnx`` and ``mapping.json`` for a multi-agent one; a MeanStdFilter is folded in and
    also written as ``<name>.filter.json``. Returns the files written. ConfigError (one line naming the
    field) for a policy it cannot export, before anything is written."""
    path = Path(path)
    targets = list(_targets(policy, path, ".onnx"))
    checked = []
    for mid, module_policy, file in targets:
        where = _where(policy, mid)
        if not _is_torch(module_policy.module):
            raise ConfigError(
                f"{where} 'module' must be a torch module to export as ONNX (got the numpy "
                f"{type(module_policy.module).__name__}: export it as npz)"
            )
        checked.append((module_policy, file, _checked(module_policy, where), where))
    missing = [name for name in ("torch", "onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"ONNX export needs torch, onnx and onnxscript ({EXPORT_EXTRA_HINT}; missing: {missing})")
    written: list[Path] = []
    for module_policy, file, piece, where in checked:
        file.parent.mkdir(parents=True, exist_ok=True)
        _write_onnx(module_policy, piece, file, where)
        written.append(file)
        if piece is not None:
            beside = file.with_name(f"{file.stem}.filter.json")
            _write_json(beside, {"format": FILTER_FORMAT, "folded_into": file.name, **_filter_json(piece)})
            written.append(beside)
    if isinstance(policy, MultiAgentPolicy):
        written.append(_write_mapping(policy, path, ".onnx"))
    return written


def _write_onnx(policy: Policy, piece: MeanStdFilter | None, file: Path, where: str) -> None:
    import torch

    graph = _graph(policy, piece)
    example = torch.zeros((3, *_box(policy.observation_space).shape), dtype=torch.float32)
    name = type(policy.module).__name__
    try:
        with _quiet(), warnings.catch_warnings():  # torch's own deprecation notices, nothing the user can act on
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            # Strict (dynamo) capture: the modules' len(obs) stays the symbolic batch size, where the
            # exporter's own non-strict capture would bake in the example's 3.
            exported = torch.export.export(
                graph, (example,), dynamic_shapes={"obs": {0: torch.export.Dim("batch")}}, strict=True
            )
            program = torch.onnx.export(
                exported, input_names=["obs"], output_names=["logits", "actions"], dynamo=True, verbose=False
            )
    except ImportError as e:
        raise ConfigError(f"ONNX export needs onnx and onnxscript ({EXPORT_EXTRA_HINT}): {e}") from None
    except Exception as e:  # a user's module the exporter cannot trace: one line, the cause chained
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise ConfigError(f"{where} 'module' {name} cannot be exported as ONNX: {first}") from e
    assert program is not None, "torch.onnx.export(dynamo=True) returns the program"
    metadata = {
        "format": ONNX_FORMAT,
        "module_class": class_path(type(policy.module)),
        "observation_space": json.dumps(_space_json(policy.observation_space)),
        "action_space": json.dumps(_space_json(policy.action_space)),
        "normalize_actions": json.dumps(policy.normalize_actions),
        "filter": "none" if piece is None else f"MeanStdFilter folded in: {file.stem}.filter.json",
        "info": json.dumps(_info(policy)),
    }
    program.model.metadata_props.update(metadata)
    tmp = file.with_name(f".{file.name}.tmp")
    program.save(tmp, external_data=False)
    os.replace(tmp, file)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter's loggers at ERROR inside: they warn of every torchvision op they cannot register
    and of empty attribute lists, noise for these graphs."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _graph(policy: Policy, piece: MeanStdFilter | None) -> Any:
    """A torch module from ``obs`` [N, ...] float32 to (logits, actions), as ``compute_actions``
    computes them: the filter (in float64, as ``MeanStdFilter.normalize``), flattening, the module's
    inference forward, then the greedy action fitted to the action space."""
    import torch

    module = copy.deepcopy(policy.module).eval()  # a copy: the caller's module keeps its mode
    obs_space, act_space = policy.observation_space, policy.action_space
    param = next(module.parameters(), None)
    float_dtype = torch.float32 if param is None else param.dtype
    flatten = getattr(module, "needs_flat_observations", True) and len(_box(obs_space).shape) != 1
    count, mean, std = (0.0, None, None) if piece is None else _moments(piece)
    is_filtered = mean is not None and std is not None and count > 1  # normalize's rule: more than one sample
    clip, epsilon = (0.0, 0.0) if piece is None else (float(piece.clip), float(piece.epsilon))
    act_dtype = torch.from_numpy(np.zeros(0, act_space.dtype)).dtype
    start = int(act_space.start) if isinstance(act_space, gym.spaces.Discrete) else 0
    act_width = 0 if isinstance(act_space, gym.spaces.Discrete) else _box(act_space).shape[0]

    class PolicyGraph(torch.nn.Module):
        mean: torch.Tensor
        denominator: torch.Tensor
        low: torch.Tensor
        high: torch.Tensor
        span: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.module = module
            if is_filtered:
                assert mean is not None and std is not None, "is_filtered implies moments"
                self.register_buffer("mean", torch.from_numpy(mean))
                self.register_buffer("denominator", torch.from_numpy(std + epsilon))  # as normalize adds it
            if isinstance(act_space, gym.spaces.Box):
                self.register_buffer("low", torch.from_numpy(np.asarray(act_space.low).copy()))
                self.register_buffer("high", torch.from_numpy(np.asarray(act_space.high).copy()))
                self.register_buffer("span", torch.from_numpy(np.asarray(act_space.high - act_space.low)))

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            x = obs
            if is_filtered:
                x = torch.clamp((x.to(torch.float64) - self.mean) / self.denominator, -clip, clip).to(torch.float32)
            if flatten:
                x = torch.flatten(x, 1)
            # The tensor forward: the public forward_inference converts to numpy, which no graph traces.
            out = self.module._forward_inference({"obs": x.to(float_dtype)})  # noqa: SLF001
            logits = out["action_dist_inputs"]
            actions = out.get("actions")
            if isinstance(act_space, gym.spaces.Discrete):
                if actions is None:
                    actions = torch.argmax(logits, dim=-1) + start
                return logits, actions.to(act_dtype)
            if actions is None:
                actions = logits[..., :act_width].to(act_dtype)  # the Gaussian's mean
            if policy.normalize_actions:
                actions = self.low + (torch.clamp(actions, -1.0, 1.0) + 1.0) * 0.5 * self.span
            return logits, torch.minimum(torch.maximum(actions, self.low), self.high).to(act_dtype)

    return PolicyGraph().eval()


# ---------------------------------------------------------------------------------------- npz
def export_npz(policy: Policy | MultiAgentPolicy, path: Path | str) -> list[Path]:
    """Writes ``policy`` (numpy MLPModule or QModule) as its weights in ``.npz`` (no pickle) and a JSON
    spec beside it (``path`` with the suffix ``.json``): the file ``path`` for a single-agent policy, a
    folder of ``<module id>.npz`` / ``.json`` and ``mapping.json`` for a multi-agent one. Returns the
    files written. ConfigError (one line naming the field) for a policy it cannot export."""
    path = Path(path)
    targets = list(_targets(policy, path, ".npz"))
    checked = []
    for mid, module_policy, file in targets:
        where = _where(policy, mid)
        module = module_policy.module
        if type(module) not in _NUMPY_MODULES:
            hint = "export it as ONNX" if _is_torch(module) else "only the built-in numpy modules have this form"
            raise ConfigError(
                f"{where} 'module' must be an MLPModule or QModule to export as npz (got {type(module).__name__}: "
                f"{hint})"
            )
        checked.append((module_policy, file, _checked(module_policy, where)))
    written: list[Path] = []
    for module_policy, file, piece in checked:
        file.parent.mkdir(parents=True, exist_ok=True)
        written += _write_npz(module_policy, piece, file)
    if isinstance(policy, MultiAgentPolicy):
        written.append(_write_mapping(policy, path, ".npz"))
    return written


def _write_npz(policy: Policy, piece: MeanStdFilter | None, file: Path) -> list[Path]:
    module = policy.module
    is_q = isinstance(module, QModule)
    head = "q" if is_q else "pi"
    weights = {k: np.asarray(v) for k, v in module.get_state().items() if k != "epsilon"}
    num_layers = sum(1 for k in weights if k.startswith(f"{head}.") and k.endswith(".w"))
    sizes = [int(weights[f"{head}.0.w"].shape[0])] + [int(weights[f"{head}.{i}.w"].shape[1]) for i in range(num_layers)]
    if is_q:
        output = "q_values"
    elif isinstance(policy.action_space, gym.spaces.Box):
        output = "mean"
    else:
        output = "logits"
    spec = {
        "format": NPZ_FORMAT,
        "module_class": class_path(type(module)),
        "weights": file.name,
        "head": head,
        "num_layers": num_layers,
        "layer_sizes": sizes,
        "activation": module.activation if is_q else "tanh",
        "output": output,
        "observation_space": _space_json(policy.observation_space),
        "action_space": _space_json(policy.action_space),
        "normalize_actions": policy.normalize_actions,
        "filter": None if piece is None else _filter_json(piece),
        "compute_action": _HOW_TO_ACT,
        "info": _info(policy),
    }
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **weights)
    write_bytes(file, buffer.getvalue())
    beside = file.with_suffix(".json")
    _write_json(beside, spec)
    return [file, beside]


# ---------------------------------------------------------------------------------------- the command
def default_out(checkpoint: Path) -> Path:
    """Where ``ray-sampler export`` writes without ``--out``: ``export/`` in the run directory or
    checkpoint (for a policy folder, in the run directory or checkpoint holding it, or in itself)."""
    checkpoint = Path(checkpoint)
    if (checkpoint / POLICY_FILE).is_file() and checkpoint.name == "policy":
        return checkpoint.parent / "export"
    return checkpoint / "export"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportCommand:
    """Export a trained policy: ONNX for torch modules (a MeanStdFilter folded in), npz weights and a
    JSON spec for numpy ones (see docs/export.md)."""

    checkpoint: tyro.conf.Positional[Annotated[Path, tyro.conf.arg(metavar="CHECKPOINT")]]
    """A run directory, a checkpoint (ckpt-N) or a policy folder."""
    format: ExportFormat = ExportFormat.AUTO
    """onnx (torch modules), npz (numpy MLPModule, QModule), or auto: whichever the module's framework takes."""
    out: Path | None = None
    """The folder to write into (default: export/ in the run directory or checkpoint); for a
    single-agent policy also the file itself (ending .onnx or .npz)."""


def run_export(command: ExportCommand) -> list[Path]:
    """``ray-sampler export``: loads the policy (no Ray), writes it, prints each file written."""
    if not command.checkpoint.exists():
        raise UsageError(f"CHECKPOINT {command.checkpoint} does not exist (a run directory, checkpoint or policy)")
    policy = load_policy(command.checkpoint)
    modules = policy.policies.values() if isinstance(policy, MultiAgentPolicy) else [policy]
    fmt = command.format
    if fmt is ExportFormat.AUTO:
        fmt = ExportFormat.ONNX if any(_is_torch(p.module) for p in modules) else ExportFormat.NPZ
    suffix = f".{fmt.value}"
    out = command.out if command.out is not None else default_out(command.checkpoint)
    if out.suffix.lower() in (".onnx", ".npz"):
        if isinstance(policy, MultiAgentPolicy):
            raise UsageError(f"--out must be a folder for a multi-agent policy (got {out})")
        if out.suffix.lower() != suffix:
            raise UsageError(f"--out must be a folder or a {suffix} file for --format {fmt.value} (got {out})")
        target = out
    else:
        target = out if isinstance(policy, MultiAgentPolicy) else out / f"policy{suffix}"
    try:
        written = (export_onnx if fmt is ExportFormat.ONNX else export_npz)(policy, target)
    except ConfigError as e:
        raise UsageError(f"--format {fmt.value}: {e}") from None
    if isinstance(policy, MultiAgentPolicy):
        what = f"multi-agent policy (modules {', '.join(policy.policies)})"
    else:
        what = f"{type(policy.module).__name__} policy"
    print(f"exported the {what} of {command.checkpoint} as {fmt.value}:")
    for file in written:
        print(f"  {file}")
    return written
