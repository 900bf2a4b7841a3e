"""Flat n-step transitions as RLlib's 1-step transition episodes (``sample(sample_episodes=True)``).

Each sampled transition becomes a numpy'd :class:`SingleAgentEpisode` of one step, as RLlib's
``EpisodeReplayBuffer._sample_episodes`` builds them for ``batch_length_T=0``: observations
``[obs, next_obs]`` (``o_t`` and ``o_{t+n}``), actions ``[a_t]``, rewards ``[the n-step sum]``, the
transition's ``terminated``/``truncated``, ``t_started = t`` (the global timestep), no lookback,
infos ``[info_t, info_{t+n}]`` (empty dicts unless ``include_infos``), and extra model outputs
``n_step`` (the steps really used, see :mod:`replay.n_step`), ``weights`` (importance weights;
ones for uniform draws) and, with ``include_extra_model_outputs``, the stored outputs at ``t``.

>>> batch = {"obs": np.array([0, 5]), "next_obs": np.array([2, 6]), "actions": np.array([1, 0]),
...          "rewards": np.array([3.0, 5.0]), "terminateds": np.array([False, True]),
...          "truncateds": np.array([False, False]), "n_step": np.array([2, 1]), "t": np.array([0, 5]),
...          "keys": np.array([0, 5])}
>>> eps = transition_episodes(batch, ["a", "a"])
>>> [(e.get_observations().tolist(), e.get_rewards().tolist(), e.t_started, e.is_terminated) for e in eps]
[([0, 2], [3.0], 0, False), ([5, 6], [5.0], 5, True)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data import tree
from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.data.lookback import LookbackBuffer

__all__ = ["transition_episodes"]

_BATCH_KEYS = ("obs", "next_obs", "actions", "rewards", "terminateds", "truncateds", "n_step", "t", "keys")


def transition_episodes(
    batch: dict[str, Any], ids: list[str], *, infos_t: np.ndarray | None = None
) -> list[SingleAgentEpisode]:
    """One 1-step episode per transition of a flat ``batch`` (``n_step_transitions`` output, with
    ``weights`` if prioritized); ``ids``: each transition's episode id; ``infos_t``: the infos at
    ``obs`` (given with ``include_infos``, whose ``infos`` are those at ``next_obs``)."""
    batch_size_B = len(ids)
    obs_pairs = tree.map_structure(lambda o, n: np.stack([o, n], axis=1), batch["obs"], batch["next_obs"])
    weights = batch.get("weights")
    weights = np.ones(batch_size_B) if weights is None else np.asarray(weights, np.float64)
    extras = {k: v for k, v in batch.items() if k not in _BATCH_KEYS and k not in ("weights", "infos")}
    infos_next = batch.get("infos")
    out = []
    for i in range(batch_size_B):
        one = slice(i, i + 1)
        emo = {k: LookbackBuffer(tree.map_structure(lambda a, one=one: a[one], v)) for k, v in extras.items()}
        emo["n_step"] = LookbackBuffer(batch["n_step"][one])
        emo["weights"] = LookbackBuffer(weights[one])
        infos = [{}, {}] if infos_next is None or infos_t is None else [infos_t[i], infos_next[i]]
        out.append(
            SingleAgentEpisode.from_buffers(
                ids[i],
                observations=LookbackBuffer(tree.map_structure(lambda a, i=i: a[i], obs_pairs)),
                actions=LookbackBuffer(tree.map_structure(lambda a, one=one: a[one], batch["actions"])),
                rewards=LookbackBuffer(batch["rewards"][one]),
                infos=LookbackBuffer(infos),
                extra_model_outputs=emo,
                t_started=int(batch["t"][i]),
                terminated=bool(batch["terminateds"][i]),
                truncated=bool(batch["truncateds"][i]),
            )
        )
    return out
