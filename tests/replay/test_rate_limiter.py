"""RateLimiter: warm-up, the samples-per-insert ratio and its tolerance, argument checks."""

from __future__ import annotations

import pytest

from ray_sampler.errors import ConfigError
from replay.rate_limiter import RateLimiter


def test_rate_limiter_ratio_and_tolerance() -> None:
    lim = RateLimiter(min_size_to_sample=4, samples_per_insert=1.0, samples_per_insert_tolerance=10)
    assert not lim.can_sample(batch_size=1, stored=3)
    lim.inserted(4, stored_before=0)  # warm-up: free
    assert lim.lead() == 0
    lim.inserted(10, stored_before=4)
    assert lim.lead() == 10 and not lim.can_insert(num_env_steps=1, stored=14)
    lim.sampled(5)
    assert lim.can_insert(num_env_steps=5, stored=14) and not lim.can_insert(num_env_steps=6, stored=14)
    lim.sampled(20)  # a batch beyond the tolerance goes while inserts are not behind: lead -15
    assert not lim.can_sample(batch_size=1, stored=14)  # now sampling waits for inserts
    assert lim.can_insert(num_env_steps=30, stored=14)


def test_without_a_ratio_inserts_never_wait() -> None:
    lim = RateLimiter(min_size_to_sample=2)
    lim.inserted(100, stored_before=0)
    assert lim.can_insert(num_env_steps=10**6, stored=100) and lim.lead() == 0.0
    assert lim.can_sample(batch_size=10**6, stored=100)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_size_to_sample": 0}, "'min_size_to_sample' must be an int >= 1"),
        ({"min_size_to_sample": True}, "'min_size_to_sample' must be an int >= 1"),
        ({"samples_per_insert": -1}, "'samples_per_insert' must be a finite number > 0 or None"),
        ({"samples_per_insert": float("nan")}, "'samples_per_insert' must be a finite number > 0 or None"),
        ({"samples_per_insert_tolerance": 0}, "'samples_per_insert_tolerance' must be a finite number >= 1"),
        ({"samples_per_insert_tolerance": "5"}, "'samples_per_insert_tolerance' must be a finite number >= 1"),
    ],
    ids=["min_size", "min_size_bool", "spi", "spi_nan", "tolerance", "tolerance_str"],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RateLimiter(**kwargs)
