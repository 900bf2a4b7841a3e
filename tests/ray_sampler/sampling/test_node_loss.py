"""Node loss: a worker node removed from a 3-node ``ray.cluster_utils.Cluster`` takes its runners
with it; they are replaced on the surviving nodes and sampling goes on within ``sample_timeout_s``.

And a node crash under Ray's own health checks (a real cluster's: the node is declared dead some
15-30 s after it stops answering): its runners are only "temporarily unavailable" until then, and
are not replaced on that node meanwhile. Each lost runner counts one restart and its steps once;
when the survivors have no room for the replacements, each call says so and goes on without them
instead of waiting out its deadline.

The scenarios run in processes of their own (``node_loss_scenario.py``; a process joins one Ray, and
the session's Ray is not stopped for it), all started at once: the removals under fast health
checks one after the other on one cluster (each with a new runner group, a new worker node in place
of the one the last scenario removed, and every CPU free), and each crash under Ray's own health
checks on a cluster of its own (most of its time is spent waiting for them to declare its node dead)."""

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
STEPS_PER_REQUEST = 2 * 10  # num_envs_per_env_runner x rollout_fragment_length of the scenarios


def run_at_once(*runs: Sequence[str]) -> list[dict[str, Any]]:
    """node_loss_scenario.py once per run (its scenarios, then flags), each in a process and on a
    cluster of its own, all started at once: each run's findings (scenario -> its findings), in order."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with contextlib.ExitStack() as stack:
        started = []
        for names in runs:
            out, err = (stack.enter_context(tempfile.TemporaryFile("w+")) for _ in range(2))  # no pipe to fill
            command = [sys.executable, "-m", "tests.ray_sampler.sampling.node_loss_scenario", *names]
            process = stack.enter_context(subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=err))
            stack.callback(process.kill)  # a no-op once it exited; else (a run failed, or ran out of time) it stops
            started.append((process, out, err))
        found: list[dict[str, Any]] = []
        deadline = time.monotonic() + 300
        for process, out, err in started:
            returncode = process.wait(timeout=max(0.0, deadline - time.monotonic()))
            out.seek(0)
            err.seek(0)
            assert returncode == 0, err.read()[-3000:]
            found.append(json.loads(out.read().strip().splitlines()[-1]))
        return found


@pytest.fixture(scope="module")
def runs() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the removals under fast health checks, the crashes under Ray's own), run at the same time."""
    removals, crash, crash_no_room = run_at_once(
        ["graceful", "no-restart"],
        ["abrupt", "--default-health-checks"],
        ["abrupt-no-room", "--default-health-checks"],
    )
    return removals, {**crash, **crash_no_room}


@pytest.fixture(scope="module")
def scenarios(runs: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """The graceful removal, then the one with restarts off, on one 3-node cluster (a fresh group and
    worker node each)."""
    return runs[0]


@pytest.fixture(scope="module")
def crashes(runs: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """A crash with room for the replacements (``abrupt``) and one without (``abrupt-no-room``)."""
    return runs[1]


def test_sampling_continues_on_the_surviving_nodes(scenarios: dict[str, Any]) -> None:
    """A node removed gracefully (its raylet told to shut down); an abrupt loss is the crash below."""
    found = scenarios["graceful"]
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


def _died_lines(found: dict[str, Any]) -> list[str]:
    return [line for line in found["runner_failures"] if " died (" in line]


@pytest.mark.parametrize("scenario", ["abrupt", "abrupt-no-room"])
def test_each_lost_runner_is_replaced_once_and_its_steps_counted_once(scenario: str, crashes: dict[str, Any]) -> None:
    found = crashes[scenario]
    lost = found["runners_on_removed_node"]
    assert found["error"] is None and lost
    assert found["num_env_runner_restarts"] == len(lost)  # before: 2 per lost runner
    assert found["num_env_steps_lost"] == STEPS_PER_REQUEST * len(lost)  # before: twice that
    assert sorted(line.split(" (")[0] for line in _died_lines(found)) == [f"runner {i} died" for i in lost]
    # Replaced once Ray declared them dead (their node gone), never while merely unavailable.
    assert all("ActorDiedError: The actor died because its node has died" in line for line in _died_lines(found))
    assert found["runners_on_removed_node_after"] == []
    assert found["worker_indices"] == list(range(1, len(found["worker_indices"]) + 1))  # replaced under their index
    assert found["continuity_error"] is None


def test_with_room_the_replacements_run_on_the_survivors(crashes: dict[str, Any]) -> None:
    found = crashes["abrupt"]
    assert found["num_healthy_env_runners"] == found["healthy"][-1] == 4
    assert found["waiting"][-1] == [] and max(found["sample_s"][-2:]) < SAMPLE_TIMEOUT_S


def test_without_room_each_call_says_so_and_goes_on_without_them(crashes: dict[str, Any]) -> None:
    found = crashes["abrupt-no-room"]
    lost = found["runners_on_removed_node"]
    # The last two calls, after the replacements started: no full deadline, the waiting runners named.
    assert found["waiting"][-2:] == [lost, lost] and found["healthy"][-2:] == [6 - len(lost)] * 2
    assert max(found["sample_s"][-2:]) < SAMPLE_TIMEOUT_S / 2
    waiting_line = (
        f"runners {lost} waiting for room (their node is gone and no live node has room): this call went on "
        "without them"
    )
    assert found["runner_failures"][-2:] == [waiting_line, waiting_line]
