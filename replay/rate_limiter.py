"""RateLimiter: Reverb-style limits between inserting env steps and sampling transitions.

- ``min_size_to_sample``: sampling waits until that many env steps are stored; inserts up to
  then are never held back (the warm-up). The warm-up ends once: when evictions of whole
  episodes later leave fewer steps stored, sampling goes on (a buffer whose capacity is close
  to ``min_size_to_sample`` could otherwise never reach it again). It also ends once that many
  env steps were inserted, even if evictions kept the stored count lower.
- ``samples_per_insert`` (SPI) with ``samples_per_insert_tolerance``: after the warm-up, with
  ``inserted`` env steps and ``sampled`` transitions since, the *lead* ``SPI * inserted -
  sampled`` must stay within ``[-tolerance, +tolerance]``. An insert that would push it above
  waits (backpressure on the runners), a sample that would push it below waits (the learner
  runs ahead). ``None`` switches the ratio off.

Waits are bounded by the caller's deadline. The limiter only decides and counts; the
ReplayActor holds the lock and the condition.

>>> lim = RateLimiter(min_size_to_sample=10, samples_per_insert=2.0, samples_per_insert_tolerance=20)
>>> lim.can_insert(num_env_steps=10, stored=0), lim.can_sample(batch_size=1, stored=5)
(True, False)
>>> lim.inserted(10, stored_before=0)  # the warm-up: free
>>> lim.inserted(8, stored_before=10)  # lead = 2 * 8 - 0 = 16
>>> lim.can_insert(num_env_steps=4, stored=18), lim.can_sample(batch_size=8, stored=18)
(False, True)
>>> lim.sampled(8)  # lead = 8: room for 4 more steps (8 transitions)
>>> lim.can_insert(num_env_steps=4, stored=18)
True
"""

from __future__ import annotations

from ray_sampler.validate import check_int, check_number, check_optional

__all__ = ["RateLimiter"]


class RateLimiter:
    """Decides whether an insert or a sample may go ahead (see the module docstring)."""

    def __init__(
        self,
        *,
        min_size_to_sample: int = 1,
        samples_per_insert: float | None = None,
        samples_per_insert_tolerance: float = 1000.0,
    ) -> None:
        self.min_size_to_sample = check_int("min_size_to_sample", min_size_to_sample, minimum=1)
        self.samples_per_insert: float | None = check_optional(
            check_number, "samples_per_insert", samples_per_insert, minimum=0, exclusive_minimum=True
        )
        self.tolerance = check_number("samples_per_insert_tolerance", samples_per_insert_tolerance, minimum=1)
        self.num_inserted = 0.0
        self.num_sampled = 0.0
        self.num_received = 0
        """Env steps inserted in all (the warm-up's too)."""
        self.warmed_up = False

    def _warm(self, stored: int) -> bool:
        """Whether the warm-up is over (it ends once, for good)."""
        if not self.warmed_up:
            self.warmed_up = max(stored, self.num_received) >= self.min_size_to_sample
        return self.warmed_up

    def lead(self) -> float:
        """``SPI * inserted - sampled`` since the warm-up (0 without a ratio)."""
        if self.samples_per_insert is None:
            return 0.0
        return self.samples_per_insert * self.num_inserted - self.num_sampled

    def can_insert(self, *, num_env_steps: int, stored: int) -> bool:
        if self.samples_per_insert is None or not self._warm(stored):
            return True
        # An insert larger than the whole tolerance may go when nothing is outstanding, or it never could.
        room = self.tolerance - self.lead()
        return self.samples_per_insert * num_env_steps <= room or self.lead() <= 0

    def can_sample(self, *, batch_size: int, stored: int) -> bool:
        if stored <= 0 or not self._warm(stored):
            return False
        # A batch larger than the whole tolerance may go once inserts are not behind (the mirror
        # of can_insert), or sampling and inserting would wait on each other.
        lead = self.lead()
        return self.samples_per_insert is None or lead - batch_size >= -self.tolerance or lead >= 0

    def inserted(self, num_env_steps: int, *, stored_before: int) -> None:
        """Counts an insert; steps that only fill the buffer up to ``min_size_to_sample`` are free."""
        free = 0 if self._warm(stored_before) else max(0, min(num_env_steps, self.min_size_to_sample - stored_before))
        self.num_inserted += num_env_steps - free
        self.num_received += num_env_steps

    def sampled(self, batch_size: int) -> None:
        self.num_sampled += batch_size
