"""Learner actors that average their gradients among themselves (an all-reduce), not through the driver.

``LearnerGroup(..., gradient_sync="allreduce")`` joins its M learner actors into one
``torch.distributed`` process group (the gloo backend, on CPUs) and runs each PPO update's epochs
inside the actors: for every minibatch each learner computes its gradients, the M gradients
(weighted by their minibatch rows) are summed by ``all_reduce``, and every learner applies the same
mean, so all keep identical weights, as with the driver's average. The driver sends each learner
its shard of the episodes and gets back only the loss terms: no gradient passes through it.

The functions here run inside a learner actor (``actor.__ray_call__.remote(fn, ...)``), so any
learner class with the LearnerGroup interface takes part. torch serves as the communication
library only (a numpy learner's gradients are copied into one flat float64 tensor); without torch,
``gradient_sync="driver"`` (the default) needs nothing more.

The rendezvous listens on a free port of the first learner's node while the group forms
(``127.0.0.1`` when every learner is on that node), as Ray's own processes listen on the nodes of
a cluster; nothing listens once the group is formed but gloo's connections between the learners.
"""

from __future__ import annotations

import socket
from typing import Any

import numpy as np

__all__ = ["join_group", "rendezvous_address", "replay_steps", "update_epochs"]

_TIMEOUT_S = 300


def rendezvous_address(learner: Any, local_only: bool) -> str:
    """``host:port`` of a free port on this actor's node (loopback when ``local_only``)."""
    import ray

    host = "127.0.0.1" if local_only else ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return f"{host}:{s.getsockname()[1]}"


def join_group(learner: Any, address: str, rank: int, world_size: int) -> int:
    """Joins this learner actor to the gloo process group at ``address`` as ``rank``."""
    import datetime

    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{address}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=_TIMEOUT_S),
    )
    return rank


def _mean_of_all(grads: dict[str, Any], rows: int) -> tuple[dict[str, np.ndarray], int]:
    """The row-weighted mean of every learner's ``grads`` (and the rows of all): one all_reduce of
    one flat tensor, summed in float64."""
    import torch
    import torch.distributed as dist

    keys = sorted(grads)
    arrays = [np.asarray(grads[k]) for k in keys]
    flat = np.concatenate([a.astype(np.float64).ravel() * rows for a in arrays] + [np.array([rows], np.float64)])
    tensor = torch.from_numpy(flat)
    dist.all_reduce(tensor)
    summed = tensor.numpy()
    total = round(float(summed[-1]))
    out, at = {}, 0
    for k, a in zip(keys, arrays, strict=True):
        out[k] = (summed[at : at + a.size] / max(total, 1)).reshape(a.shape).astype(a.dtype)
        at += a.size
    return out, total


def update_epochs(learner: Any, num_epochs: int, num_minibatches: int) -> tuple[list[dict[str, float]], list[float]]:
    """``num_epochs`` passes of ``num_minibatches`` all-reduced gradient steps over the learner's kept
    batch (``set_batch`` first); the loss terms of its minibatches that had rows, and the norms."""
    terms_seen: list[dict[str, float]] = []
    norms = []
    for _ in range(num_epochs):
        learner.plan_epoch(num_minibatches)
        for j in range(num_minibatches):
            terms, grads, rows = learner.compute_gradients(j)
            mean, total = _mean_of_all(grads, rows)
            if not total:
                continue
            norms.append(learner.apply_gradients(mean))
            if rows:
                terms_seen.append({k: float(v) for k, v in terms.items()})
    learner.weights_version += 1
    return terms_seen, norms


def replay_steps(learner: Any, num_updates: int) -> tuple[list[dict[str, Any]], list[float]]:
    """``num_updates`` all-reduced gradient steps on the batches the learner pulled from a replay
    (``pull_from_replay`` first); their loss terms and norms."""
    terms_seen, norms = [], []
    for j in range(num_updates):
        terms, grads, rows = learner.compute_gradients(j)
        mean, _ = _mean_of_all(grads, rows)
        norms.append(learner.apply_gradients(mean))
        terms_seen.append(terms)
    return terms_seen, norms
