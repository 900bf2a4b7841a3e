"""The validation helper: bools are not ints, NaN and inf are refused, wrong types raise the library's error."""

from __future__ import annotations

import enum
import re

import numpy as np
import pytest

from ray_sampler.errors import ConfigError, ReplayError
from ray_sampler.validate import (
    check_bool,
    check_callable,
    check_choice,
    check_dict,
    check_enum,
    check_int,
    check_number,
    check_optional,
    check_pieces,
    check_probability,
    check_type,
)


class Color(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


class TestCheckInt:
    def test_accepts_ints_in_range_and_numpy_ints(self) -> None:
        assert check_int("n", 3, minimum=1) == 3
        assert check_int("n", np.int64(4), minimum=1, maximum=4) == 4
        assert type(check_int("n", np.int32(2))) is int

    @pytest.mark.parametrize("value", [True, False, 1.0, "1", None, 0, 11], ids=repr)
    def test_refuses_bools_floats_strings_and_out_of_range(self, value: object) -> None:
        with pytest.raises(ConfigError, match=re.escape(f"'n' must be an int >= 1 and <= 10 (got {value!r})")):
            check_int("n", value, minimum=1, maximum=10)

    def test_raises_the_error_class_asked_for(self) -> None:
        with pytest.raises(ReplayError, match="'batch_size_B' must be an int >= 1"):
            check_int("batch_size_B", 0, minimum=1, error=ReplayError)


class TestCheckNumber:
    def test_accepts_finite_numbers_in_bounds(self) -> None:
        assert check_number("lr", 1e-3, minimum=0, exclusive_minimum=True) == 1e-3
        assert check_number("x", 2, minimum=2, maximum=2) == 2.0
        assert check_number("x", np.float32(0.5), minimum=0, maximum=1) == 0.5

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), True, "x", None, 0.0], ids=repr)
    def test_refuses_nan_inf_bools_strings_and_the_excluded_bound(self, value: object) -> None:
        with pytest.raises(ConfigError, match=re.escape(f"'lr' must be a finite number > 0 (got {value!r})")):
            check_number("lr", value, minimum=0, exclusive_minimum=True)

    def test_closed_interval_message(self) -> None:
        with pytest.raises(ConfigError, match=re.escape("'gamma' must be a finite number in [0, 1] (got 1.5)")):
            check_number("gamma", 1.5, minimum=0, maximum=1)

    def test_open_upper_bound(self) -> None:
        with pytest.raises(ConfigError, match=re.escape("'x' must be a finite number >= 0 and < 1 (got 1)")):
            check_number("x", 1, minimum=0, maximum=1, exclusive_maximum=True)


def test_probability_is_a_number_in_zero_one() -> None:
    assert check_probability("alpha", 1) == 1.0
    for bad in (-0.1, 1.1, True, float("nan"), "0.5"):
        with pytest.raises(ConfigError, match=re.escape("'alpha' must be in [0, 1]")):
            check_probability("alpha", bad)


def test_bool_takes_only_true_and_false() -> None:
    assert check_bool("flag", False) is False
    for bad in (0, 1, "true", None):
        with pytest.raises(ConfigError, match=re.escape(f"'flag' must be True or False (got {bad!r})")):
            check_bool("flag", bad)


def test_enum_takes_members_and_their_values_and_lists_the_allowed() -> None:
    assert check_enum("color", Color, "red") is Color.RED
    assert check_enum("color", Color, Color.BLUE) is Color.BLUE
    with pytest.raises(ConfigError, match=re.escape("'color' must be one of 'red', 'blue' (got 'green')")):
        check_enum("color", Color, "green")
    with pytest.raises(ConfigError, match="'color' must be one of"):
        check_enum("color", Color, ["red"])  # unhashable: still the library's error


def test_choice_dict_callable_and_pieces() -> None:
    assert check_choice("activation", "relu", ("tanh", "relu")) == "relu"
    with pytest.raises(ConfigError, match=re.escape("'activation' must be one of 'tanh', 'relu' (got 'elu')")):
        check_choice("activation", "elu", ("tanh", "relu"))
    with pytest.raises(ConfigError, match=re.escape("'mode' must be one of 0, 1 (got True)")):
        check_choice("mode", True, (0, 1))
    assert check_dict("env_config", {"a": 1}) == {"a": 1}
    with pytest.raises(ConfigError, match=re.escape("'env_config' must be a dict (got list)")):
        check_dict("env_config", [])
    with pytest.raises(ConfigError, match="'module_class' must be a class or callable"):
        check_callable("module_class", 3)
    assert check_pieces("pieces", [len, abs]) == (len, abs)
    with pytest.raises(ConfigError, match="'pieces' must be a tuple of ConnectorV2 pieces"):
        check_pieces("pieces", (len, 3))


def test_optional_passes_none_and_says_so_in_the_message() -> None:
    assert check_optional(check_int, "horizon", None, minimum=1) is None
    assert check_optional(check_int, "horizon", 5, minimum=1) == 5
    with pytest.raises(ConfigError, match=re.escape("'horizon' must be an int >= 1 or None (got 0)")):
        check_optional(check_int, "horizon", 0, minimum=1)
    with pytest.raises(ReplayError, match=re.escape("'capacity_bytes' must be an int >= 1 or None (got 0)")):
        check_optional(check_int, "capacity_bytes", 0, minimum=1, error=ReplayError)


def test_type_takes_instances_and_names_the_class_and_what_came() -> None:
    assert check_type("n", 3, int) == 3
    with pytest.raises(ConfigError, match=re.escape("'n' must be an int (got bool)")):
        check_type("n", True, int)
    with pytest.raises(ReplayError, match=re.escape("'replay' must be a Color (got dict)")):
        check_type("replay", {}, Color, error=ReplayError)
