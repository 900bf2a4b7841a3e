"""A node crash under Ray's own health checks (a real cluster's: the node is declared dead some
15-30 s after it stops answering): its runners are only "temporarily unavailable" until then, and
are not replaced on that node meanwhile. Each lost runner counts one restart and its steps once;
when the survivors have no room for the replacements, each call says so and goes on without them
instead of waiting out its deadline. The scenarios (``node_loss_scenario.py``, with
``--default-health-checks``) run at the same time, each in a process and on a 3-node cluster of its
own: most of each one's time is spent waiting for the health checks to declare its node dead."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ray_sampler.sampling.node_loss_scenario import SAMPLE_TIMEOUT_S
from tests.ray_sampler.sampling.test_node_loss import run_at_once

STEPS_PER_REQUEST = 2 * 10  # num_envs_per_env_runner x rollout_fragment_length of the scenarios


@pytest.fixture(scope="module")
def crashes() -> dict[str, Any]:
    return run_at_once(["abrupt", "--default-health-checks"], ["abrupt-no-room", "--default-health-checks"])


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
