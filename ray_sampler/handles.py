"""Calling a component that may be a local object or a Ray actor handle, through one helper.

``call(handle.method, *args, get_timeout_s=...)`` runs the method in place on a local object, or
submits it to the actor and waits for the result on an actor handle; ``submit`` returns the
object reference (actor) or the finished result (local) for callers that collect many.
Nothing else in the library asks whether a handle is remote.

>>> class Counter:
...     def add(self, n: int) -> int:
...         return n + 1
>>> call(Counter().add, 41)
42
>>> is_remote(Counter().add)
False
"""

from __future__ import annotations

from typing import Any

__all__ = ["call", "is_remote", "submit"]


def is_remote(method: Any) -> bool:
    """Whether ``method`` is a Ray actor method (it has ``.remote``), not a plain bound method."""
    return callable(getattr(method, "remote", None))


def submit(method: Any, *args: Any, **kwargs: Any) -> Any:
    """An object reference to the call's result (actor), or the result itself (local)."""
    if is_remote(method):
        return method.remote(*args, **kwargs)
    return method(*args, **kwargs)


def call(method: Any, *args: Any, get_timeout_s: float | None = None, **kwargs: Any) -> Any:
    """The result of ``method(*args, **kwargs)``, waiting up to ``get_timeout_s`` for an actor's
    answer (``kwargs`` go to the method, its own ``timeout_s`` included)."""
    if is_remote(method):
        import ray

        return ray.get(method.remote(*args, **kwargs), timeout=get_timeout_s)
    return method(*args, **kwargs)
