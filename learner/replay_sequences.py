"""Sequences from replay for a stateful (recurrent) module: ``sample_sequences``, each with its initial state.

A replay-based learner of a recurrent module trains on sequences drawn from an
:class:`~replay.buffer.EpisodeReplayBuffer`. ``sample_sequences`` draws ``batch_size_B`` episode
chunks of up to ``burn_in + batch_length_T`` steps (``sample_episodes(..., lookback=1)``) and
turns them into a time-dimension batch, one sequence per chunk, in the chunks' order: per-step
columns [B, burn_in + T, ...] zero padded at the end, ``loss_mask`` [B, burn_in + T],
``seq_lens`` [B] and ``state_in`` {k: [B, ...]}. A chunk's ``state_in`` is what the runner's
module held before the chunk's first step (see :mod:`connectors.learner.sequences`): the stored
``state_out`` of the step before it (the chunk's one lookback step, drawn from the stored steps,
or from the stored episode's own lookback when the chunk starts at a stored continuation's first
step), or the module's initial state when the chunk starts its episode (``t_started == 0``).

The first ``burn_in`` steps of each sequence are meant to be replayed without gradient to warm up
the state (R2D2's burn-in; :func:`learner.torch_burn_in.burn_in_states` for torch modules). Since
chunks start at uniformly drawn steps and stop at their episode's last stored step, a chunk that
starts fewer than ``burn_in + 1`` steps before that end has nothing left to train on after
burn-in: those steps are trained only as part of a sequence that starts earlier.

Uses no torch: the batch is numpy.
"""

from __future__ import annotations

from typing import Any

from connectors.learner.add_columns import AddColumnsFromEpisodesToTrainBatch
from connectors.learner.learner_piece import DEFAULT_MODULE_ID
from connectors.learner.sequences import AddStatesFromEpisodesToBatch, AddTimeDimToBatchAndZeroPad
from connectors.pipeline import ConnectorPipelineV2
from ray_sampler.data.columns import Columns
from ray_sampler.errors import ConfigError
from ray_sampler.modules.rl_module import is_stateful
from ray_sampler.validate import check_int
from replay.buffer import EpisodeReplayBuffer

__all__ = ["sample_sequences"]


def sample_sequences(
    buffer: EpisodeReplayBuffer,
    rl_module: Any,
    batch_size_B: int,
    batch_length_T: int,
    *,
    burn_in: int = 0,
    extra_model_outputs: tuple[str, ...] = (),
    module_id: str = DEFAULT_MODULE_ID,
) -> dict[str, Any]:
    """``batch_size_B`` sequences of up to ``burn_in + batch_length_T`` steps from ``buffer``, as one
    time-dimension batch (numpy; see the module docstring) for the stateful ``rl_module``.

    The batch holds ``obs``, ``actions``, ``rewards``, ``terminateds``, ``truncateds`` and the
    stored model outputs named in ``extra_model_outputs`` (each [B, burn_in + T, ...]), plus
    ``state_in``, ``loss_mask`` and ``seq_lens``. ``module_id`` keys the pieces' batch only: the
    module's own columns are returned. ConfigError for a module that is not stateful, or for
    episodes stored without ``state_out`` in their model outputs.
    """
    if not is_stateful(rl_module):
        raise ConfigError(f"sample_sequences needs a stateful module (got {type(rl_module).__name__})")
    check_int("batch_size_B", batch_size_B, minimum=1)
    check_int("batch_length_T", batch_length_T, minimum=1)
    check_int("burn_in", burn_in, minimum=0)
    max_seq_len = burn_in + batch_length_T
    episodes = buffer.sample_episodes(batch_size_B, max_seq_len, lookback=1)
    pipeline = ConnectorPipelineV2(
        [
            AddColumnsFromEpisodesToTrainBatch(tuple(extra_model_outputs), module_id=module_id),
            AddStatesFromEpisodesToBatch(max_seq_len, module_id=module_id),
            AddTimeDimToBatchAndZeroPad(max_seq_len, module_id=module_id),
        ]
    )
    batch: dict[str, Any] = pipeline(rl_module=rl_module, batch={}, episodes=episodes, shared_data={})[module_id]
    # sample_episodes cuts every chunk to at most max_seq_len steps, so each makes exactly one sequence.
    assert len(batch[Columns.SEQ_LENS]) == len(episodes), "a sampled chunk made more than one sequence"
    return batch
