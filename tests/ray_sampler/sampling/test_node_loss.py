"""Node loss: a worker node removed from a 3-node ``ray.cluster_utils.Cluster`` takes its runners
with it; they are replaced on the surviving nodes and sampling goes on within ``sample_timeout_s``.

The scenarios run in a process of their own (``node_loss_scenario.py``; a process joins one Ray, and
the session's Ray is not stopped for it), one after the other on one cluster: each with a new runner
group, a new worker node in place of the one the last scenario removed, and every CPU free."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.ray_sampler.sampling.node_loss_scenario import NUM_CALLS_AFTER_LOSS, NUM_RUNNERS, SAMPLE_TIMEOUT_S

REPO_ROOT = Path(__file__).resolve().parents[3]


def run_at_once(*runs: Sequence[str]) -> dict[str, Any]:
    """node_loss_scenario.py once per run (its scenarios, then flags), each in a process and on a
    cluster of its own, all started at once: scenario -> its findings, every run's together."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with contextlib.ExitStack() as stack:
        started = []
        for names in runs:
            out, err = (stack.enter_context(tempfile.TemporaryFile("w+")) for _ in range(2))  # no pipe to fill
            command = [sys.executable, "-m", "tests.ray_sampler.sampling.node_loss_scenario", *names]
            process = stack.enter_context(subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=err))
            stack.callback(process.kill)  # a no-op once it exited; else (a run failed, or ran out of time) it stops
            started.append((process, out, err))
        found: dict[str, Any] = {}
        deadline = time.monotonic() + 300
        for process, out, err in started:
            returncode = process.wait(timeout=max(0.0, deadline - time.monotonic()))
            out.seek(0)
            err.seek(0)
            assert returncode == 0, err.read()[-3000:]
            found.update(json.loads(out.read().strip().splitlines()[-1]))
        return found


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Any]:
    """Every scenario, one after the other on one 3-node cluster (a fresh group and worker node each)."""
    return run_at_once(["graceful", "abrupt", "no-restart"])


@pytest.mark.parametrize("removal", ["graceful", "abrupt"])
def test_sampling_continues_on_the_surviving_nodes(removal: str, scenarios: dict[str, Any]) -> None:
    found = scenarios[removal]
    assert found["error"] is None
    lost = found["runners_on_removed_node"]
    assert lost, "no runner ran on the removed node"
    assert len(found["sample_s"]) == NUM_CALLS_AFTER_LOSS
    assert max(found["sample_s"]) < SAMPLE_TIMEOUT_S
    assert found["num_env_runner_restarts"] == len(lost)
    assert found["num_healthy_env_runners"] == NUM_RUNNERS
    assert found["worker_indices"] == list(range(1, NUM_RUNNERS + 1))
    assert found["runners_on_removed_node_after"] == []
    assert sorted(line.split(" (")[0] for line in found["runner_failures"]) == [f"runner {i} died" for i in lost]
    assert all("ActorDiedError: The actor died because its node has died" in line for line in found["runner_failures"])
    assert found["continuity_error"] is None


def test_node_loss_without_restarts_raises_naming_the_runner(scenarios: dict[str, Any]) -> None:
    found = scenarios["no-restart"]
    lost = "|".join(str(i) for i in found["runners_on_removed_node"])
    assert re.fullmatch(
        rf"EnvRunnerFailedError: env runner ({lost}) failed: "
        r"ActorDiedError: The actor died because its node has died\. "
        r".*; restarts are disabled \(restart_failed_env_runners=False\)",
        found["error"],
    )
    assert found["continuity_error"] is None
