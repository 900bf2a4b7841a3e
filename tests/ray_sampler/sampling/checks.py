"""Shared checks for the sampling tests: StampEnv configs and the every-step-once check."""

from __future__ import annotations

from typing import Any

import numpy as np

from ray_sampler.data.episode import SingleAgentEpisode
from ray_sampler.sampling.config import EnvRunnerConfig
from tests.helpers import STAMP_ID, full_state, stamp_creator

MODES = ["sync", "NextStep", "SameStep", "Disabled"]


def stamp_config(mode: str = "sync", **kwargs: Any) -> EnvRunnerConfig:
    """StampEnv through our SyncVectorEnv ("sync") or as a native vector env in an autoreset mode."""
    base: dict[str, Any] = {"num_envs_per_env_runner": 3, "rollout_fragment_length": 5}
    if mode == "sync":
        base["env"] = stamp_creator
    else:
        base.update(env=STAMP_ID, vectorization_mode="vector_entry_point", env_config={"autoreset_mode": mode})
    return EnvRunnerConfig(**{**base, **kwargs})


def stamps(ep: SingleAgentEpisode, indices: Any = None, **kwargs: Any) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in np.asarray(o)) for o in ep.get_observations(indices, **kwargs)]


def join(chunks: list[SingleAgentEpisode]) -> dict[str, SingleAgentEpisode]:
    joined: dict[str, SingleAgentEpisode] = {}
    for chunk in chunks:
        piece = SingleAgentEpisode.from_state(chunk.get_state())
        if chunk.id_ in joined:
            joined[chunk.id_].concat_episode(piece)
        else:
            joined[chunk.id_] = piece
    return joined


def assert_steps_once_and_continuous(chunks: list[SingleAgentEpisode]) -> None:
    """Every env step appears in exactly one chunk, and chunks join into gap-free episodes."""
    step_keys = [s for c in chunks for s in stamps(c)[1:]]
    assert len(step_keys) == len(set(step_keys)), "an env step was returned twice"
    for c in chunks:
        # Each observation carries its own info: the reset's or the step's that led to it.
        infos = c.get_infos(slice(-c.len_lookback_buffer - len(c) - 1, None))
        for (_, _, e, t), info in zip(stamps(c, slice(-c.len_lookback_buffer - len(c) - 1, None)), infos, strict=True):
            assert info == ({"episode": e} if t == 0 else {"t": t})
    for ep in join(chunks).values():
        obs = stamps(ep)
        w, v, e, t0 = obs[0]
        assert obs == [(w, v, e, t0 + k) for k in range(len(obs))]
        if ep.t_started == 0:
            assert t0 == 0
        assert np.asarray(ep.get_rewards()).tolist() == [float(t) for t in range(t0 + 1, t0 + len(ep) + 1)]


def by_first_step(chunks: list[SingleAgentEpisode]) -> dict[tuple, dict]:
    """Chunks keyed by their first data observation's stamp, compared on everything but the id."""
    out = {}
    for c in chunks:
        state = full_state(c)
        del state["id_"]
        out[stamps(c)[0]] = state
    return out
