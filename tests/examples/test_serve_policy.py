"""examples/serve_policy.py: Serve on 127.0.0.1 answers real HTTP clients with the policy's own actions,
in batches; a malformed request gets 400 and one line; Serve is shut down after.

The served policy is a CartPole MLP saved and loaded as a run leaves it (untrained: its actions are as
exact a check). Serve runs on the session's Ray with a replica of 0 CPUs: first the script's (in a
subprocess attached to that Ray), then the module's own (``start``), each shut down when its tests
are done, so that later tests in the worker find no Serve and all their CPUs."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from ray import serve

from examples.serve_policy import Args, answer, stack_json, start
from ray_sampler import EnvRunnerConfig
from ray_sampler.data import tree
from ray_sampler.policy import Policy, PolicyError
from ray_sampler.sampling.runner_build import build_policy
from tests.ray_start import free_port

ROOT = Path(__file__).resolve().parents[2]
NUM_REQUESTS = 48
NOT_ONE = "'obs' is not one observation of this policy:"
NESTED = gym.spaces.Dict(
    {"pos": gym.spaces.Box(-1, 1, (2,)), "rest": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1)))}
)
"""A Dict holding a Tuple: its observations come as JSON objects holding lists."""


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = gym.make("CartPole-v1")
    policy = build_policy(EnvRunnerConfig(env="CartPole-v1"), env.observation_space, env.action_space)
    return policy.save(tmp_path_factory.mktemp("serve") / "policy")


@pytest.fixture(scope="module")
def policy(policy_dir: Path) -> Policy:
    return Policy.from_checkpoint(policy_dir)


@pytest.fixture(scope="module")
def obs_batch(policy: Policy) -> np.ndarray:
    """Observations on which the random policy picks both actions (so equal answers mean something)."""
    obs = np.random.default_rng(0).normal(0.0, 2.0, (NUM_REQUESTS, 4)).astype(np.float32)
    assert set(policy.compute_actions(obs).tolist()) == {0, 1}
    return obs


def post(url: str, body: bytes | str | dict) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body) of ``POST url``; ``body`` a dict is sent as JSON."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post_all(url: str, bodies: list[Any]) -> list[tuple[int, Any]]:
    """Every body posted at once from a pool of threads (so that the replica gets them in batches)."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(lambda body: post(url, body), bodies))


class TestAnswer:
    """``answer`` and ``stack_json``, the replica's work, with no Serve."""

    def test_a_batch_with_an_observation_that_does_not_fit_answers_the_others(self, policy: Policy) -> None:
        obs = [[0.1, 0.2, 0.3, 0.4], [0.1], [-0.1, -0.2, -0.3, -0.4]]
        actions = policy.compute_actions(np.array([obs[0], obs[2]], np.float32)).tolist()
        assert answer(policy, obs) == [
            (200, {"action": actions[0]}),
            (400, {"error": f"{NOT_ONE} compute_actions: 'obs': a batch [N, 4] of {policy.observation_space} "
                            "allowed (got shape [1, 1])"}),
            (200, {"action": actions[1]}),
        ]  # fmt: skip

    def test_dict_and_tuple_observations_come_as_objects_and_lists(self) -> None:
        batch = stack_json(NESTED, [{"pos": [0.5, -0.5], "rest": [2, [0.25]]}, {"pos": [0, 1], "rest": [0, [1.0]]}])
        assert tree.map_structure(lambda leaf: leaf.tolist(), batch) == {
            "pos": [[0.5, -0.5], [0, 1]],
            "rest": ([2, 0], [[0.25], [1.0]]),
        }

    @pytest.mark.parametrize(
        ("obs", "error"),
        [
            ({"pos": [0.5, -0.5]}, "KeyError: 'rest'"),
            ({"pos": [0.5, -0.5], "rest": [1.5, [0.25]]}, "TypeError: float64 values where the space holds int64"),
            ({"pos": [0.5, -0.5], "rest": 2}, "TypeError: 'int' object is not subscriptable"),
        ],
        ids=["missing-key", "float-for-discrete", "number-for-tuple"],
    )
    def test_an_observation_that_does_not_fit_raises_a_policy_error(self, obs: Any, error: str) -> None:
        with pytest.raises(PolicyError, match=f"^{re.escape(error)}$"):
            stack_json(NESTED, [obs])


def test_script_serves_a_policy_folder_until_ctrl_c_then_shuts_serve_down(
    policy_dir: Path, policy: Policy, obs_batch: np.ndarray, ray_address: str
) -> None:
    # Runs before the module's in-process Serve starts (one Serve per Ray): the script attaches to
    # the session's Ray (RAY_ADDRESS), as the other examples' tests do.
    port = free_port()
    env = {**os.environ, "RAY_ADDRESS": ray_address}
    command = [sys.executable, str(ROOT / "examples" / "serve_policy.py"), str(policy_dir)]
    command += ["--port", str(port), "--num-cpus", "0"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and select.select([proc.stdout], [], [], 120)[0], "nothing printed in 120 s"
        first = proc.stdout.readline()
        assert re.fullmatch(
            rf"serving Policy\(MLPModule, Box\(.*\) -> Discrete\(2\)\) at http://127\.0\.0\.1:{port}/ "
            r"in batches of up to 8\n",
            first,
        ), first
        assert post(f"http://127.0.0.1:{port}/", {"obs": obs_batch[0].tolist()}) == (
            200,
            {"action": int(policy.compute_actions(obs_batch[:1])[0])},
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-2000:]
        assert out.splitlines()[-1] == "Serve shut down"  # after Ray's own lines about the stopped actors
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        serve.shutdown()  # a no-op where the script shut it down


@pytest.fixture(scope="module")
def url(policy: Policy, policy_dir: Path, ray_session: None) -> Iterator[str]:
    """Serve on the session's Ray, batches of up to 8 waiting 50 ms to fill, shut down at the end."""
    args = Args(path=policy_dir, port=free_port(), max_batch_size=8, batch_wait_timeout_s=0.05, num_cpus=0)
    try:
        yield start(policy, args)
    finally:
        serve.shutdown()


def test_concurrent_requests_get_the_actions_compute_actions_gives(
    url: str, policy: Policy, obs_batch: np.ndarray
) -> None:
    replies = post_all(url, [{"obs": obs.tolist()} for obs in obs_batch])
    assert replies == [(200, {"action": int(a)}) for a in policy.compute_actions(obs_batch)]


def test_an_observation_that_does_not_fit_gets_400_and_the_rest_of_its_batch_their_actions(
    url: str, policy: Policy, obs_batch: np.ndarray
) -> None:
    bodies: list[Any] = [{"obs": obs.tolist()} for obs in obs_batch[:16]]
    bodies[3], bodies[9] = {"obs": [0.1, 0.2]}, {"obs": ["a", "b", "c", "d"]}  # sent with the others
    expected = [(200, {"action": int(a)}) for a in policy.compute_actions(obs_batch[:16])]
    expected[3] = (400, {"error": f"{NOT_ONE} compute_actions: 'obs': a batch [N, 4] of {policy.observation_space} "
                                  "allowed (got shape [1, 2])"})  # fmt: skip
    expected[9] = (400, {"error": f"{NOT_ONE} TypeError: <U1 values where the space holds float32"})
    assert post_all(url, bodies) == expected


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("not json", "the body is not JSON: Expecting value: line 1 column 1 (char 0)"),
        ("[0.1, 0.2, 0.3, 0.4]", 'a JSON object {"obs": ...} is allowed (got list)'),
        (
            '{"observation": [0.1, 0.2, 0.3, 0.4]}',
            """a JSON object {"obs": ...} is allowed (got keys ['observation'])""",
        ),
    ],
    ids=["not-json", "a-bare-list", "no-obs-key"],
)
def test_a_body_that_is_not_an_obs_object_gets_400_with_one_line(url: str, body: str, error: str) -> None:
    assert post(url, body) == (400, {"error": error})


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port`` (Linux's /proc/net/tcp and tcp6;
    an IPv4 one dotted, an IPv6 one as its 32 hex digits: "0" * 32 is every interface)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]) if len(address) == 8 else address)
    return found


def test_serve_listens_on_127_0_0_1_only(url: str) -> None:
    assert listening_addresses(int(url.rstrip("/").rsplit(":", 1)[1])) == {"127.0.0.1"}
