"""One helper calls a local object or a Ray actor handle alike."""

from __future__ import annotations

import ray

from ray_sampler.handles import call, is_remote, submit


class Store:
    def __init__(self) -> None:
        self.items: list[int] = []

    def add(self, item: int, *, times: int = 1) -> int:
        self.items += [item] * times
        return len(self.items)


def test_local_calls_run_in_place() -> None:
    store = Store()
    assert not is_remote(store.add)
    assert call(store.add, 7, times=2) == 2
    assert submit(store.add, 8) == 3
    assert store.items == [7, 7, 8]


def test_actor_calls_go_through_ray(ray_session: None) -> None:
    actor = ray.remote(Store).remote()
    assert is_remote(actor.add)
    assert call(actor.add, 7, times=2, get_timeout_s=60) == 2
    ref = submit(actor.add, 8)
    assert isinstance(ref, ray.ObjectRef)
    assert ray.get(ref, timeout=60) == 3
    ray.kill(actor)
