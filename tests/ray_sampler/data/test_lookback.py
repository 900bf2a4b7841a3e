"""LookbackBuffer index rules, in list and numpy form alike."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from ray_sampler.data import tree
from ray_sampler.data.lookback import LookbackBuffer
from ray_sampler.errors import SpaceError

FORMS = ["list", "numpy"]


def make(form: str, lookback: int = 2, n: int = 6, space: gym.Space | None = None) -> LookbackBuffer:
    """Items 10, 11, ..., the first ``lookback`` of them lookback."""
    buf = LookbackBuffer([10 + i for i in range(n)], lookback=lookback, space=space)
    if form == "numpy":
        buf.to_numpy()
    return buf


def as_list(x: object) -> object:
    return x.tolist() if isinstance(x, np.ndarray) else x


@pytest.mark.parametrize("form", FORMS)
def test_int_index_counts_from_first_data_item(form: str) -> None:
    buf = make(form)
    assert len(buf) == 4
    assert [buf.get(i) for i in range(4)] == [12, 13, 14, 15]


@pytest.mark.parametrize("form", FORMS)
def test_negative_index_counts_from_end_into_lookback(form: str) -> None:
    buf = make(form)
    assert [buf.get(i) for i in (-1, -4, -5, -6)] == [15, 12, 11, 10]


@pytest.mark.parametrize("form", FORMS)
def test_neg_index_as_lookback_counts_back_from_first_data_item(form: str) -> None:
    buf = make(form)
    assert buf.get(-1, neg_index_as_lookback=True) == 11
    assert buf.get(-2, neg_index_as_lookback=True) == 10
    assert as_list(buf.get(slice(-2, 1), neg_index_as_lookback=True)) == [10, 11, 12]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("index", [-7, 4, 100, -3])
def test_index_outside_data_and_lookback_raises(form: str, index: int) -> None:
    buf = make(form)
    nal = index == -3  # -3 with neg_index_as_lookback is before the 2-item lookback
    with pytest.raises(IndexError, match="outside the 2 lookback and 4 data items"):
        buf.get(index, neg_index_as_lookback=nal)


@pytest.mark.parametrize("form", FORMS)
def test_numpy_form_does_not_wrap_around(form: str) -> None:
    # RLlib's numpy form reads index -7 of 6 items as the last one; we raise in both forms.
    buf = make(form)
    with pytest.raises(IndexError):
        buf.get([-7, -1])
    with pytest.raises(IndexError):
        buf.get(-7)


@pytest.mark.parametrize("form", FORMS)
def test_slice_past_either_end_clips_as_a_python_slice(form: str) -> None:
    # As RLlib's (and a list's): without fill, a slice is clipped to lookback + data.
    buf = make(form)
    assert as_list(buf.get(slice(2, 10))) == [14, 15]
    assert as_list(buf.get(slice(-8, None))) == [10, 11, 12, 13, 14, 15]
    assert as_list(buf.get(slice(-5, -1), neg_index_as_lookback=True)) == [10]
    assert as_list(buf.get(slice(7, 9))) == []
    assert as_list(buf.get(slice(0, 10, 3))) == [12, 15]


@pytest.mark.parametrize("form", FORMS)
def test_fill_pads_before_lookback_and_after_end(form: str) -> None:
    buf = make(form)
    assert as_list(buf.get(slice(-8, None), fill=0)) == [0, 0, 10, 11, 12, 13, 14, 15]
    assert as_list(buf.get([3, 4, 5], fill=-1)) == [15, -1, -1]
    assert buf.get(-9, fill=7) == 7


@pytest.mark.parametrize("form", FORMS)
def test_list_and_slice_return_list_or_array(form: str) -> None:
    buf = make(form)
    got = buf.get([0, 2])
    assert isinstance(got, list if form == "list" else np.ndarray)
    assert as_list(got) == [12, 14]
    assert as_list(buf.get(slice(1, 3))) == [13, 14]
    assert as_list(buf.get()) == [12, 13, 14, 15]
    assert as_list(buf.get(slice(0, 4, 2))) == [12, 14]


def test_fill_takes_the_shape_of_stored_arrays() -> None:
    buf = LookbackBuffer([np.array([1.0, 2.0], np.float32)], lookback=0)
    filled = buf.get(-2, fill=0.5)
    assert filled.dtype == np.float32 and filled.tolist() == [0.5, 0.5]
    buf.to_numpy()
    assert buf.get([-2, 0], fill=0.0).tolist() == [[0.0, 0.0], [1.0, 2.0]]


def test_fill_on_empty_buffer_uses_the_space() -> None:
    buf = LookbackBuffer([], space=gym.spaces.Box(0, 1, (3,), np.float32))
    assert buf.get(-1, fill=0.0).tolist() == [0.0, 0.0, 0.0]
    buf.to_numpy()
    assert buf.get([0, 1], fill=1.0).shape == (2, 3)


def test_nested_items_index_and_fill() -> None:
    items = [{"a": np.array([i, i]), "b": (i, float(i))} for i in range(4)]
    buf = LookbackBuffer(items, lookback=1)
    assert buf.get(0)["b"] == (1, 1.0)
    assert buf.get(-5, fill=9)["a"].tolist() == [9, 9]
    buf.to_numpy()
    got = buf.get([0, 1])
    assert got["a"].tolist() == [[1, 1], [2, 2]] and got["b"][1].tolist() == [1.0, 2.0]
    assert buf.get([-5, -4], fill=0)["a"].tolist() == [[0, 0], [0, 0]]


@pytest.mark.parametrize("form", FORMS)
def test_one_hot_discrete(form: str) -> None:
    buf = LookbackBuffer([0, 2, 1], space=gym.spaces.Discrete(3))
    if form == "numpy":
        buf.to_numpy()
    assert buf.get(1, one_hot_discrete=True).tolist() == [0.0, 0.0, 1.0]
    assert np.asarray(buf.get([0, 2], one_hot_discrete=True)).tolist() == [[1, 0, 0], [0, 1, 0]]
    # A filled position is ``fill`` across the one-hot width (RLlib's dummy fill), not a one-hot.
    assert buf.get(-4, fill=-1, one_hot_discrete=True).tolist() == [-1.0, -1.0, -1.0]


def test_one_hot_discrete_with_start_and_multi_discrete() -> None:
    buf = LookbackBuffer([-1, 1], space=gym.spaces.Discrete(3, start=-1))
    assert buf.get(0, one_hot_discrete=True).tolist() == [1.0, 0.0, 0.0]
    md = LookbackBuffer([np.array([2, 0])], space=gym.spaces.MultiDiscrete([3, 2]))
    assert md.get(0, one_hot_discrete=True).tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]


def one_hot_buf(form: str, space: gym.Space, items: list, lookback: int = 1) -> LookbackBuffer:
    buf = LookbackBuffer(list(items), lookback=lookback, space=space)
    if form == "numpy":
        buf.to_numpy()
    return buf


def check_one_hot(got: object, expected: list) -> None:
    """Exact values and float32, whether ``got`` is an array (numpy form) or a list of arrays."""
    arr = np.asarray(got)
    assert arr.dtype == np.float32
    np.testing.assert_array_equal(arr, np.asarray(expected, np.float32))


Z3 = [0.0, 0.0, 0.0]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("fill", [0, 1, -1])
def test_one_hot_fill_positions_hold_fill_across_the_width(form: str, fill: int) -> None:
    # Items: 1 (lookback), then 0, 2 (data). Filled positions are [fill] * 3, never a one-hot of fill.
    buf = one_hot_buf(form, gym.spaces.Discrete(3), [1, 0, 2])
    f3 = [float(fill)] * 3
    check_one_hot(buf.get(-4, fill=fill, one_hot_discrete=True), f3)  # single, before the lookback
    check_one_hot(buf.get(2, fill=fill, one_hot_discrete=True), f3)  # single, past the end
    check_one_hot(buf.get(-2, neg_index_as_lookback=True, fill=fill, one_hot_discrete=True), f3)
    check_one_hot(buf.get(-1, neg_index_as_lookback=True, fill=fill, one_hot_discrete=True), [0, 1, 0])
    check_one_hot(buf.get(slice(-5, None), fill=fill, one_hot_discrete=True), [f3, f3, [0, 1, 0], [1, 0, 0], [0, 0, 1]])
    check_one_hot(buf.get([-4, 0, 3, 1], fill=fill, one_hot_discrete=True), [f3, [1, 0, 0], f3, [0, 0, 1]])
    check_one_hot(
        buf.get(slice(-3, 1), neg_index_as_lookback=True, fill=fill, one_hot_discrete=True),
        [f3, f3, [0, 1, 0], [1, 0, 0]],
    )
    check_one_hot(buf.get(slice(0, 4, 2), fill=fill, one_hot_discrete=True), [[1, 0, 0], f3])
    # Real positions stay one-hot, and the stored data is untouched.
    check_one_hot(buf.get(slice(-3, None), fill=fill, one_hot_discrete=True), [[0, 1, 0], [1, 0, 0], [0, 0, 1]])
    assert as_list(buf.get(slice(-3, None))) == [1, 0, 2]


@pytest.mark.parametrize("form", FORMS)
def test_one_hot_all_fill(form: str) -> None:
    buf = one_hot_buf(form, gym.spaces.Discrete(3), [1, 0, 2])
    check_one_hot(buf.get(slice(-9, -6), fill=0, one_hot_discrete=True), [Z3, Z3, Z3])
    check_one_hot(buf.get([-9, 5], fill=0, one_hot_discrete=True), [Z3, Z3])
    check_one_hot(buf.get(slice(-6, -4), neg_index_as_lookback=True, fill=0, one_hot_discrete=True), [Z3, Z3])
    # An empty buffer: every position is filled, shaped by the space.
    empty = one_hot_buf(form, gym.spaces.Discrete(3), [], lookback=0)
    check_one_hot(empty.get(-1, fill=0, one_hot_discrete=True), Z3)
    check_one_hot(empty.get(slice(-2, None), fill=0, one_hot_discrete=True), [Z3, Z3])
    check_one_hot(empty.get([0, 1], fill=2, one_hot_discrete=True), [[2, 2, 2], [2, 2, 2]])


@pytest.mark.parametrize("form", FORMS)
def test_one_hot_fill_with_discrete_start(form: str) -> None:
    # Discrete(3, start=-1): value 0 is a real action, so fill=0 used to come back as its one-hot.
    buf = one_hot_buf(form, gym.spaces.Discrete(3, start=-1), [-1, 1])
    check_one_hot(buf.get(slice(-3, None), fill=0, one_hot_discrete=True), [Z3, [1, 0, 0], [0, 0, 1]])
    check_one_hot(buf.get(-3, fill=0, one_hot_discrete=True), Z3)


@pytest.mark.parametrize("form", FORMS)
def test_one_hot_fill_multi_discrete(form: str) -> None:
    # MultiDiscrete([3, 2]): width 3 + 2 = 5; items [2, 0] (lookback), [0, 1] (data).
    buf = one_hot_buf(form, gym.spaces.MultiDiscrete([3, 2]), [np.array([2, 0]), np.array([0, 1])])
    z5 = [0.0] * 5
    check_one_hot(buf.get(-3, fill=0, one_hot_discrete=True), z5)
    check_one_hot(buf.get(-1, neg_index_as_lookback=True, fill=0, one_hot_discrete=True), [0, 0, 1, 1, 0])
    check_one_hot(buf.get(slice(-4, None), fill=0, one_hot_discrete=True), [z5, z5, [0, 0, 1, 1, 0], [1, 0, 0, 0, 1]])
    check_one_hot(buf.get([1, 0, -3], fill=-1, one_hot_discrete=True), [[-1.0] * 5, [1, 0, 0, 0, 1], [-1.0] * 5])
    check_one_hot(
        buf.get(slice(-2, 1), neg_index_as_lookback=True, fill=0, one_hot_discrete=True),
        [z5, [0, 0, 1, 1, 0], [1, 0, 0, 0, 1]],
    )
    # Multi-dimensional nvec: the one-hot width is the sum over all dimensions (2 + 2 + 2 + 2).
    md2 = one_hot_buf(form, gym.spaces.MultiDiscrete([[2, 2], [2, 2]]), [np.array([[1, 0], [0, 1]])], lookback=0)
    check_one_hot(md2.get([-2, 0], fill=0, one_hot_discrete=True), [[0.0] * 8, [0, 1, 1, 0, 1, 0, 0, 1]])


@pytest.mark.parametrize("form", FORMS)
def test_one_hot_fill_nested_space(form: str) -> None:
    space = gym.spaces.Dict(
        {
            "d": gym.spaces.Discrete(3),
            "t": gym.spaces.Tuple([gym.spaces.MultiDiscrete([2, 2]), gym.spaces.Box(-5, 5, (2,), np.float32)]),
        }
    )
    items = [
        {"d": 2, "t": (np.array([1, 0]), np.array([1.5, 2.5], np.float32))},
        {"d": 0, "t": (np.array([0, 1]), np.array([3.5, 4.5], np.float32))},
    ]
    buf = one_hot_buf(form, space, items)
    one = buf.get(-3, fill=0, one_hot_discrete=True)
    check_one_hot(one["d"], Z3)
    check_one_hot(one["t"][0], [0, 0, 0, 0])
    np.testing.assert_array_equal(one["t"][1], np.zeros(2, np.float32))  # Box leaves: fill, not one-hot
    got = buf.get(slice(-3, None), fill=0, one_hot_discrete=True)
    rows = [got[i] for i in range(3)] if form == "list" else tree.unstack(got)
    check_one_hot([r["d"] for r in rows], [Z3, [0, 0, 1], [1, 0, 0]])
    check_one_hot([r["t"][0] for r in rows], [[0, 0, 0, 0], [0, 1, 1, 0], [1, 0, 0, 1]])
    np.testing.assert_array_equal(np.asarray([r["t"][1] for r in rows]), [[0, 0], [1.5, 2.5], [3.5, 4.5]])
    mixed = buf.get([0, -1, 1], neg_index_as_lookback=True, fill=-1, one_hot_discrete=True)
    rows = list(mixed) if form == "list" else tree.unstack(mixed)
    check_one_hot([r["d"] for r in rows], [[1, 0, 0], [0, 0, 1], [-1, -1, -1]])
    check_one_hot([r["t"][0] for r in rows], [[1, 0, 0, 1], [0, 1, 1, 0], [-1, -1, -1, -1]])
    np.testing.assert_array_equal(np.asarray([r["t"][1] for r in rows]), [[3.5, 4.5], [1.5, 2.5], [-1, -1]])


def test_one_hot_discrete_needs_a_discrete_space() -> None:
    buf = LookbackBuffer([np.zeros(2)], space=gym.spaces.Box(0, 1, (2,)))
    with pytest.raises(SpaceError, match="needs a Discrete or MultiDiscrete space"):
        buf.get(0, one_hot_discrete=True)


def test_bad_indices_and_step_raise() -> None:
    buf = make("list")
    with pytest.raises(TypeError, match="'indices' must be"):
        buf.get("0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slice step must be an int >= 1"):
        buf.get(slice(None, None, -1))


@pytest.mark.parametrize("form", FORMS)
def test_iteration_and_len_skip_lookback(form: str) -> None:
    buf = make(form)
    assert [as_list(x) for x in buf] == [12, 13, 14, 15]
    assert buf.num_total() == 6


def test_numpy_integer_step_and_zero_d_index() -> None:
    buf = make("numpy")
    assert buf.get(slice(0, None, np.int64(2))).tolist() == [12, 14]
    assert buf.get(np.array(1)) == 13


class TestRLlibNames:
    def test_infinite_lookback_buffer_is_this_class(self) -> None:
        from ray_sampler.data import InfiniteLookbackBuffer as Exported
        from ray_sampler.data.lookback import InfiniteLookbackBuffer

        assert InfiniteLookbackBuffer is LookbackBuffer
        assert Exported is LookbackBuffer

    @pytest.mark.parametrize("form", FORMS)
    def test_len_incl_lookback_and_finalized(self, form: str) -> None:
        buf = make(form)
        assert (buf.len_incl_lookback(), len(buf), buf.finalized) == (6, 4, form == "numpy")

    def test_finalize_turns_lists_into_arrays(self) -> None:
        buf = make("list")
        buf.finalize()
        assert buf.finalized
        assert buf.data.tolist() == [10, 11, 12, 13, 14, 15]


class TestEquality:
    @pytest.mark.parametrize("form", FORMS)
    def test_equal_data_and_lookback_compare_equal(self, form: str) -> None:
        assert make(form) == make(form)

    @pytest.mark.parametrize(
        "other",
        [
            lambda: make("list", lookback=1),
            lambda: make("numpy"),
            lambda: make("list", n=5),
            lambda: make("list", space=gym.spaces.Discrete(20)),
            lambda: LookbackBuffer([10, 11, 12, 13, 14, 99], lookback=2),
        ],
        ids=["lookback", "form", "length", "space", "value"],
    )
    def test_any_difference_compares_unequal(self, other: object) -> None:
        assert make("list") != other()  # type: ignore[operator]

    def test_nested_numpy_items_compare_by_value(self) -> None:
        items = [{"a": np.array([1.0, np.nan]), "b": (i, "x")} for i in range(3)]
        one, two = LookbackBuffer(items, lookback=1), LookbackBuffer([dict(d) for d in items], lookback=1)
        assert one == two
        one.to_numpy()
        two.to_numpy()
        assert one == two
        two.set({"a": np.array([1.0, 2.0]), "b": (0, "x")}, at_indices=0)
        assert one != two

    def test_a_buffer_is_not_equal_to_a_list(self) -> None:
        assert make("list") != [10, 11, 12, 13, 14, 15]


class TestPop:
    @pytest.mark.parametrize("form", FORMS)
    def test_pop_removes_and_returns_the_last_item(self, form: str) -> None:
        buf = make(form)
        assert buf.pop() == 15
        assert as_list(buf.get()) == [12, 13, 14]
        assert buf.lookback == 2

    @pytest.mark.parametrize("form", FORMS)
    def test_pop_follows_the_index_rules(self, form: str) -> None:
        buf = make(form)
        assert buf.pop(0) == 12
        assert as_list(buf.get()) == [13, 14, 15]
        assert buf.pop(-5) == 10  # into the lookback: it shrinks
        assert (buf.lookback, as_list(buf.get(slice(-1, None), neg_index_as_lookback=True))) == (1, [11, 13, 14, 15])

    def test_pop_outside_raises(self) -> None:
        with pytest.raises(IndexError, match="outside the 2 lookback and 4 data items"):
            make("list").pop(4)


class TestSet:
    @pytest.mark.parametrize("form", FORMS)
    def test_set_one_item_and_setitem(self, form: str) -> None:
        buf = make(form)
        buf.set(99, at_indices=0)
        buf[-1] = 98
        buf.set(97, at_indices=-1, neg_index_as_lookback=True)
        assert as_list(buf.get(slice(-3, None), neg_index_as_lookback=True)) == [10, 97, 99, 13, 14, 98]

    @pytest.mark.parametrize("form", FORMS)
    def test_set_a_slice_reaching_into_the_lookback(self, form: str) -> None:
        # RLlib's docstring example: data [4, 5, 6 | 7, 8, 9], set [98, 99, 100] at slice(-2, 1).
        buf = LookbackBuffer([4, 5, 6, 7, 8, 9], lookback=3)
        if form == "numpy":
            buf.to_numpy()
        new = [98, 99, 100] if form == "list" else np.array([98, 99, 100])
        buf.set(new, at_indices=slice(-2, 1), neg_index_as_lookback=True)
        assert as_list(buf.view(0, 6)) == [4, 98, 99, 100, 8, 9]

    @pytest.mark.parametrize("form", FORMS)
    def test_set_all_data_items_and_a_list_of_indices(self, form: str) -> None:
        buf = make(form)
        buf.set([1, 2, 3, 4])
        buf.set([7, 8], at_indices=[0, 3])
        assert as_list(buf.view(0, 6)) == [10, 11, 7, 2, 3, 8]

    def test_set_nested_numpy_items(self) -> None:
        buf = LookbackBuffer([{"a": np.zeros(2), "b": (i,)} for i in range(3)])
        buf.to_numpy()
        buf.set({"a": np.ones(2), "b": (7,)}, at_indices=1)
        buf.set([{"a": np.full(2, 2.0), "b": (8,)}], at_indices=[2])
        assert buf.data["a"].tolist() == [[0, 0], [1, 1], [2, 2]]
        assert buf.data["b"][0].tolist() == [0, 7, 8]

    def test_set_copies_a_read_only_array_before_writing(self) -> None:
        data = np.arange(4)
        data.flags.writeable = False
        buf = LookbackBuffer(data, lookback=1)
        buf[0] = 9
        assert (buf.data.tolist(), data.tolist()) == ([0, 9, 2, 3], [0, 1, 2, 3])

    @pytest.mark.parametrize("form", FORMS)
    def test_set_outside_or_with_the_wrong_length_raises(self, form: str) -> None:
        buf = make(form)
        with pytest.raises(IndexError, match="outside the 2 lookback and 4 data items"):
            buf.set(1, at_indices=4)
        with pytest.raises(IndexError, match="outside"):
            buf.set([1, 2, 3], at_indices=slice(2, 5))  # a set is never clipped
        with pytest.raises(IndexError, match="2 positions at slice"):
            buf.set([1, 2, 3] if form == "list" else np.array([1, 2, 3]), at_indices=slice(0, 2))
        with pytest.raises(TypeError, match="'at_indices' must be"):
            buf.set(1, at_indices="0")  # type: ignore[arg-type]
        assert as_list(buf.view(0, 6)) == [10, 11, 12, 13, 14, 15]
