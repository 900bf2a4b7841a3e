"""ColumnarEpisodes <-> pyarrow.Table: the documented, pickle-free storage schema (version 1).

One row per observation; each chunk's lookback rows come first, then its data rows.

=====================  ===============================  =============================================
column                 Arrow type                       meaning
=====================  ===============================  =============================================
``episode_index``      int32                            chunk number (counting up by 1 from the
                                                        table's first chunk; rows of a chunk are
                                                        contiguous)
``episode_id``         string                           the episode's ``id_`` (shared by its chunks)
``t``                  int64                            global timestep of this observation
``is_lookback``        bool                             row belongs to the chunk's lookback buffer
``terminated``         bool                             true only on the final row of a terminated
                                                        chunk
``truncated``          bool                             likewise for truncation
``obs[.<path>]``       leaf type (see below)            the observation
``action[.<path>]``    leaf type, nullable              action taken at this observation; null on a
                                                        chunk's last row
``reward``             leaf type, nullable              reward that action earned; null likewise
``extra_model_outputs  leaf type, nullable              model output ``key`` for that action; null
.<key>[.<path>]``                                       likewise
``infos``              string (JSON), nullable          the info dict as JSON; null for ``{}``;
                                                        absent if written with ``drop_infos=True``
=====================  ===============================  =============================================

Nested (Dict/Tuple) values are flattened into one column per leaf, named by their path
(``obs.camera``, ``obs.1.0``); dict keys must be strings without ``.``. A leaf whose rows are
scalars is a primitive column (bool, int*, uint*, float16/32/64, string); a leaf with per-row
shape ``S`` is a ``fixed_size_list`` of ``prod(S)`` values in C order. Every leaf field has
metadata ``dtype`` (numpy dtype string; ``str`` for numpy's variable-width ``StringDType``, a
``Text`` leaf) and ``shape`` (JSON list ``S``). The schema metadata
holds ``ray_sampler.schema_version`` and ``ray_sampler.structure`` (JSON: the nesting of
``obs``, ``action`` and each extra model output, as in :mod:`ray_sampler.data.tree`). Spaces are not
stored. Nothing is pickled: reading a table runs no code, and any Arrow tool can read it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ray_sampler.data import tree
from ray_sampler.data.columnar import ColumnarEpisodes, StepRows, row_offsets
from ray_sampler.data.spaces import STRING_DTYPE
from ray_sampler.errors import DataFormatError

__all__ = ["SCHEMA_VERSION", "arrow_to_columnar", "columnar_to_arrow"]

SCHEMA_VERSION = 1
_VERSION_KEY = b"ray_sampler.schema_version"
_STRUCTURE_KEY = b"ray_sampler.structure"
_BASE_COLUMNS = {
    "episode_index": pa.int32(),
    "episode_id": pa.string(),
    "t": pa.int64(),
    "is_lookback": pa.bool_(),
    "terminated": pa.bool_(),
    "truncated": pa.bool_(),
}
_LEAF_KINDS = "biuf?UT"
_STR = "str"
"""The dtype metadata of a column of numpy variable-width strings (``StringDType``)."""


class _Rows:
    """Row bookkeeping shared by both directions: which row is lookback, last, a step."""

    def __init__(self, lookback_lens: np.ndarray, lens: np.ndarray) -> None:
        self.sizes = lookback_lens + lens + 1
        self.starts = row_offsets(self.sizes)[:-1]
        self.num_rows = int(self.sizes.sum())
        self.pos = np.arange(self.num_rows, dtype=np.int64) - np.repeat(self.starts, self.sizes)
        self.is_lookback = self.pos < np.repeat(lookback_lens, self.sizes)
        self.is_last = self.pos == np.repeat(self.sizes - 1, self.sizes)
        self.is_data_step = ~self.is_lookback & ~self.is_last


# ---------------------------------------------------------------------------- writing
def columnar_to_arrow(col: ColumnarEpisodes, *, drop_infos: bool = False, first_index: int = 0) -> pa.Table:
    """The table of ``col`` (schema in the module docstring).

    Infos must be JSON-representable (dicts with str keys, lists, str, int, float, bool,
    None); anything else raises DataFormatError unless ``drop_infos=True`` leaves them out.
    ``first_index`` numbers the chunks from there (for tables written as parts of one file).
    """
    col.validate()
    rows = _Rows(col.lookback_lens, col.lens)
    columns: dict[str, pa.Array] = {
        "episode_index": pa.array(
            np.repeat(np.arange(first_index, first_index + col.num_episodes, dtype=np.int32), rows.sizes)
        ),
        "episode_id": pc.take(
            pa.array(col.ids, pa.string()), pa.array(np.repeat(np.arange(col.num_episodes), rows.sizes))
        ),
        "t": pa.array(np.repeat(col.t_started - col.lookback_lens, rows.sizes) + rows.pos),
        "is_lookback": pa.array(rows.is_lookback),
        "terminated": pa.array(rows.is_last & np.repeat(col.terminated, rows.sizes)),
        "truncated": pa.array(rows.is_last & np.repeat(col.truncated, rows.sizes)),
    }
    fields: dict[str, pa.Field] = {}
    structure: dict[str, Any] = {"extra_model_outputs": {}}
    data_side, lb_side = col.data, col.lookback
    step_fields = [("action", lb_side.actions, data_side.actions), ("reward", lb_side.rewards, data_side.rewards)]
    step_fields += [
        (f"extra_model_outputs.{_check_key(k, 'extra_model_outputs')}", lb_side.extra_model_outputs[k], v)
        for k, v in data_side.extra_model_outputs.items()
    ]
    for name, lookback, data, is_step in [("obs", lb_side.observations, data_side.observations, False)] + [
        (n, lb, d, True) for n, lb, d in step_fields
    ]:
        ref = data if _num_rows(data) or not _num_rows(lookback) else lookback
        spec = tree.spec_of(ref)
        if name.startswith("extra_model_outputs."):
            structure["extra_model_outputs"][name.split(".", 1)[1]] = spec
        elif name != "reward":
            structure[name] = spec
        elif spec is not None:
            raise DataFormatError(f"'rewards' must be an array of scalars (got a nested structure {spec})")
        data_mask = rows.is_data_step if is_step else ~rows.is_lookback
        for path, leaf in _leaves_with_paths(ref, name):
            lb_leaf = _leaf_at(lookback, path, name) if _num_rows(lookback) else None
            d_leaf = _leaf_at(data, path, name) if _num_rows(data) else None
            values = _merge(lb_leaf, d_leaf, leaf, rows, data_mask)
            valid = ~rows.is_last if is_step else None
            columns[path], fields[path] = _leaf_to_arrow(path, values, valid)
    if not drop_infos:
        columns["infos"] = _infos_to_arrow(col, rows)
    schema_fields = [pa.field(n, t) for n, t in _BASE_COLUMNS.items()]
    schema_fields += [fields.get(n, pa.field(n, columns[n].type)) for n in columns if n not in _BASE_COLUMNS]
    meta = {_VERSION_KEY: str(SCHEMA_VERSION).encode(), _STRUCTURE_KEY: json.dumps(structure).encode()}
    return pa.Table.from_arrays(list(columns.values()), schema=pa.schema(schema_fields, metadata=meta))


def _num_rows(struct: Any) -> int:
    return len(tree.first_leaf(struct))


def _check_key(key: Any, where: str) -> str:
    if not isinstance(key, str) or "." in key or not key:
        raise DataFormatError(f"keys in '{where}' must be non-empty str without '.' for Arrow columns (got {key!r})")
    return key


def _leaves_with_paths(struct: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(struct, dict):
        return [p for k, v in struct.items() for p in _leaves_with_paths(v, f"{prefix}.{_check_key(k, prefix)}")]
    if isinstance(struct, tuple):
        return [p for i, v in enumerate(struct) for p in _leaves_with_paths(v, f"{prefix}.{i}")]
    return [(prefix, struct)]


def _leaf_at(struct: Any, path: str, prefix: str) -> np.ndarray:
    for part in path[len(prefix) :].split(".")[1:]:
        try:
            struct = struct[part] if isinstance(struct, dict) else struct[int(part)]
        except (KeyError, IndexError, ValueError, TypeError):
            raise DataFormatError(f"lookback and data of '{prefix}' differ in structure at {path!r}") from None
    return struct


def _merge(
    lookback: np.ndarray | None, data: np.ndarray | None, ref: np.ndarray, rows: _Rows, data_mask: np.ndarray
) -> np.ndarray:
    parts = [p for p in (lookback, data) if p is not None]
    if any(p.shape[1:] != ref.shape[1:] for p in parts):
        raise DataFormatError(f"lookback and data rows differ in shape ({[p.shape[1:] for p in parts]})")
    dtype = np.result_type(*parts) if parts else ref.dtype
    out = np.zeros((rows.num_rows, *ref.shape[1:]), dtype=dtype)
    if lookback is not None:
        out[rows.is_lookback] = lookback
    if data is not None:
        out[data_mask] = data
    return out


def _leaf_to_arrow(name: str, values: np.ndarray, valid: np.ndarray | None) -> tuple[pa.Array, pa.Field]:
    if values.dtype.kind not in _LEAF_KINDS or (values.dtype.kind in "UT" and values.ndim > 1):
        raise DataFormatError(
            f"column {name!r} has dtype {values.dtype}; the Arrow form holds bool, int, uint, float "
            "and (scalar) str leaves"
        )
    mask = None if valid is None else pa.array(~valid)
    inner = values.shape[1:]
    if 0 in inner:
        raise DataFormatError(f"column {name!r} has rows of shape {inner}; the Arrow form holds no zero-size dims")
    if inner:
        flat = pa.array(np.ascontiguousarray(values).reshape(-1))
        arr = pa.FixedSizeListArray.from_arrays(flat, math.prod(inner), mask=mask)
    else:
        arr = pa.array(values, mask=None if valid is None else ~valid)
    # numpy's variable-width strings (a Text leaf) have no dtype string: "str" names them.
    meta = {"dtype": _STR if values.dtype.kind == "T" else values.dtype.str, "shape": json.dumps(list(inner))}
    return arr, pa.field(name, arr.type, metadata=meta)


def _infos_to_arrow(col: ColumnarEpisodes, rows: _Rows) -> pa.Array:
    texts: list[str | None] = [None] * rows.num_rows
    data_rows = np.flatnonzero(~rows.is_lookback)
    lookback_rows = np.flatnonzero(rows.is_lookback)
    for where, positions, values, row_map in (
        ("infos", col.data.info_rows, col.data.info_values, data_rows),
        ("lookback infos", col.lookback.info_rows, col.lookback.info_values, lookback_rows),
    ):
        for r, info in zip(positions.tolist(), values):
            _check_json(info, f"{where}[{r}]")
            texts[int(row_map[r])] = json.dumps(info, allow_nan=False)
    return pa.array(texts, pa.string())


def _check_json(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise DataFormatError(f"{where} has key {k!r}; JSON infos need str keys (or pass drop_infos=True)")
            _check_json(v, f"{where}[{k!r}]")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_json(v, f"{where}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise DataFormatError(
            f"{where} is {value}; JSON has no NaN or infinity (pass drop_infos=True to leave infos out)"
        )
    elif value is not None and not isinstance(value, (str, int, float)):
        raise DataFormatError(
            f"{where} is a {type(value).__module__}.{type(value).__qualname__}; the Arrow form holds "
            "JSON-representable infos (dict with str keys, list, str, int, float, bool, None); "
            "pass drop_infos=True to leave infos out"
        )


# ---------------------------------------------------------------------------- reading
def arrow_to_columnar(table: pa.Table) -> ColumnarEpisodes:
    """Reads a table written by ``columnar_to_arrow``; malformed tables raise DataFormatError."""
    structure = _read_metadata(table.schema)
    base = {name: _base_column(table, name, typ) for name, typ in _BASE_COLUMNS.items()}
    index = base["episode_index"]
    if len(index) == 0:
        raise DataFormatError("the table holds no rows (every chunk has at least one observation)")
    if not np.isin(np.diff(index), (0, 1)).all():
        raise DataFormatError("column 'episode_index' must count chunks up by 1 over contiguous rows")
    index = index - index[0]  # a row group read on its own starts where the file's numbering is
    sizes = np.bincount(index).astype(np.int64)
    starts = row_offsets(sizes)[:-1]
    lookback_lens = np.add.reduceat(base["is_lookback"].astype(np.int64), starts)
    lens = sizes - lookback_lens - 1
    rows = _Rows(lookback_lens, np.maximum(lens, 0))
    if (lens < 0).any() or rows.num_rows != len(index) or not np.array_equal(rows.is_lookback, base["is_lookback"]):
        raise DataFormatError("column 'is_lookback' must mark each chunk's first rows only, before >= 1 data row")
    if not np.array_equal(base["t"], np.repeat(base["t"][starts], sizes) + rows.pos):
        raise DataFormatError("column 't' must count up by 1 within each chunk")
    for flag in ("terminated", "truncated"):
        if (base[flag] & ~rows.is_last).any():
            raise DataFormatError(f"column {flag!r} may be true only on a chunk's last row")
    ids_col = table.column("episode_id")
    if not pc.all(pc.equal(ids_col, pc.take(ids_col, pa.array(np.repeat(starts, sizes))))).as_py():
        raise DataFormatError("column 'episode_id' must be constant within each chunk")

    def read(prefix: str, spec: Any, is_step: bool) -> tuple[Any, Any]:
        data_mask = rows.is_data_step if is_step else ~rows.is_lookback
        names = _spec_paths(spec, prefix)
        lookback_leaves, data_leaves = [], []
        for name in names:
            values = _read_leaf(table, name, ~rows.is_last if is_step else None)
            lookback_leaves.append(values[rows.is_lookback])
            data_leaves.append(values[data_mask])
        return tree.unflatten(spec, lookback_leaves), tree.unflatten(spec, data_leaves)

    lb_obs, obs = read("obs", structure["obs"], False)
    lb_act, act = read("action", structure["action"], True)
    lb_rew, rew = read("reward", None, True)
    emo = {k: read(f"extra_model_outputs.{k}", s, True) for k, s in structure["extra_model_outputs"].items()}
    (info_rows, info_values), (lb_info_rows, lb_info_values) = _read_infos(table, rows)
    col = ColumnarEpisodes(
        ids=ids_col.take(pa.array(starts)).to_pylist(),
        t_started=base["t"][starts] + lookback_lens,
        lens=lens,
        lookback_lens=lookback_lens,
        terminated=base["terminated"][starts + sizes - 1],
        truncated=base["truncated"][starts + sizes - 1],
        data=StepRows(
            observations=obs,
            actions=act,
            rewards=rew,
            extra_model_outputs={k: v[1] for k, v in emo.items()},
            info_rows=info_rows,
            info_values=info_values,
        ),
        lookback=StepRows(
            observations=lb_obs,
            actions=lb_act,
            rewards=lb_rew,
            extra_model_outputs={k: v[0] for k, v in emo.items()},
            info_rows=lb_info_rows,
            info_values=lb_info_values,
        ),
    )
    col.validate()
    return col


def _spec_paths(spec: Any, prefix: str) -> list[str]:
    """Column names of the leaves of a structure spec."""
    if spec is None:
        return [prefix]
    if (
        isinstance(spec, dict)
        and isinstance(spec.get("dict"), list)
        and spec["dict"]
        and all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) for e in spec["dict"])
    ):
        return [p for k, s in spec["dict"] for p in _spec_paths(s, f"{prefix}.{k}")]
    if isinstance(spec, dict) and isinstance(spec.get("tuple"), list) and spec["tuple"]:
        return [p for i, s in enumerate(spec["tuple"]) for p in _spec_paths(s, f"{prefix}.{i}")]
    raise DataFormatError(f"schema metadata 'ray_sampler.structure' has a malformed entry for {prefix!r}: {spec!r}")


def _read_metadata(schema: pa.Schema) -> dict[str, Any]:
    meta = schema.metadata or {}
    if _VERSION_KEY not in meta:
        raise DataFormatError(
            "not a ray-sampler episode table: schema metadata 'ray_sampler.schema_version' is missing"
        )
    try:
        version = int(meta[_VERSION_KEY])
    except ValueError:
        raise DataFormatError(f"'ray_sampler.schema_version' must be an int (got {meta[_VERSION_KEY]!r})") from None
    if version > SCHEMA_VERSION:
        raise DataFormatError(
            f"schema version {version} is newer than this ray-sampler reads (up to {SCHEMA_VERSION}); "
            "upgrade ray-sampler"
        )
    if version < 1:
        raise DataFormatError(f"'ray_sampler.schema_version' must be >= 1 (got {version})")
    try:
        structure = json.loads(meta.get(_STRUCTURE_KEY, b""))
        _ = structure["obs"], structure["action"]
        if not isinstance(structure["extra_model_outputs"], dict):
            raise TypeError("extra_model_outputs")
    except (ValueError, KeyError, TypeError):
        raise DataFormatError("schema metadata 'ray_sampler.structure' is missing or malformed") from None
    return structure


def _base_column(table: pa.Table, name: str, typ: pa.DataType) -> np.ndarray:
    if name not in table.column_names:
        raise DataFormatError(f"column {name!r} is missing")
    column = table.column(name)
    if column.type != typ:
        raise DataFormatError(f"column {name!r} must be {typ} (got {column.type})")
    if column.null_count:
        raise DataFormatError(f"column {name!r} must hold no nulls (got {column.null_count})")
    return column.to_numpy()


def _read_leaf(table: pa.Table, name: str, valid: np.ndarray | None) -> np.ndarray:
    """One leaf column as an array with a row per table row (null rows hold zeros)."""
    if name not in table.column_names:
        raise DataFormatError(f"column {name!r} is missing")
    field = table.schema.field(name)
    meta = field.metadata or {}
    try:
        name_of_dtype = meta[b"dtype"].decode()
        dtype = STRING_DTYPE if name_of_dtype == _STR else np.dtype(name_of_dtype)
        shape = tuple(json.loads(meta[b"shape"]))
        expected = pa.string() if dtype.kind in "UT" else pa.from_numpy_dtype(dtype)
    except (KeyError, ValueError, TypeError, pa.ArrowException):
        raise DataFormatError(f"column {name!r} lacks valid 'dtype'/'shape' field metadata") from None
    if dtype.kind not in _LEAF_KINDS or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
    ):
        raise DataFormatError(
            f"column {name!r} has dtype {dtype} and shape {list(shape)}, which the format does not hold"
        )
    if name == "reward" and shape:
        raise DataFormatError(f"column 'reward' must hold scalars (got shape {list(shape)})")
    arr = table.column(name).combine_chunks()
    is_valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if (valid is None and not is_valid.all()) or (valid is not None and not np.array_equal(is_valid, valid)):
        raise DataFormatError(f"column {name!r} has nulls where values belong (or values where nulls belong)")
    if shape:
        size = math.prod(shape)
        if not pa.types.is_fixed_size_list(arr.type) or arr.type.list_size != size or arr.type.value_type != expected:
            raise DataFormatError(f"column {name!r} must be fixed_size_list<{expected}>[{size}] (got {arr.type})")
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        if values.null_count:
            child_valid = values.is_valid().to_numpy(zero_copy_only=False).reshape(len(arr), size).all(axis=1)
            if not child_valid[is_valid].all():
                raise DataFormatError(f"column {name!r} has nulls inside list values")
        return _to_numpy(values, dtype, name).reshape(len(arr), *shape)
    if arr.type != expected:
        raise DataFormatError(f"column {name!r} must be {expected} (got {arr.type})")
    return _to_numpy(arr, dtype, name)


def _to_numpy(arr: pa.Array, dtype: np.dtype, name: str) -> np.ndarray:
    if arr.null_count:
        zero = {"U": "", "T": "", "b": False}.get(dtype.kind, 0)
        arr = arr.fill_null(pa.scalar(zero, arr.type))
    out = arr.to_numpy(zero_copy_only=False)
    if dtype.kind == "U":
        out = out.astype(str)
        if out.dtype.itemsize > dtype.itemsize:
            raise DataFormatError(f"column {name!r} holds strings longer than its dtype {dtype} allows")
    return out.astype(dtype, copy=False)


def _read_infos(table: pa.Table, rows: _Rows) -> tuple[tuple[np.ndarray, list], tuple[np.ndarray, list]]:
    empty: tuple[np.ndarray, list] = (np.zeros(0, np.int64), [])
    if "infos" not in table.column_names:
        return empty, empty
    column = table.column("infos")
    if column.type != pa.string():
        raise DataFormatError(f"column 'infos' must be string (JSON) (got {column.type})")
    present = column.is_valid().to_numpy(zero_copy_only=False)
    texts = column.filter(pa.array(present)).to_pylist()
    values = []
    for text in texts:
        try:
            info = json.loads(text)
        except ValueError:
            raise DataFormatError(f"column 'infos' holds text that is not JSON: {text[:60]!r}") from None
        if not isinstance(info, dict):
            raise DataFormatError(f"column 'infos' must hold JSON objects (got {text[:60]!r})")
        values.append(info)
    data_index = np.cumsum(~rows.is_lookback) - 1
    lookback_index = np.cumsum(rows.is_lookback) - 1
    where = np.flatnonzero(present)
    is_lb = rows.is_lookback[where]
    data_sel, lb_sel = np.flatnonzero(~is_lb), np.flatnonzero(is_lb)
    return (
        (data_index[where[data_sel]].astype(np.int64), [values[i] for i in data_sel.tolist()]),
        (lookback_index[where[lb_sel]].astype(np.int64), [values[i] for i in lb_sel.tolist()]),
    )
