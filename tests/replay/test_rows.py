"""Rows (a growing column of nested arrays) and the row helpers: dtype fitting, NaN-safe row equality,
remapping sparse row-keyed values after compaction."""

from __future__ import annotations

import numpy as np
import pytest

import replay.rows
from ray_sampler.errors import ReplayError
from replay.rows import Rows, equal_rows, fits, grown_rows, remap_rows


def nested(values: list[int]) -> dict:
    """A nested struct of len(values) rows: float32 [v, -v] and int64 v."""
    v = np.array(values)
    return {"a": np.stack([v, -v], axis=1).astype(np.float32), "b": (v.astype(np.int64),)}


def as_lists(struct: dict) -> tuple[list, list]:
    return struct["a"].tolist(), struct["b"][0].tolist()


class TestRows:
    def test_append_returns_the_first_new_row_and_gather_reads_rows_back(self) -> None:
        rows = Rows()
        assert rows.append(nested([1, 2, 3]), "x") == 0
        assert rows.append(nested([4, 5]), "x") == 3
        assert rows.rows == 5
        assert as_lists(rows.gather(np.array([4, 0, 2]))) == ([[5.0, -5.0], [1.0, -1.0], [3.0, -3.0]], [5, 1, 3])

    def test_zero_rows_leave_an_unset_column_unset(self) -> None:
        rows = Rows()
        assert rows.append(nested([]), "x") == 0
        assert not rows.is_set and rows.rows == 0
        rows.append(nested([7]), "x")
        assert rows.is_set

    def test_rows_survive_growing_past_the_first_allocation(self) -> None:
        rows = Rows()
        rows.append(np.arange(1000), "x")
        assert rows.append(np.arange(1000, 1300), "x") == 1000
        assert rows.gather(np.arange(1300)).tolist() == list(range(1300))

    def test_keep_keeps_the_given_rows_in_that_order(self) -> None:
        rows = Rows()
        rows.append(nested([10, 11, 12, 13]), "x")
        rows.keep(np.array([3, 1]))
        assert rows.rows == 2
        assert as_lists(rows.gather(np.array([0, 1]))) == ([[13.0, -13.0], [11.0, -11.0]], [13, 11])
        assert rows.append(nested([14]), "x") == 2

    def test_safe_upcasts_are_stored_in_the_column_dtype(self) -> None:
        rows = Rows()
        rows.append(np.array([1.5], np.float32), "x")
        rows.append(np.array([2.5], np.float16), "x")
        stored = rows.gather(np.array([0, 1]))
        assert stored.dtype == np.float32 and stored.tolist() == [1.5, 2.5]

    def test_strings_widen_the_column(self) -> None:
        rows = Rows()
        rows.append(np.array(["ab"]), "x")
        rows.append(np.array(["abcde"]), "x")
        assert rows.gather(np.array([0, 1])).tolist() == ["ab", "abcde"]

    @pytest.mark.parametrize(
        "bad",
        [
            np.array([[1.0, 2.0]], np.float32),
            np.array([1.0], np.float64),
            {"a": np.array([1.0], np.float32)},
        ],
        ids=["shape", "unsafe_dtype", "structure"],
    )
    def test_check_refuses_rows_that_do_not_fit_and_append_adds_nothing(self, bad: object) -> None:
        rows = Rows()
        rows.append(np.array([1.0, 2.0], np.float32), "rewards")
        with pytest.raises(ReplayError, match=r"'rewards' rows must keep the stored structure.*nothing was added"):
            rows.check(bad, "rewards")
        with pytest.raises(ReplayError, match=r"'rewards' rows must keep the stored structure"):
            rows.append(bad, "rewards")
        assert rows.rows == 2 and rows.gather(np.array([0, 1])).tolist() == [1.0, 2.0]

    def test_check_accepts_anything_before_the_first_rows_and_empty_rows_after(self) -> None:
        rows = Rows()
        rows.check(np.array([1.0]), "x")
        rows.append(np.array([1], np.int8), "x")
        rows.check(np.zeros((0, 3), np.float64), "x")

    def test_row_nbytes_sums_the_bytes_of_one_row_of_every_leaf(self) -> None:
        rows = Rows()
        rows.append(nested([1, 2]), "x")
        assert rows.row_nbytes() == 2 * 4 + 8
        assert rows.nbytes() == 1024 * (2 * 4 + 8)  # room to grow is allocated too


class TestGrowth:
    @pytest.mark.parametrize(
        ("needed", "allocated", "reserve", "expected"),
        [
            (10, 0, 0, 1024),
            (10, 0, 5000, 5000),
            (900, 1024, 5000, 1024),
            (1100, 1024, 5000, 5000),
            (6000, 5000, 5000, 6250),
            (9000, 5000, 5000, 9000),
        ],
        ids=["first_default", "first_reserve", "fits", "to_reserve", "past_reserve_1.25x", "past_reserve_needed"],
    )
    def test_grown_rows_takes_the_reserve_at_once_then_grows_by_a_quarter(
        self, needed: int, allocated: int, reserve: int, expected: int
    ) -> None:
        assert grown_rows(needed, allocated, reserve) == expected

    def test_a_column_filling_up_to_its_reserve_is_allocated_once(self) -> None:
        rows = Rows()
        rows.reserve_rows = 3000
        sizes = []
        for start in range(0, 3000, 500):
            rows.append(nested(list(range(start, start + 500))), "x")
            sizes.append(rows.nbytes())
        assert sizes == [3000 * (2 * 4 + 8)] * 6
        rows.append(nested([7]), "x")  # past the reserve: 1.25x
        assert rows.nbytes() == 3750 * (2 * 4 + 8) and rows.gather(np.array([0, 2999, 3000]))["b"][0].tolist() == [
            0,
            2999,
            7,
        ]


class TestKeepInPlace:
    @pytest.mark.parametrize(
        "index",
        [[0, 1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], [1, 3, 5, 7, 9, 11], [0, 1, 2, 3], []],
        ids=["one_long_run", "short_runs", "prefix_only", "nothing"],
    )
    @pytest.mark.parametrize("move_bytes", [1, 3 * 16, 8 << 20], ids=["row_by_row", "3_row_slices", "default"])
    def test_keep_moves_the_kept_rows_down_exactly_and_keeps_the_room(
        self, monkeypatch: pytest.MonkeyPatch, index: list[int], move_bytes: int
    ) -> None:
        monkeypatch.setattr(replay.rows, "_MOVE_BYTES", move_bytes)  # slices smaller than the runs
        rows = Rows()
        rows.append(nested(list(range(20))), "x")
        nbytes = rows.nbytes()
        rows.keep(np.array(index, np.int64))
        assert rows.rows == len(index) and rows.nbytes() == nbytes
        got = rows.gather(np.arange(len(index)))
        assert as_lists(got) == ([[float(i), float(-i)] for i in index], index)
        assert rows.append(nested([99]), "x") == len(index)  # appends go on right after the kept rows


class TestRollback:
    def test_rollback_restores_rows_and_contents_exactly_and_keeps_the_room(self) -> None:
        rows = Rows()
        rows.append(nested([1, 2, 3]), "x")
        mark = rows.mark()
        rows.append(nested(list(range(10, 2000))), "x")  # grows the arrays
        rows.rollback(mark)
        assert rows.rows == 3 and as_lists(rows.gather(np.arange(3))) == (
            [[1.0, -1.0], [2.0, -2.0], [3.0, -3.0]],
            [1, 2, 3],
        )
        assert rows.nbytes() == 1993 * (2 * 4 + 8)  # the room grown stays (1.25 x 1024 was not enough)
        assert rows.append(nested([4]), "x") == 3

    def test_rollback_narrows_a_widened_string_column_back(self) -> None:
        rows = Rows()
        rows.append(np.array(["ab", "cd"]), "x")
        mark = rows.mark()
        rows.append(np.array(["longer"]), "x")
        rows.rollback(mark)
        got = rows.gather(np.arange(2))
        assert (got.tolist(), got.dtype.str) == (["ab", "cd"], "<U2")

    def test_rollback_of_the_first_append_unsets_the_column(self) -> None:
        rows = Rows()
        mark = rows.mark()
        rows.append(nested([1]), "x")
        rows.rollback(mark)
        assert (rows.is_set, rows.rows, rows.nbytes()) == (False, 0, 0)


@pytest.mark.parametrize(
    ("incoming", "stored", "expected"),
    [
        (np.int32, np.int64, True),
        (np.float16, np.float32, True),
        (np.float64, np.float32, False),
        (np.float32, np.int64, False),
        (np.dtype("<U5"), np.dtype("<U2"), True),
        (np.dtype("<U2"), np.float32, False),
    ],
    ids=["int_up", "float_up", "float_down", "float_to_int", "str_wider", "str_to_float"],
)
def test_fits(incoming: object, stored: object, expected: bool) -> None:
    assert fits(np.dtype(incoming), np.dtype(stored)) is expected


class TestEqualRows:
    def test_nan_equals_nan_in_float_leaves(self) -> None:
        assert equal_rows({"a": np.array([np.nan, 1.0])}, {"a": np.array([np.nan, 1.0])})

    def test_a_differing_leaf_makes_rows_unequal(self) -> None:
        assert not equal_rows(nested([1]), {"a": np.array([[1.0, -1.0]], np.float32), "b": (np.array([2]),)})

    def test_nested_rows_with_equal_leaves_are_equal(self) -> None:
        assert equal_rows(nested([3]), nested([3]))

    def test_strings_compare_by_value(self) -> None:
        assert equal_rows(np.array(["ab"]), np.array(["ab"])) and not equal_rows(np.array(["ab"]), np.array(["ba"]))


class TestRemapRows:
    def test_kept_rows_get_their_new_index_and_dropped_rows_go(self) -> None:
        sparse = {1: {"p": 1}, 3: {"p": 3}, 4: {"p": 4}, 9: {"p": 9}}
        assert remap_rows(sparse, np.array([0, 3, 4, 7])) == {1: {"p": 3}, 2: {"p": 4}}

    def test_nothing_kept_drops_everything(self) -> None:
        assert remap_rows({2: {"p": 2}}, np.array([], np.int64)) == {}

    def test_nothing_sparse_stays_nothing(self) -> None:
        assert remap_rows({}, np.array([0, 1])) == {}
