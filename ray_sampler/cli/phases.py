"""Startup phase stamps for ``bench/startup_profile.py``: printed only when ``RAY_SAMPLER_PHASES=1``."""

from __future__ import annotations

import os
import sys
import time

__all__ = ["mark"]

_ENABLED = os.environ.get("RAY_SAMPLER_PHASES") == "1"


def mark(phase: str) -> None:
    """One line on stderr, ``ray-sampler-phase <phase> <unix time> <peak RSS KiB>``, when the env var
    ``RAY_SAMPLER_PHASES`` is 1 (the benchmark's hook); nothing otherwise."""
    if not _ENABLED:
        return
    peak_kib = 0
    try:
        with open("/proc/self/status") as status:  # Linux only; 0 elsewhere
            peak_kib = next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), 0)
    except OSError:
        pass
    print(f"ray-sampler-phase {phase} {time.time():.6f} {peak_kib}", file=sys.stderr, flush=True)
