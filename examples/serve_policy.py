"""Serve a trained policy over HTTP with Ray Serve: POST one observation, get its action back.

    python examples/serve_policy.py runs/ppo-CartPole-v1-<time>/ --port 8000 --max-batch-size 8

The path is a run directory, a checkpoint (``ckpt-N``) or a policy folder, loaded here (a bad path
fails before Ray starts) and shipped to one Serve replica. ``POST /`` with ``{"obs": <one
observation>}`` answers ``{"action": <its env action>}``; ``@serve.batch`` answers the requests that
arrive together, up to ``max_batch_size``, with one ``Policy.compute_actions`` call. A malformed body
or an observation that does not fit gets 400 and one line. Serve listens on 127.0.0.1 only
(docs/serving.md: how to put it behind a proxy) until Ctrl-C or ``--serve-for-s``. ``start`` deploys
it on a Ray this process has started (tests, bench/serve_bench.py); ``serve.shutdown()`` stops it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import ray
import tyro
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from ray_sampler.cli import parse
from ray_sampler.data import tree
from ray_sampler.errors import first_line
from ray_sampler.policy import Policy, PolicyError

HOST = "127.0.0.1"  # this machine only: nothing that listens on a port is opened to the world by default


@dataclasses.dataclass(frozen=True, kw_only=True)
class Args:
    """Knobs of this example."""

    path: tyro.conf.Positional[Path]
    """A run directory (runs/<algo>-<env>-<time>/), a checkpoint (ckpt-N) or a policy folder."""
    port: int = 8000
    """The HTTP port on 127.0.0.1."""
    max_batch_size: int = 8
    """Most requests answered by one compute_actions call (1: no batching)."""
    batch_wait_timeout_s: float = 0.002
    """Longest the first request of a batch waits for the batch to fill."""
    max_ongoing_requests: int = 64
    """Requests the replica takes at once (more wait in the proxy); at least max_batch_size."""
    num_cpus: float = 1.0
    """CPUs the replica reserves."""
    serve_for_s: float | None = None
    """Stop after this many seconds (default: serve until Ctrl-C)."""


def stack_json(space: gym.Space, items: list[Any]) -> Any:
    """JSON observations (a Dict's as objects, a Tuple's as lists) as a batch of ``space``, or PolicyError."""
    try:
        return _stack(space, items)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise PolicyError(f"{type(e).__name__}: {first_line(e)}") from None


def _stack(space: gym.Space, items: list[Any]) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: _stack(sub, [item[key] for item in items]) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_stack(sub, [item[i] for item in items]) for i, sub in enumerate(space.spaces))
    batch = np.asarray(items)
    # Refused rather than cast: strings for numbers, or 1.5 for a Discrete action (a cast would give 1).
    if space.dtype is not None and not np.can_cast(batch.dtype, space.dtype, "same_kind"):
        raise TypeError(f"{batch.dtype} values where the space holds {space.dtype}")
    return batch


def answer(policy: Policy, obs: list[Any]) -> list[tuple[int, dict[str, Any]]]:
    """(HTTP status, JSON body) for each observation, from one greedy ``compute_actions`` call; if the
    batch is refused, each observation alone, so that only those that do not fit get 400."""
    try:
        actions = policy.compute_actions(stack_json(policy.observation_space, obs), explore=False)
    except PolicyError as e:
        if len(obs) > 1:
            return [reply for item in obs for reply in answer(policy, [item])]
        return [(400, {"error": f"'obs' is not one observation of this policy: {first_line(e)}"})]
    return [(200, {"action": tree.map_structure(lambda a, i=i: a[i].tolist(), actions)}) for i in range(len(obs))]


@serve.deployment
class PolicyServer:
    """One replica: ``POST /`` ``{"obs": ...}`` -> ``{"action": ...}``, answered in batches."""

    def __init__(self, policy: Policy, args: Args) -> None:
        self.policy = policy
        self.act.set_max_batch_size(args.max_batch_size)  # serve.batch's setters
        self.act.set_batch_wait_timeout_s(args.batch_wait_timeout_s)

    async def __call__(self, request: Request) -> JSONResponse:
        if request.method != "POST":
            return JSONResponse({"error": f"only POST is answered (got {request.method})"}, status_code=405)
        try:
            body = await request.json()
        except ValueError as e:
            return JSONResponse({"error": f"the body is not JSON: {first_line(e)}"}, status_code=400)
        if not isinstance(body, dict) or "obs" not in body:
            got = type(body).__name__ if not isinstance(body, dict) else f"keys {sorted(body)}"
            return JSONResponse({"error": f'a JSON object {{"obs": ...}} is allowed (got {got})'}, status_code=400)
        status, reply = await self.act(body["obs"])
        return JSONResponse(reply, status_code=status)

    @serve.batch
    async def act(self, obs: list[Any]) -> list[tuple[int, dict[str, Any]]]:
        return answer(self.policy, obs)


def start(policy: Policy, args: Args) -> str:
    """Deploys ``policy`` with Serve on the Ray this process is attached to; returns its URL."""
    serve.start(proxy_location="HeadOnly", http_options={"host": HOST, "port": args.port})
    deployment = PolicyServer.options(
        max_ongoing_requests=max(args.max_ongoing_requests, args.max_batch_size),
        ray_actor_options={"num_cpus": args.num_cpus},
        graceful_shutdown_wait_loop_s=0.1,  # gone 0.1 s (not 2 s) after its last request when shut down
    )
    serve.run(deployment.bind(policy, args), name="policy", route_prefix="/")
    return f"http://{HOST}:{args.port}/"


def main(args: Args) -> None:
    try:
        policy = Policy.from_checkpoint(args.path)
    except PolicyError as e:
        raise SystemExit(f"error: {first_line(e)}") from None
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if serve.status().applications:  # its proxy's host and port would be ours, and we would shut it down
        raise SystemExit("error: Serve already runs on this Ray cluster: stop it (serve shutdown) or use another")
    try:
        url = start(policy, args)
        print(f"serving {policy} at {url} in batches of up to {args.max_batch_size}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: stop serving
            threading.Event().wait(args.serve_for_s)  # None: until Ctrl-C
    finally:
        serve.shutdown()  # its controller, proxy and replica: their CPUs go back to the cluster
        ray.shutdown()
    print("Serve shut down")


if __name__ == "__main__":
    main(parse(Args, sys.argv[1:], prog="examples/serve_policy.py", description=__doc__ or ""))
