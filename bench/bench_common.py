"""Helpers shared by the benchmark scripts (run as ``python bench/<name>.py``; no project imports)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_json(cmd: list[str]) -> dict[str, Any] | None:
    """Runs ``cmd`` from the project root; the JSON object on its last stdout line, or None (and
    its stderr's tail printed) if it failed."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    if proc.returncode != 0:
        print(f"{cmd[1]} failed (rc {proc.returncode}): {proc.stderr.strip()[-600:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])
