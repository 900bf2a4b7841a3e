"""The Arrow/Parquet form: lossless round trips, documented schema, no pickle, clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ray_sampler.data.arrow_format import SCHEMA_VERSION, arrow_to_columnar, columnar_to_arrow
from ray_sampler.data.columnar import columnar_to_episodes, episodes_to_columnar
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.errors import DataFormatError
from tests.helpers import SPACES, assert_episodes_equal, episode_from_space
from tests.ray_sampler.data.test_columnar import chunk_catalogue


def table_of(chunks: list[SingleAgentEpisode], **kwargs: bool) -> pa.Table:
    return columnar_to_arrow(episodes_to_columnar(chunks), **kwargs)


@pytest.mark.parametrize("name", list(SPACES), ids=list(SPACES))
def test_parquet_round_trip_over_spaces(name: str, tmp_path: Path) -> None:
    chunks = chunk_catalogue(SPACES[name])
    pq.write_table(table_of(chunks), tmp_path / "episodes.parquet")
    back = columnar_to_episodes(arrow_to_columnar(pq.read_table(tmp_path / "episodes.parquet")))
    assert len(back) == len(chunks)
    for original, restored in zip(chunks, back, strict=True):
        assert_episodes_equal(restored, original)


def test_string_observations_round_trip() -> None:
    ep = SingleAgentEpisode(observations=["obs_0", "obs_1", "obs_22"], actions=["a", "b"], rewards=[0.5, 1.5])
    (back,) = columnar_to_episodes(arrow_to_columnar(table_of([ep])))
    assert back.get_observations().tolist() == ["obs_0", "obs_1", "obs_22"]
    assert back.get_actions().tolist() == ["a", "b"]


def test_rows_follow_the_documented_schema() -> None:
    ep = SingleAgentEpisode(
        "e1",
        observations=[np.array([0.0]), np.array([1.0]), np.array([2.0])],
        actions=[0, 1],
        rewards=[1.0, 2.0],
        terminated=True,
        infos=[{}, {"a": 1}, {}],
        extra_model_outputs={"logp": [-0.1, -0.2]},
    )
    cont_src = SingleAgentEpisode(
        "e2",
        observations=[np.array([5.0]), np.array([6.0])],
        actions=[1],
        rewards=[3.0],
        extra_model_outputs={"logp": [-0.3]},
        t_started=4,
    )
    cont = cont_src.cut(1)
    table = table_of([ep, cont])
    assert table.column_names == [
        "episode_index",
        "episode_id",
        "t",
        "is_lookback",
        "terminated",
        "truncated",
        "obs",
        "action",
        "reward",
        "extra_model_outputs.logp",
        "infos",
    ]
    rows = table.to_pylist()
    assert [r["episode_index"] for r in rows] == [0, 0, 0, 1, 1]
    assert [r["episode_id"] for r in rows] == ["e1", "e1", "e1", "e2", "e2"]
    assert [r["t"] for r in rows] == [0, 1, 2, 4, 5]
    assert [r["is_lookback"] for r in rows] == [False, False, False, True, False]
    assert [r["terminated"] for r in rows] == [False, False, True, False, False]
    assert [r["obs"] for r in rows] == [[0.0], [1.0], [2.0], [5.0], [6.0]]
    assert [r["action"] for r in rows] == [0, 1, None, 1, None]
    assert [r["reward"] for r in rows] == [1.0, 2.0, None, 3.0, None]
    assert [r["infos"] for r in rows] == [None, '{"a": 1}', None, None, None]
    meta = table.schema.metadata
    assert meta[b"ray_sampler.schema_version"] == str(SCHEMA_VERSION).encode()
    assert json.loads(meta[b"ray_sampler.structure"]) == {
        "obs": None,
        "action": None,
        "extra_model_outputs": {"logp": None},
    }
    assert table.schema.field("obs").metadata == {b"dtype": b"<f8", b"shape": b"[1]"}


def _plain_types(typ: pa.DataType) -> bool:
    if pa.types.is_fixed_size_list(typ):
        return _plain_types(typ.value_type)
    return pa.types.is_boolean(typ) or pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_string(typ)


@pytest.mark.parametrize("name", list(SPACES), ids=list(SPACES))
def test_no_binary_or_extension_columns(name: str) -> None:
    # Only plain numbers, bools and strings: nothing that could hold a pickle.
    table = table_of(chunk_catalogue(SPACES[name]))
    assert all(_plain_types(field.type) for field in table.schema)


def test_json_infos_round_trip_nested_values() -> None:
    info = {"a": [1, 2.5, "x", None, True], "b": {"c": {"d": -3}}}
    ep = SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0], infos=[{}, info])
    (back,) = columnar_to_episodes(arrow_to_columnar(table_of([ep])))
    assert back.get_infos() == [{}, info]


@pytest.mark.parametrize(
    ("info", "match"),
    [
        ({"x": np.int64(1)}, r"infos\[1\]\['x'\] is a numpy.int64"),
        ({"x": (1, 2)}, r"infos\[1\]\['x'\] is a builtins.tuple"),
        ({"x": {3: "a"}}, r"has key 3; JSON infos need str keys"),
        ({"x": [object()]}, r"infos\[1\]\['x'\]\[0\] is a builtins.object"),
    ],
    ids=["numpy_int", "tuple", "int_key", "object"],
)
def test_non_json_infos_raise_naming_the_place(info: dict, match: str) -> None:
    ep = SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0], infos=[{}, info])
    with pytest.raises(DataFormatError, match=match):
        table_of([ep])


def test_drop_infos_leaves_them_out_when_asked() -> None:
    ep = SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0], infos=[{}, {"x": np.int64(1)}])
    table = table_of([ep], drop_infos=True)
    assert "infos" not in table.column_names
    (back,) = columnar_to_episodes(arrow_to_columnar(table))
    assert back.get_infos() == [{}, {}]


def test_unsupported_leaf_dtype_raises() -> None:
    ep = SingleAgentEpisode(observations=[np.array([1 + 2j]), np.array([3j])], actions=[0], rewards=[0.0])
    with pytest.raises(DataFormatError, match="column 'obs' has dtype complex128"):
        table_of([ep])


def test_dict_keys_with_dots_raise() -> None:
    ep = SingleAgentEpisode(observations=[{"a.b": 1}, {"a.b": 2}], actions=[0], rewards=[0.0])
    with pytest.raises(DataFormatError, match=re.escape("keys in 'obs' must be non-empty str without '.'")):
        table_of([ep])


# ------------------------------------------------------------------ malformed tables
@pytest.fixture
def good_table() -> pa.Table:
    return table_of(chunk_catalogue(SPACES["box_f32_3"]))


def _with_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    i = table.column_names.index(name)
    return table.set_column(i, table.schema.field(name).with_type(values.type), values)


def _with_meta(table: pa.Table, **changes: bytes) -> pa.Table:
    meta = dict(table.schema.metadata)
    meta.update({k.replace("__", ".").encode(): v for k, v in changes.items()})
    return table.replace_schema_metadata(meta)


def test_missing_schema_version_raises(good_table: pa.Table) -> None:
    with pytest.raises(DataFormatError, match="not a ray-sampler episode table"):
        arrow_to_columnar(good_table.replace_schema_metadata({}))


def test_newer_schema_version_raises(good_table: pa.Table) -> None:
    with pytest.raises(DataFormatError, match="schema version 2 is newer than this ray-sampler reads"):
        arrow_to_columnar(_with_meta(good_table, ray_sampler__schema_version=b"2"))


def test_malformed_structure_raises(good_table: pa.Table) -> None:
    with pytest.raises(DataFormatError, match=re.escape("'ray_sampler.structure' is missing or malformed")):
        arrow_to_columnar(_with_meta(good_table, ray_sampler__structure=b"{not json"))
    with pytest.raises(DataFormatError, match="malformed entry for 'obs'"):
        arrow_to_columnar(
            _with_meta(
                good_table,
                ray_sampler__structure=json.dumps({"obs": "x", "action": None, "extra_model_outputs": {}}).encode(),
            )
        )


def test_missing_column_raises(good_table: pa.Table) -> None:
    with pytest.raises(DataFormatError, match="column 'obs' is missing"):
        arrow_to_columnar(good_table.drop_columns(["obs"]))
    with pytest.raises(DataFormatError, match="column 't' is missing"):
        arrow_to_columnar(good_table.drop_columns(["t"]))


def test_wrong_column_type_raises(good_table: pa.Table) -> None:
    t = good_table.column("t").cast(pa.float64())
    with pytest.raises(DataFormatError, match="column 't' must be int64"):
        arrow_to_columnar(_with_column(good_table, "t", t.combine_chunks()))
    reward = good_table.column("reward").cast(pa.float32()).combine_chunks()
    with pytest.raises(DataFormatError, match="column 'reward' must be double"):
        arrow_to_columnar(_with_column(good_table, "reward", reward))


def test_time_that_does_not_count_up_raises(good_table: pa.Table) -> None:
    t = good_table.column("t").to_numpy().copy()
    t[3] += 5
    with pytest.raises(DataFormatError, match="column 't' must count up by 1"):
        arrow_to_columnar(_with_column(good_table, "t", pa.array(t)))


def test_null_reward_in_the_middle_raises(good_table: pa.Table) -> None:
    rewards = good_table.column("reward").to_pylist()
    rewards[1] = None
    with pytest.raises(DataFormatError, match="column 'reward' has nulls where values belong"):
        arrow_to_columnar(_with_column(good_table, "reward", pa.array(rewards, pa.float64())))


def test_value_on_a_last_row_raises(good_table: pa.Table) -> None:
    rewards = good_table.column("reward").to_pylist()
    last = good_table.column("terminated").to_pylist().index(True)
    rewards[last] = 1.0
    with pytest.raises(DataFormatError, match="or values where nulls belong"):
        arrow_to_columnar(_with_column(good_table, "reward", pa.array(rewards, pa.float64())))


def test_episode_index_gap_raises(good_table: pa.Table) -> None:
    index = good_table.column("episode_index").to_numpy().copy()
    index[index == 4] = 6
    with pytest.raises(DataFormatError, match="'episode_index' must count chunks up by 1"):
        arrow_to_columnar(_with_column(good_table, "episode_index", pa.array(index)))


def test_lookback_row_after_data_raises(good_table: pa.Table) -> None:
    is_lookback = good_table.column("is_lookback").to_numpy(zero_copy_only=False).copy()
    is_lookback[2] = True
    with pytest.raises(DataFormatError, match="'is_lookback' must mark each chunk's first rows"):
        arrow_to_columnar(_with_column(good_table, "is_lookback", pa.array(is_lookback)))


def test_terminated_before_last_row_raises(good_table: pa.Table) -> None:
    terminated = good_table.column("terminated").to_numpy(zero_copy_only=False).copy()
    terminated[0] = True
    with pytest.raises(DataFormatError, match="'terminated' may be true only on a chunk's last row"):
        arrow_to_columnar(_with_column(good_table, "terminated", pa.array(terminated)))


def test_episode_id_changing_within_chunk_raises(good_table: pa.Table) -> None:
    ids = good_table.column("episode_id").to_pylist()
    ids[1] = "someone-else"
    with pytest.raises(DataFormatError, match="'episode_id' must be constant within each chunk"):
        arrow_to_columnar(_with_column(good_table, "episode_id", pa.array(ids)))


def test_infos_that_are_not_json_raise(good_table: pa.Table) -> None:
    infos = good_table.column("infos").to_pylist()
    infos[0] = "{broken"
    with pytest.raises(DataFormatError, match="not JSON"):
        arrow_to_columnar(_with_column(good_table, "infos", pa.array(infos, pa.string())))


def test_leaf_metadata_that_lies_about_shape_raises(good_table: pa.Table) -> None:
    i = good_table.column_names.index("obs")
    field = good_table.schema.field("obs").with_metadata({b"dtype": b"<f4", b"shape": b"[5]"})
    bad = good_table.set_column(i, field, good_table.column("obs"))
    with pytest.raises(DataFormatError, match=r"column 'obs' must be fixed_size_list<float>\[5\]"):
        arrow_to_columnar(bad)


def test_empty_table_raises(good_table: pa.Table) -> None:
    with pytest.raises(DataFormatError, match="holds no rows"):
        arrow_to_columnar(good_table.slice(0, 0))


def test_parquet_file_reads_back_to_the_same_episodes(good_table: pa.Table, tmp_path: Path) -> None:
    pq.write_table(good_table, tmp_path / "x.parquet")
    read = pq.read_table(tmp_path / "x.parquet")
    assert read.schema.metadata == good_table.schema.metadata
    for a, b in zip(
        columnar_to_episodes(arrow_to_columnar(read)), columnar_to_episodes(arrow_to_columnar(good_table)), strict=True
    ):
        assert_episodes_equal(a, b)


def test_long_episode_round_trip_keeps_values_exact() -> None:
    ep = episode_from_space(SPACES["box_u8_image"], SPACES["multi_discrete"], 300)
    col = episodes_to_columnar([ep, ep.cut(16)])
    back = arrow_to_columnar(columnar_to_arrow(col))
    np.testing.assert_array_equal(back.data.observations, col.data.observations)
    np.testing.assert_array_equal(back.lookback.actions, col.lookback.actions)


# ------------------------------------------------------------------ regressions from review: metadata lies, silent loss
def _with_field_meta(table: pa.Table, name: str, meta: dict) -> pa.Table:
    i = table.column_names.index(name)
    return table.set_column(i, table.schema.field(name).with_metadata(meta), table.column(name))


@pytest.mark.parametrize(
    "meta",
    [
        {b"dtype": b"<f4", b"shape": b'["a", "b"]'},
        {b"dtype": b"<f4", b"shape": b"[1, 2.0]"},
        {b"dtype": b"<f16", b"shape": b"[3]"},
        {b"dtype": b"not-a-dtype", b"shape": b"[3]"},
    ],
    ids=["str_shape", "float_shape", "f16", "garbage_dtype"],
)
def test_bad_leaf_metadata_raises_data_format_error(good_table: pa.Table, meta: dict) -> None:
    with pytest.raises(DataFormatError, match="column 'obs'"):
        arrow_to_columnar(_with_field_meta(good_table, "obs", meta))


@pytest.mark.parametrize(
    "structure",
    [
        {"obs": {"dict": [["a"]]}, "action": None, "extra_model_outputs": {}},
        {"obs": {"dict": [5]}, "action": None, "extra_model_outputs": {}},
        {"obs": {"dict": []}, "action": None, "extra_model_outputs": {}},
        {"obs": {"tuple": []}, "action": None, "extra_model_outputs": {}},
        {"obs": None, "action": None, "extra_model_outputs": [["lp", None]]},
    ],
    ids=["short_pair", "int_entry", "empty_dict", "empty_tuple", "extra_list"],
)
def test_malformed_structure_entries_raise(good_table: pa.Table, structure: dict) -> None:
    with pytest.raises(DataFormatError, match="structure"):
        arrow_to_columnar(_with_meta(good_table, ray_sampler__structure=json.dumps(structure).encode()))


def test_strings_longer_than_their_dtype_raise() -> None:
    ep = SingleAgentEpisode(observations=["aaaa", "bbbbbb"], actions=[0], rewards=[0.0])
    table = table_of([ep])
    with pytest.raises(DataFormatError, match="longer than its dtype"):
        arrow_to_columnar(_with_field_meta(table, "obs", {b"dtype": b"<U2", b"shape": b"[]"}))


def test_null_inside_list_values_raises(good_table: pa.Table) -> None:
    obs = good_table.column("obs").combine_chunks()
    flat = obs.values.to_pylist()
    flat[4] = None
    bad = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), 3)
    with pytest.raises(DataFormatError, match="nulls inside list values"):
        arrow_to_columnar(_with_column(good_table, "obs", bad))


def test_shaped_reward_column_raises(good_table: pa.Table) -> None:
    rewards = good_table.column("reward").to_pylist()
    values = pa.array([x for r in rewards for x in (r or 0.0, r or 0.0)], pa.float64())
    mask = pa.array([r is None for r in rewards])
    bad = _with_column(good_table, "reward", pa.FixedSizeListArray.from_arrays(values, 2, mask=mask))
    bad = _with_field_meta(bad, "reward", {b"dtype": b"<f8", b"shape": b"[2]"})
    with pytest.raises(DataFormatError, match="'reward' must hold scalars"):
        arrow_to_columnar(bad)


def test_negative_t_started_raises(good_table: pa.Table) -> None:
    t = good_table.column("t").to_numpy() - 100
    with pytest.raises(DataFormatError, match="'t_started' must be >="):
        arrow_to_columnar(_with_column(good_table, "t", pa.array(t)))


def test_nan_in_infos_raises() -> None:
    ep = SingleAgentEpisode(observations=[0, 1], actions=[0], rewards=[0.0], infos=[{}, {"x": float("nan")}])
    with pytest.raises(DataFormatError, match="JSON has no NaN or infinity"):
        table_of([ep])


def test_zero_size_leaf_raises() -> None:
    ep = SingleAgentEpisode(observations=[np.zeros((3, 0)), np.zeros((3, 0))], actions=[0], rewards=[0.0])
    with pytest.raises(DataFormatError, match="no zero-size dims"):
        table_of([ep])


def test_numbering_may_start_anywhere() -> None:
    chunks = chunk_catalogue(SPACES["discrete"])
    table = columnar_to_arrow(episodes_to_columnar(chunks), first_index=7)
    assert table.column("episode_index").to_pylist()[0] == 7
    for a, b in zip(columnar_to_episodes(arrow_to_columnar(table)), chunks, strict=True):
        assert_episodes_equal(a, b)
