"""The one validation helper every config and public argument check goes through.

Rules shared by every check: a bool is never taken as an int or a number; NaN and infinity are
refused where a finite number is meant; a value of the wrong type raises the same error as an
out-of-range one (``ConfigError`` unless the caller names another ``RaySamplerError``), never a
bare ``TypeError``; and each message names the field, what is allowed and what came:

>>> check_int("num_env_runners", True, minimum=0)
Traceback (most recent call last):
...
ray_sampler.errors.ConfigError: 'num_env_runners' must be an int >= 0 (got True)
>>> check_number("lr", float("inf"), minimum=0, exclusive_minimum=True)
Traceback (most recent call last):
...
ray_sampler.errors.ConfigError: 'lr' must be a finite number > 0 (got inf)
>>> check_number("gamma", 0.5, minimum=0, maximum=1)
0.5
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
from collections.abc import Callable
from typing import Any, TypeVar

from ray_sampler.errors import ConfigError, RaySamplerError

__all__ = [
    "check_bool",
    "check_callable",
    "check_choice",
    "check_dict",
    "check_enum",
    "check_int",
    "check_number",
    "check_optional",
    "check_pieces",
    "check_probability",
    "check_type",
    "replace_field",
]

E = TypeVar("E", bound=enum.Enum)
_Error = type[RaySamplerError]


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: _Error = ConfigError,
) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (either bound optional)."""
    ok = _is_int(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        raise error(f"'{name}' must be an int{_range(minimum, maximum, False, False)} (got {value!r})")
    return int(value)


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
    error: _Error = ConfigError,
) -> float:
    """``value`` as a finite float within the bounds given (inclusive unless said otherwise)."""
    ok = _is_real(value) and math.isfinite(value)
    if ok and minimum is not None:
        ok = value > minimum if exclusive_minimum else value >= minimum
    if ok and maximum is not None:
        ok = value < maximum if exclusive_maximum else value <= maximum
    if not ok:
        if minimum is not None and maximum is not None and not exclusive_minimum and not exclusive_maximum:
            allowed = f"a finite number in [{_fmt(minimum)}, {_fmt(maximum)}]"
        else:
            allowed = f"a finite number{_range(minimum, maximum, exclusive_minimum, exclusive_maximum)}"
        raise error(f"'{name}' must be {allowed} (got {value!r})")
    return float(value)


def check_probability(name: str, value: Any, *, error: _Error = ConfigError) -> float:
    """A number in [0, 1]."""
    if not (_is_real(value) and 0 <= value <= 1):
        raise error(f"'{name}' must be in [0, 1] (got {value!r})")
    return float(value)


def check_bool(name: str, value: Any, *, error: _Error = ConfigError) -> bool:
    """``value`` if it is True or False (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise error(f"'{name}' must be True or False (got {value!r})")
    return value


def check_enum(name: str, enum_class: type[E], value: Any, *, error: _Error = ConfigError) -> E:
    """The member of ``enum_class`` that ``value`` is or names."""
    try:
        return enum_class(value)
    except (ValueError, TypeError):
        allowed = ", ".join(repr(m.value) for m in enum_class)
        raise error(f"'{name}' must be one of {allowed} (got {value!r})") from None


def check_choice(name: str, value: Any, choices: tuple[Any, ...], *, error: _Error = ConfigError) -> Any:
    """``value`` if it is one of ``choices``."""
    if isinstance(value, bool) or value not in choices:
        raise error(f"'{name}' must be one of {', '.join(repr(c) for c in choices)} (got {value!r})")
    return value


def check_dict(name: str, value: Any, *, error: _Error = ConfigError) -> dict[str, Any]:
    """``value`` if it is a dict."""
    if not isinstance(value, dict):
        raise error(f"'{name}' must be a dict (got {type(value).__name__})")
    return value


def check_type(name: str, value: Any, cls: type, *, error: _Error = ConfigError) -> Any:
    """``value`` if it is an instance of ``cls`` (a component config inside a composed one).

    >>> check_type("replay", {"capacity_env_steps": 10}, int)
    Traceback (most recent call last):
    ...
    ray_sampler.errors.ConfigError: 'replay' must be an int (got dict)
    """
    if not isinstance(value, cls) or (cls is int and isinstance(value, bool)):
        article = "an" if cls.__name__[:1].lower() in "aeiou" else "a"
        raise error(f"'{name}' must be {article} {cls.__name__} (got {type(value).__name__})")
    return value


def check_callable(name: str, value: Any, what: str = "a class or callable", *, error: _Error = ConfigError) -> Any:
    """``value`` if it can be called."""
    if not callable(value):
        raise error(f"'{name}' must be {what} (got {value!r})")
    return value


def check_pieces(name: str, value: Any, *, error: _Error = ConfigError) -> tuple[Any, ...]:
    """A tuple (or list) of callables, as a tuple: connector pieces."""
    if not isinstance(value, (tuple, list)) or not all(callable(p) for p in value):
        raise error(f"'{name}' must be a tuple of ConnectorV2 pieces (got {value!r})")
    return tuple(value)


def check_optional(check: Callable[..., Any], name: str, value: Any, **kwargs: Any) -> Any:
    """``None``, or ``value`` passed by ``check``; the message says None is allowed too."""
    if value is None:
        return None
    try:
        return check(name, value, **kwargs)
    except RaySamplerError as e:
        message = str(e)
        at = message.rfind(" (got ")
        raise type(e)(f"{message[:at]} or None{message[at:]}") from None


def replace_field(config: Any, name: str, value: Any) -> None:
    """Sets a field of a frozen dataclass from its ``__post_init__`` (a checked, normalized value)."""
    assert dataclasses.is_dataclass(config), "replace_field takes a dataclass instance"
    object.__setattr__(config, name, value)


def _fmt(bound: float) -> str:
    return repr(bound) if isinstance(bound, float) and not float(bound).is_integer() else str(int(bound))


def _range(minimum: float | None, maximum: float | None, exclusive_min: bool, exclusive_max: bool) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if exclusive_min else '>='} {_fmt(minimum)}")
    if maximum is not None:
        parts.append(f"{'<' if exclusive_max else '<='} {_fmt(maximum)}")
    return (" " + " and ".join(parts)) if parts else ""
